"""The Gateway API conformance suite against meshplane, end to end (scripts/run-gateway-conformance).

Brings up the test cluster (meshplane_testing/kube_cluster.py) with the Gateway API's CRDs and the
GatewayClass `meshplane`, a management server, an agent that serves the cluster's Gateway API objects
(each Gateway on its own address of a 127.x range) and a real Envoy bootstrapped to it; then runs the
suite's binary (tools/gateway-conformance, built by scripts/build-gateway-api) on the cluster's
kubeconfig, which writes its report under build/conformance/. Prints a summary per profile and exits
non-zero when the suite fails, leaves no report, or finds other results than the report committed under
docs/conformance/ claims (`--update` writes the new report there instead).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from meshplane import __version__
from meshplane.gatewayapi.program import SUPPORTED_FEATURES
from meshplane.gatewayapi.state import CONTROLLER_NAME
from meshplane_testing.envoy import run_envoy
from meshplane_testing.kube import REPO, KubeAPIServer
from meshplane_testing.kube_cluster import GATEWAY_API_VERSION, KubeCluster, gateway_api_dir, start_kube_cluster
from meshplane_testing.meshplane import run_agent, run_server
from meshplane_testing.process import MissingRequirement

GATEWAY_CLASS = "meshplane"
CLUSTER = "conformance"
REPORT_DIR = REPO / "docs" / "conformance"
RUN_DIR = REPO / "build" / "conformance"
GATEWAY_ADDRESSES = "127.77.0.10-127.77.0.250"
"""One loopback address per Gateway the suite creates (it creates a few dozen over a run)."""
CLAIMED_FEATURES = ",".join(sorted(SUPPORTED_FEATURES))
"""What is claimed unless told otherwise: what the GatewayClass's status says meshplane supports."""
SUITE_TIMEOUT = "60m"


def report_path(directory: Path = RUN_DIR) -> Path:
    """The report's file, named by the suite's version."""
    return directory / f"gateway-api-{GATEWAY_API_VERSION}-report.yaml"


def suite_binary() -> Path:
    """Where scripts/build-gateway-api leaves the suite built from tools/gateway-conformance's sources now."""
    printed = subprocess.run(
        [str(REPO / "scripts" / "build-gateway-api"), "--conformance-path"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    binary = Path(printed)
    if not os.access(binary, os.X_OK):
        raise MissingRequirement(f"the conformance suite is not built at {binary} (run scripts/build-gateway-api)")
    return binary


def gateway_api_crds() -> list[dict[str, Any]]:
    """The standard-channel CRDs scripts/build-gateway-api caches."""
    path = gateway_api_dir() / "standard-install.yaml"
    if not path.exists():
        raise MissingRequirement(f"the Gateway API CRDs are not at {path} (run scripts/build-gateway-api)")
    return [document for document in yaml.safe_load_all(path.read_text()) if document]


def install_gateway_class(api: KubeAPIServer) -> None:
    """The GatewayClass the suite's Gateways name, for meshplane's controller (the suite expects it to exist)."""
    api.apply(
        f"/apis/gateway.networking.k8s.io/v1/gatewayclasses/{GATEWAY_CLASS}",
        {
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "GatewayClass",
            "metadata": {"name": GATEWAY_CLASS},
            "spec": {"controllerName": CONTROLLER_NAME},
        },
    )


@contextlib.contextmanager
def conformance_environment(work: Path, addresses: str) -> Iterator[KubeCluster]:
    """The cluster, the server, the agent serving its Gateway API objects and the agent's Envoy."""
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with start_kube_cluster(logs, crds=gateway_api_crds()) as cluster:
        _step(f"cluster up: {cluster.kubeconfig} (pod CIDR {cluster.pod_cidr})")
        install_gateway_class(cluster.api)
        with run_server(work) as server:
            _step(f"server up: {server.url}")
            gateway = ["--gateway-api", "--gateway-api-addresses", addresses]
            with run_agent(work, CLUSTER, server, kubeconfig=cluster.kubeconfig, extra=gateway) as agent:
                _step(f"agent up: xDS on 127.0.0.1:{agent.xds_port}, Gateways on {addresses}")
                with run_envoy(work, "gateway-conformance", agent.xds_port) as envoy:
                    _step(f"Envoy up: admin on 127.0.0.1:{envoy.admin_port}")
                    yield cluster


def run_suite(binary: Path, cluster: KubeCluster, report: Path, suite_args: Sequence[str], log: Path) -> int:
    """The suite's exit code; its output goes to the terminal and to `log`."""
    report.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        str(binary),
        "-test.v",
        f"-test.timeout={SUITE_TIMEOUT}",
        f"-gateway-class={GATEWAY_CLASS}",
        f"-report-output={report}",
        *suite_args,
    ]
    _step(f"suite: {' '.join(argv)}")
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    with open(log, "wb") as output:
        process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=log.parent)
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
            output.write(line)
        return process.wait()


def summary(report: Path) -> list[str]:
    """Per profile: its core and extended results and counts, and the tests that failed."""
    document = yaml.safe_load(report.read_text())
    version, channel = document.get("gatewayAPIVersion"), document.get("gatewayAPIChannel")
    lines = [f"Gateway API {version} ({channel}), mode {document.get('mode')}"]
    if not document.get("profiles"):
        lines.append("  no profile results: the suite stopped before its tests (its output above says why)")
    for profile in document.get("profiles") or []:
        for level in ("core", "extended"):
            result = profile.get(level)
            if not result:
                continue
            counts = result.get("statistics") or {}
            tally = ", ".join(f"{kind.lower()} {counts.get(kind, 0)}" for kind in ("Passed", "Failed", "Skipped"))
            lines.append(f"  {profile['name']} {level}: {result.get('result')} ({tally})")
            lines.extend(f"    failed: {name}" for name in result.get("failedTests") or [])
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="run-gateway-conformance",
        description="Run the Gateway API conformance suite against meshplane on a test cluster of real parts.",
    )
    parser.add_argument("--report", type=Path, default=report_path(), help="where the suite writes its report")
    parser.add_argument(
        "--committed", type=Path, default=report_path(REPORT_DIR), help="the report the run must agree with"
    )
    parser.add_argument("--update", action="store_true", help="write the run's report over the committed one")
    parser.add_argument("--addresses", default=GATEWAY_ADDRESSES, help="the agent's --gateway-api-addresses")
    parser.add_argument(
        "--supported-features", default=CLAIMED_FEATURES, help="features claimed (the suite's -supported-features)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, kubeconfig) afterwards")
    parser.add_argument(
        "suite_args", nargs="*", help="more of the suite's flags, after --, e.g. -run-test=HTTPRouteSimpleSameNamespace"
    )
    options = parser.parse_args(argv)

    try:
        binary = suite_binary()
    except MissingRequirement as missing:
        print(f"run-gateway-conformance: {missing}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="meshplane-conformance-"))
    _step(f"work directory: {work}")
    report: Path = options.report.resolve()
    report.unlink(missing_ok=True)
    started = time.monotonic()
    code = 1
    try:
        with conformance_environment(work, options.addresses) as cluster:
            claimed = [f"-supported-features={options.supported_features}", f"-version={__version__}"]
            suite_args = [*claimed, *options.suite_args]
            code = run_suite(binary, cluster, report, suite_args, work / "logs" / "suite.log")
    except (MissingRequirement, RuntimeError, TimeoutError, subprocess.SubprocessError, OSError) as failure:
        print(f"run-gateway-conformance: the environment did not come up: {failure}", file=sys.stderr)
        options.keep = True
    finally:
        _step(f"done in {time.monotonic() - started:.0f}s")
        if options.keep or code != 0:  # a failed run's logs are what explains it
            _step(f"logs kept in {work / 'logs'}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if not report.exists():
        print("run-gateway-conformance: the suite wrote no report", file=sys.stderr)
        return code or 1
    print("\n".join(["", f"Report: {report}", *summary(report)]))
    if options.update:
        shutil.copyfile(report, options.committed)
        print(f"Committed report updated: {options.committed}")
        return code
    if differences := disagreement(report, options.committed):
        print(f"run-gateway-conformance: the run disagrees with {options.committed}:", file=sys.stderr)
        print("\n".join(differences), file=sys.stderr)
        return code or 3
    return code


def disagreement(report: Path, committed: Path) -> list[str]:
    """The summary lines of `report` and of the `committed` one that differ (- committed, + this run); none
    when they claim the same results."""
    if not committed.exists():
        return [f"- (no committed report at {committed})"]
    claimed, found = summary(committed), summary(report)
    gone = [f"- {line}" for line in claimed if line not in found]
    return gone + [f"+ {line}" for line in found if line not in claimed]


def _step(message: str) -> None:
    print(f"==> {message}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
