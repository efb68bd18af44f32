"""Label selectors (kubectl's syntax and the structured form) and placement."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from meshplane.model.meta import LabelSelector, Placement, SelectorRequirement, parse_label_selector

LABELS = {"team": "checkout", "tier": "gold"}


@pytest.mark.parametrize(
    ("text", "wire"),
    [
        ("team=checkout", {"matchLabels": {"team": "checkout"}, "matchExpressions": []}),
        ("team==checkout", {"matchLabels": {"team": "checkout"}, "matchExpressions": []}),
        ("team=", {"matchLabels": {"team": ""}, "matchExpressions": []}),
        ("team!=x", {"matchLabels": {}, "matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["x"]}]}),
        (
            "team in (a, b)",
            {"matchLabels": {}, "matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]},
        ),
        (
            "team notin (a)",
            {"matchLabels": {}, "matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]},
        ),
        ("team", {"matchLabels": {}, "matchExpressions": [{"key": "team", "operator": "Exists", "values": []}]}),
        ("!team", {"matchLabels": {}, "matchExpressions": [{"key": "team", "operator": "DoesNotExist", "values": []}]}),
        ("example.com/team=a", {"matchLabels": {"example.com/team": "a"}, "matchExpressions": []}),
        ("", {"matchLabels": {}, "matchExpressions": []}),
    ],
)
def test_parse_label_selector_reads_every_kubectl_form(text: str, wire: dict) -> None:
    assert parse_label_selector(text).to_wire() == wire


def test_parse_label_selector_splits_terms_on_commas_outside_parentheses() -> None:
    selector = parse_label_selector("a=1, b in (x,y), !c, d, e!=2")

    assert selector.match_labels == {"a": "1"}
    assert [(r.key, r.operator.value, r.values) for r in selector.match_expressions] == [
        ("b", "In", ["x", "y"]),
        ("c", "DoesNotExist", []),
        ("d", "Exists", []),
        ("e", "NotIn", ["2"]),
    ]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("team in (a", "team in (a"),
        ("a b", "a b"),
        ("=x", "''"),
        ("!", "''"),
        ("te am=x", "te am"),
        ("a=b=c", "b=c"),
        ("team in ()", "at least one value"),
        ("x in (a b)", "a b"),
        ("-bad=1", "-bad"),
    ],
)
def test_parse_label_selector_refuses_what_is_not_a_selector(text: str, words: str) -> None:
    with pytest.raises(ValueError, match="label selector") as caught:
        parse_label_selector(text)

    assert words in str(caught.value)


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("team=checkout", True),
        ("team=other", False),
        ("team!=other", True),
        ("zone!=eu", True),
        ("team in (a,checkout)", True),
        ("team notin (checkout)", False),
        ("tier", True),
        ("zone", False),
        ("!zone", True),
        ("!tier", False),
        ("team=checkout,tier=silver", False),
        ("", True),
    ],
)
def test_selector_matches_labels_as_kubernetes_does(text: str, matches: bool) -> None:
    assert parse_label_selector(text).matches(LABELS) is matches


@pytest.mark.parametrize(
    ("operator", "values"),
    [("In", []), ("NotIn", []), ("Exists", ["x"]), ("DoesNotExist", ["x"])],
)
def test_requirement_values_must_fit_the_operator(operator: str, values: list[str]) -> None:
    with pytest.raises(ValidationError):
        SelectorRequirement.model_validate({"key": "k", "operator": operator, "values": values})


def test_empty_placement_selects_every_cluster() -> None:
    assert Placement().selects("edge-1", {})
    assert Placement().selects("edge-2", {"region": "eu"})


def test_placement_by_names_selects_only_those_clusters() -> None:
    placement = Placement(clusters=["edge-1", "edge-2"])

    assert placement.selects("edge-1", {})
    assert not placement.selects("edge-3", {"region": "eu"})


def test_placement_by_selector_selects_matching_labels() -> None:
    placement = Placement.model_validate({"clusterSelector": {"matchLabels": {"region": "eu"}}})

    assert placement.selects("edge-1", {"region": "eu", "tier": "edge"})
    assert not placement.selects("edge-2", {"region": "us"})
    assert not placement.selects("edge-3", {})


def test_placement_by_names_and_selector_selects_the_union() -> None:
    placement = Placement.model_validate(
        {
            "clusters": ["core"],
            "clusterSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["edge"]}]},
        }
    )

    assert placement.selects("core", {"tier": "core"})
    assert placement.selects("edge-1", {"tier": "edge"})
    assert not placement.selects("other", {"tier": "core"})


def test_placement_with_an_empty_selector_selects_every_cluster() -> None:
    placement = Placement(cluster_selector=LabelSelector())

    assert placement.selects("any", {})


def test_placement_refuses_cluster_names_that_are_not_dns_labels() -> None:
    with pytest.raises(ValidationError) as caught:
        Placement.model_validate({"clusters": ["Edge_1"]})

    assert caught.value.errors()[0]["loc"] == ("clusters", 0)
