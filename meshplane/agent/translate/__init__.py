"""Translation of API resources into the xDS resources the gateway and proxyless gRPC clients use."""

from meshplane.agent.translate.config import EnvoyConfig, GatewaySettings
from meshplane.agent.translate.translate import translate_apis

__all__ = ["EnvoyConfig", "GatewaySettings", "translate_apis"]
