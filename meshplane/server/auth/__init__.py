"""North-API security: who is calling (bearer tokens, OIDC) and what their role lets them do."""
