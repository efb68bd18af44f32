"""The kind registry: names users may write, and documents checked into models with field paths."""

from __future__ import annotations

from typing import Any

import pytest

from meshplane.model.registry import REGISTRY, UnknownKind
from meshplane.model.resource import InvalidObject


def api_doc(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "meshplane.io/v1alpha1",
        "kind": "API",
        "metadata": {"name": "orders", "project": "shop"},
        "spec": {"basePath": "/orders", "backends": [{"host": "127.0.0.1", "port": 9001}]},
    }
    return {**doc, **overrides}


def error_paths(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidObject) as caught:
        REGISTRY.parse(doc)
    return [error.path for error in caught.value.errors]


@pytest.mark.parametrize(
    ("word", "kind"),
    [("API", "API"), ("api", "API"), ("apis", "API"), ("APIs", "API"), ("Project", "Project"), ("CLUSTERS", "Cluster")],
)
def test_resolve_accepts_the_kind_or_its_plural_in_any_case(word: str, kind: str) -> None:
    assert REGISTRY.resolve(word).kind == kind


def test_resolve_of_an_unknown_word_names_the_known_kinds() -> None:
    with pytest.raises(UnknownKind) as caught:
        REGISTRY.resolve("gadget")

    assert "gadget" in str(caught.value)
    assert all(info.kind in str(caught.value) for info in REGISTRY)


def test_get_takes_only_the_exact_kind_name() -> None:
    assert REGISTRY.get("API").plural == "apis"
    with pytest.raises(UnknownKind):
        REGISTRY.get("apis")


def test_every_kind_has_a_lower_case_plural_and_a_scope() -> None:
    for info in REGISTRY:
        assert info.plural.islower() and info.plural.endswith("s")
        assert info.plural.startswith(info.kind.lower().removesuffix("y"))
        assert REGISTRY.resolve(info.plural) is info

    assert [info.kind for info in REGISTRY if not info.namespaced] == [
        "Project",
        "Cluster",
        "CertificateRevocation",
        "KeySet",
    ]


def test_only_delivered_kinds_have_a_type_url() -> None:
    api = REGISTRY.get("API")

    assert REGISTRY.by_type_url(api.type_url) is api
    assert [info.kind for info in REGISTRY.delivered()] == [
        "API",
        "TLSCertificate",
        "Gateway",
        "Application",
        "Subscription",
        "RateLimitPolicy",
        "ApplicationKey",
        "KeySet",
    ]
    with pytest.raises(ValueError, match="not delivered"):
        _ = REGISTRY.get("Project").type_url


def test_parse_fills_defaults_and_normalises_the_kind_word() -> None:
    resource = REGISTRY.parse(api_doc(kind="apis"))

    assert resource.kind == "API"
    spec = resource.spec.to_wire()
    assert (spec["version"], spec["hostnames"], spec["backends"][0]["weight"]) == ("v1", ["*"], 100)


def test_parse_ignores_status_written_by_users() -> None:
    resource = REGISTRY.parse(api_doc(status={"clusters": [{"cluster": "x", "state": "Applied"}]}))

    assert resource.status.to_wire() == {"clusters": []}


@pytest.mark.parametrize(
    ("doc", "paths"),
    [
        (api_doc(spec={"basePath": "/o", "backends": [{"host": "h", "port": 0}]}), ["spec.backends[0].port"]),
        (
            api_doc(spec={"basePath": "/o", "backends": [{"host": "h", "port": 1, "prot": "x"}]}),
            ["spec.backends[0].prot"],
        ),
        (api_doc(spec={"backends": [{"host": "h", "port": 1}]}), ["spec.basePath"]),
        (
            api_doc(spec={"basePath": "o/", "backends": [{"host": "h", "port": 0}]}),
            ["spec.basePath", "spec.backends[0].port"],
        ),
        (
            api_doc(spec={"basePath": "/o", "backends": [{"host": "h", "port": 1, "timeout": "soon"}]}),
            ["spec.backends[0].timeout"],
        ),
        (
            api_doc(spec={"basePath": "/o", "hostnames": ["Bad_Host"], "backends": [{"host": "h", "port": 1}]}),
            ["spec.hostnames[0]"],
        ),
        (
            api_doc(
                spec={
                    "basePath": "/o",
                    "operations": [{"method": "FETCH", "path": "/a"}],
                    "backends": [{"host": "h", "port": 1}],
                }
            ),
            ["spec.operations[0].method"],
        ),
        (api_doc(metadata={"name": "Orders", "project": "shop"}), ["metadata.name"]),
        (api_doc(metadata={"name": "orders", "project": "shop", "labels": {"-x": "y"}}), ["metadata.labels"]),
        (api_doc(metadata={"name": "orders"}), ["metadata.project"]),
        (api_doc(apiVersion="v1"), ["apiVersion"]),
        (api_doc(kind="Gadget"), ["kind"]),
        ({"metadata": {"name": "orders"}}, ["kind"]),
        ({"kind": "Project", "metadata": {"name": "p", "project": "shop"}, "spec": {}}, ["metadata.project"]),
    ],
    ids=[
        "port",
        "unknown-field",
        "missing-field",
        "several-at-once",
        "duration",
        "hostname",
        "enum",
        "name",
        "label-key",
        "project-needed",
        "api-version",
        "unknown-kind",
        "no-kind",
        "cluster-scoped-with-project",
    ],
)
def test_parse_reports_every_error_at_its_wire_field_path(doc: dict[str, Any], paths: list[str]) -> None:
    assert error_paths(doc) == paths


@pytest.mark.parametrize(
    ("spec", "path", "words"),
    [
        ({"basePath": "/o", "backends": [{"host": "h", "port": 1, "weight": 0}]}, "spec.backends", "weight"),
        (
            {"basePath": "/o", "backends": [{"host": "h", "port": 1, "basePath": "/a"}, {"host": "h", "port": 2}]},
            "spec.backends",
            "basePath",
        ),
        (
            {
                "basePath": "/o",
                "operations": [{"method": "GET", "path": "/a"}] * 2,
                "backends": [{"host": "h", "port": 1}],
            },
            "spec.operations",
            "GET /a",
        ),
    ],
    ids=["no-weight", "base-paths-differ", "duplicate-operation"],
)
def test_rules_across_list_items_are_reported_at_the_list(spec: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(InvalidObject) as caught:
        REGISTRY.parse(api_doc(spec=spec))

    [error] = caught.value.errors
    assert error.path == path
    assert words in error.message


def test_a_document_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(InvalidObject) as caught:
        REGISTRY.parse(["not", "a", "mapping"])  # type: ignore[arg-type]

    assert caught.value.errors[0].path == ""
