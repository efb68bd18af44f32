"""The enforcer: an Envoy ext_authz service that checks opaque API keys against digests fed by the agent."""
