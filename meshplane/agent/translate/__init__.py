"""Translation of API resources into the Envoy resources the gateway serves."""

from meshplane.agent.translate.config import EnvoyConfig, GatewaySettings
from meshplane.agent.translate.translate import translate_apis

__all__ = ["EnvoyConfig", "GatewaySettings", "translate_apis"]
