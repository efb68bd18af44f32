"""The Helm chart (charts/meshplane) through the `helm` that scripts/build-helm caches: lint, render."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from meshplane_testing.kube import REPO, cache_dir
from meshplane_testing.process import require_binary

CHART = REPO / "charts" / "meshplane"
VALUES_SETS = sorted((CHART / "ci").glob("*-values.yaml"))
"""The documented values sets the chart is tested with (charts/meshplane/ci/)."""
DEPLOY_VALUES = {part: REPO / "deploy" / f"{part}-values.yaml" for part in ("server", "agent")}
"""The values deploy/server and deploy/agent are rendered with."""
HELM_VERSION = (REPO / "scripts" / "helm-version").read_text().strip()


def helm_binary() -> str:
    """$HELM, else the cached build; MissingRequirement (a skip, a failure in CI) without either."""
    override = [path for path in [os.environ.get("HELM")] if path]
    return require_binary("helm", *override, str(cache_dir() / f"helm-{HELM_VERSION}" / "helm"))


class HelmFailed(RuntimeError):
    """helm exited non-zero; the message is its standard error."""


def helm(*args: str) -> str:
    """Run helm with `args`; its standard output, or HelmFailed with what it printed on standard error."""
    result = subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, timeout=60, check=False, env=_helm_env()
    )
    if result.returncode != 0:
        raise HelmFailed(result.stderr.strip() or result.stdout.strip())
    return result.stdout


def render(
    *values: Path, release: str = "meshplane", namespace: str = "meshplane-system", set_values: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """The objects `helm template` renders with these values files (and `--set` pairs), CRDs included."""
    args = ["template", release, str(CHART), "--namespace", namespace, "--include-crds"]
    for path in values:
        args += ["--values", str(path)]
    for pair in set_values:
        args += ["--set", pair]
    return [doc for doc in yaml.safe_load_all(helm(*args)) if doc]


def _helm_env() -> dict[str, str]:
    """No user configuration, cache or plugins of the machine's: helm reads and writes only scratch places."""
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / "meshplane-helm-home"
    return {
        **os.environ,
        "HELM_CONFIG_HOME": str(scratch / "config"),
        "HELM_CACHE_HOME": str(scratch / "cache"),
        "HELM_DATA_HOME": str(scratch / "data"),
    }
