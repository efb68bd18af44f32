"""The web console: a single page served by the management server at /ui/, speaking the north REST API."""
