"""What meshplane renders for the shipped examples and the render tests' golden scenarios, as objects.

Tests that hand renders to Istio's own tools (istiod's generator, `istioctl analyze`) take them from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from meshplane.server.render.offline import project_documents

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "intents"
GOLDEN = REPO / "tests" / "unit" / "render" / "golden"
EXAMPLE_CLUSTERS = ("core-1", "edge-1", "edge-2")


def example_render(cluster: str, *extra: dict[str, Any]) -> list[dict[str, Any]]:
    """The Kubernetes objects `cluster` receives from the examples and the `extra` meshplane objects
    (meshplane's own kinds left out)."""
    docs = [doc for path in sorted(EXAMPLES.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]
    rendered = project_documents([*docs, *extra], cluster)
    return [o for o in rendered if not o["apiVersion"].startswith("meshplane.io/")]


def golden_scenarios() -> dict[str, list[dict[str, Any]]]:
    """Each golden file of the render tests ("service/edge-1", ...) as its objects."""
    return {
        f"{path.parent.name}/{path.stem}": [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        for path in sorted(GOLDEN.glob("*/*.yaml"))
    }
