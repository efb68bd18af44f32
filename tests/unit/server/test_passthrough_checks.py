"""The write-time rule between TLS passthrough and HTTP ports, read from stored IngressIntents."""

from __future__ import annotations

from typing import Any

from meshplane.server.intent_checks import _http_behind_passthrough
from meshplane_testing.resources import resource, stored


def _passthrough(name: str, tls: dict[str, Any]) -> Any:
    spec = {
        "hosts": [f"{name}.example.com"],
        "entities": [{"name": "legacy", "tls": tls}],
        "routes": [{"match": {"prefix": "/"}, "to": {"service": "vault", "port": 8443}}],
    }
    return stored(resource("IngressIntent", name, spec))


def test_an_http_port_behind_a_stored_passthrough_is_refused_and_an_unreadable_intent_is_skipped() -> None:
    vault = resource("ServiceIntent", "vault", {"service": {"name": "vault", "port": 8443, "protocol": "HTTP"}})
    readable = _passthrough("legacy", {"mode": "PASSTHROUGH"})
    unreadable = _passthrough("old", {"mode": "PASSTHROUGH"})
    unreadable.spec["entities"][0]["tls"]["credentialName"] = "ns/no-longer-valid"
    [error] = _http_behind_passthrough(vault.spec, [unreadable, readable])
    assert error.path == "spec.service.protocol" and "IngressIntent legacy" in error.message
