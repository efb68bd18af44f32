"""`istioctl analyze`, offline, on what meshplane renders.

Every example cluster and every golden scenario is analyzed with the stock gateways' Services,
Deployments and Pods beside it (so gateway selectors and ports have something to match), and the
namespaces its objects live in; an Error or Warning from the analysis is a render defect and fails
the test; one message is accepted, with its reason (ACCEPTED).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from meshplane_testing.istio_judge import istio_version, namespace, stock_gateways
from meshplane_testing.process import MissingRequirement
from meshplane_testing.renders import EXAMPLE_CLUSTERS, example_render, golden_scenarios

ACCEPTED = {
    # The analyzer asks every DestinationRule credential for a workloadSelector, which a Secret needs; a
    # `configmap://` CA bundle of the rule's own namespace is served to any sidecar there.
    "a CA bundle from a ConfigMap": r"IST0128 DestinationRule shop/ledger-dr: ",
}


def istioctl() -> Path:
    cache = Path(
        os.environ.get("MESHPLANE_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "meshplane"
    )
    path = cache.expanduser() / f"istio-{istio_version()}" / "istioctl"
    if not path.is_file():
        raise MissingRequirement(f"istioctl is not built: {path} (the Istio build of .ci/run makes it)")
    return path


def analyze(objects: list[dict[str, Any]], directory: Path) -> list[str]:
    """The errors and warnings of `istioctl analyze` on `objects`, with the stock gateways and namespaces."""
    namespaces = {o["metadata"].get("namespace") for o in objects} - {None, "istio-system"}
    path = directory / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([*stock_gateways(), *(namespace(n) for n in sorted(namespaces)), *objects]))
    completed = subprocess.run(
        [istioctl(), "analyze", "--use-kube=false", "--all-namespaces", "--output", "json", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if not completed.stdout.strip().startswith("["):
        pytest.fail(f"istioctl analyze failed ({completed.returncode}): {completed.stderr}")
    return [
        f"{m['code']} {m.get('origin', '')}: {m['message']}"
        for m in json.loads(completed.stdout)
        if m["level"] in ("Error", "Warning")
    ]


def scenarios() -> dict[str, list[dict[str, Any]]]:
    """The example clusters' renders and the golden files, by name."""
    examples = {f"example/{cluster}": example_render(cluster) for cluster in EXAMPLE_CLUSTERS}
    return examples | {f"golden/{name}": objects for name, objects in golden_scenarios().items()}


@pytest.fixture(scope="module")
def analyses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    return {name: analyze(objects, tmp_path_factory.mktemp("analyze")) for name, objects in scenarios().items()}


def test_analyze_reports_no_error_or_warning_on_any_render(analyses: dict[str, list[str]]) -> None:
    unknown = {
        name: [m for m in messages if not any(re.search(p, m) for p in ACCEPTED.values())]
        for name, messages in analyses.items()
    }
    assert {name: messages for name, messages in unknown.items() if messages} == {}
