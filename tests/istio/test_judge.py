"""The judge itself (meshplane_testing.istio_judge): what it says of bad input, and when it is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshplane_testing.istio_judge import Call, JudgeError, judge, judge_binary, namespace
from meshplane_testing.process import MissingRequirement


def gateway(name: str, servers: object) -> dict:
    return {
        "apiVersion": "networking.istio.io/v1",
        "kind": "Gateway",
        "metadata": {"name": name, "namespace": "web"},
        "spec": {"selector": {"istio": "ingressgateway"}, "servers": servers},
    }


HTTP_SERVER = [{"port": {"number": 80, "name": "http", "protocol": "HTTP"}, "hosts": ["site.example.org"]}]


def test_istiod_validation_refuses_a_gateway_name_that_is_not_a_dns_label() -> None:
    verdict = judge([namespace("web"), gateway("site.public", HTTP_SERVER), gateway("site", HTTP_SERVER)])
    assert verdict.errors_of("Gateway", "site.public") == ('invalid gateway name: "site.public"',)
    assert verdict.errors_of("Gateway", "site") == ()


def test_a_call_from_a_pod_the_objects_lack_is_an_error_naming_it() -> None:
    verdict = judge([namespace("web")], [Call("lost", source="web/nobody-0", port=80, host="site.example.org")])
    result = verdict.result("lost")
    assert (result.decision, result.error) == ("error", 'no pod "web/nobody-0" among the objects')


def test_an_object_istiod_cannot_read_is_refused_with_its_name() -> None:
    with pytest.raises(JudgeError, match="Gateway web/broken"):
        judge([gateway("broken", "not a list")])


def test_the_judge_is_a_missing_requirement_until_built(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MESHPLANE_CACHE_DIR", str(tmp_path))
    judge_binary.cache_clear()
    try:
        with pytest.raises(MissingRequirement, match="build-istio-judge"):
            judge_binary()
    finally:
        judge_binary.cache_clear()
