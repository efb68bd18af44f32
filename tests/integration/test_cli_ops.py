"""Operating from the shell, against real processes: `apply --wait` follows delivery to the clusters
(down to an Envoy that rejects), `get -w` streams changes, `diff` shows what an apply would change,
and `agent config-dump` shows what an agent serves its gateways."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from meshplane.agent.bootstrap import envoy_bootstrap
from meshplane_testing.cli import cli, meshplane
from meshplane_testing.documents import api
from meshplane_testing.envoy import run_envoy_config
from meshplane_testing.eventually import eventually
from meshplane_testing.meshplane import AgentProcess, ServerProcess, run_agent, run_server
from meshplane_testing.process import free_port

pytestmark = pytest.mark.timeout(90)


ITEMS = [{"method": "GET", "path": "/items"}]
"""The one operation an API of these tests declares unless it says otherwise."""


def apply(tmp_path: Path, server: ServerProcess, *docs: dict, args: tuple[str, ...] = ("--wait", "--timeout", "20")):
    manifest = tmp_path / f"manifest-{time.monotonic_ns()}.yaml"
    manifest.write_text(yaml.safe_dump_all(docs))
    return meshplane("apply", "-f", str(manifest), *args, server=server)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, AgentProcess]]:
    """A server and one agent (cluster edge-1) with no gateway: the agent applies at once."""
    tmp = tmp_path_factory.mktemp("ops")
    with run_server(tmp) as server, run_agent(tmp, "edge-1", server) as agent:
        eventually(lambda: _cluster_connected(server, "edge-1"), timeout=15.0, what="cluster edge-1 to connect")
        yield server, agent


def _cluster_connected(server: ServerProcess, cluster: str) -> bool:
    response = httpx.get(f"{server.url}/v1/clusters/{cluster}", headers=server.headers, timeout=5)
    return response.status_code == 200 and bool(response.json().get("status", {}).get("connected"))


def delivery(server: ServerProcess, name: str) -> list[dict]:
    response = httpx.get(f"{server.url}/v1/projects/default/apis/{name}", headers=server.headers, timeout=5)
    return response.json()["status"].get("clusters", [])


# --- apply --wait ---


def test_apply_wait_exits_0_once_every_placed_cluster_applied_the_new_version(
    fleet: tuple[ServerProcess, AgentProcess], tmp_path: Path
) -> None:
    server, _ = fleet
    first = apply(tmp_path, server, api("waited", operations=ITEMS))
    applied_first = delivery(server, "waited")
    changed = apply(tmp_path, server, api("waited", operations=[{"method": "POST", "path": "/items"}]))
    applied_changed = delivery(server, "waited")

    assert first.returncode == 0, first.stdout + first.stderr
    assert "apis/waited -p default edge-1 Applied" in first.stdout.splitlines()
    assert [e["state"] for e in applied_first] == ["Applied"]
    # The command returned only once the cluster reported the version the change made, not the old one.
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert [e["state"] for e in applied_changed] == ["Applied"]
    assert applied_changed[0]["version"] != applied_first[0]["version"]


def test_apply_wait_of_an_unchanged_object_returns_at_once(
    fleet: tuple[ServerProcess, AgentProcess], tmp_path: Path
) -> None:
    server, _ = fleet
    assert apply(tmp_path, server, api("steady", operations=ITEMS)).returncode == 0

    started = time.monotonic()
    again = apply(tmp_path, server, api("steady", operations=ITEMS))

    assert again.returncode == 0, again.stdout + again.stderr
    assert "apis/steady -p default edge-1 Applied" in again.stdout
    assert time.monotonic() - started < 10


def test_apply_wait_completes_at_once_for_objects_placed_on_no_cluster(
    fleet: tuple[ServerProcess, AgentProcess], tmp_path: Path
) -> None:
    server, _ = fleet
    nowhere = api("nowhere", operations=ITEMS, placement={"clusterSelector": {"matchLabels": {"region": "mars"}}})
    project = {"apiVersion": "meshplane.io/v1alpha1", "kind": "Project", "metadata": {"name": "lonely"}, "spec": {}}

    result = apply(tmp_path, server, project, nowhere)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "apis/nowhere -p default: placed on no cluster" in result.stdout
    assert "projects/lonely: not delivered to clusters" in result.stdout


def test_apply_wait_times_out_with_exit_2_while_a_placed_cluster_is_offline(tmp_path: Path) -> None:
    with run_server(tmp_path) as server:
        with run_agent(tmp_path, "edge-off", server):
            eventually(lambda: _cluster_connected(server, "edge-off"), timeout=15.0, what="cluster edge-off to connect")
        # The agent is gone; the cluster stays registered and the object is placed on it.

        result = apply(tmp_path, server, api("stuck", operations=ITEMS), args=("--wait", "--timeout", "2"))

    assert result.returncode == 2, result.stdout + result.stderr
    assert "apis/stuck -p default edge-off Pending" in result.stdout
    assert "timed out after 2s waiting for: apis/stuck -p default on edge-off" in result.stdout


def test_apply_wait_exits_1_with_envoys_message_when_the_gateway_rejects(tmp_path: Path) -> None:
    with run_server(tmp_path) as server, run_agent(tmp_path, "edge-strict", server) as agent:
        # A gateway whose operator allows only tiny regexes: templated paths are rejected by Envoy itself.
        bootstrap = envoy_bootstrap("gw-strict", "127.0.0.1", agent.xds_port, admin_port=free_port())
        bootstrap["layered_runtime"] = {
            "layers": [{"name": "strict", "static_layer": {"re2.max_program_size.error_level": 15}}]
        }
        with run_envoy_config(tmp_path, "gw-strict", bootstrap) as envoy:
            envoy.wait_listener(agent.gateway_port)
            good = apply(tmp_path, server, api("orders", operations=ITEMS))
            templated = [
                {"method": "GET", "path": "/items"},
                {"method": "GET", "path": "/items/{id}/parts/{part}/x/{y}"},
            ]
            rejected = apply(tmp_path, server, api("orders", operations=templated))
            status = meshplane("status", "-o", "json", server=server)

    assert good.returncode == 0, good.stdout + good.stderr
    assert rejected.returncode == 1, rejected.stdout + rejected.stderr
    assert "apis/orders -p default edge-strict Failed" in rejected.stdout
    [failure] = [line for line in rejected.stdout.splitlines() if line.startswith("failed ")]
    assert failure.startswith("failed apis/orders -p default on edge-strict: ")
    assert "RE2 program size" in failure
    [cluster] = [c for c in json.loads(status.stdout) if c["name"] == "edge-strict"]
    assert (cluster["outOfDate"], bool(cluster["behindSince"])) == (1, True)
    assert cluster["lastError"].startswith("API default/orders: ") and "RE2" in cluster["lastError"]


# --- get -w ---


class LineStream:
    """A running CLI command whose standard output is read line by line as it comes."""

    def __init__(self, *args: str, server: ServerProcess):
        argv, env = cli(args, server)
        self.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def next_matching(self, check: Callable[[str], bool], timeout: float = 15.0) -> str:
        """The next line that passes `check` (others, like status updates, are skipped)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"the command ended: {self.popen.stderr.read() if self.popen.stderr else ''}")
            self.seen.append(line)
            if check(line):
                return line
        raise AssertionError(f"no matching line within {timeout}s; saw {self.seen}")

    def interrupt(self) -> int:
        """Ctrl-C, then the exit code."""
        self.popen.send_signal(signal.SIGINT)
        try:
            return self.popen.wait(timeout=10)
        finally:
            if self.popen.poll() is None:
                self.popen.kill()
                self.popen.wait()


@pytest.fixture
def stream() -> Iterator[Callable[..., LineStream]]:
    started: list[LineStream] = []

    def start(*args: str, server: ServerProcess) -> LineStream:
        started.append(LineStream(*args, server=server))
        return started[-1]

    yield start
    for running in started:
        if running.popen.poll() is None:
            running.popen.kill()
            running.popen.wait()


def starts_with(prefix: str) -> Callable[[str], bool]:
    return lambda line: line.startswith(prefix)


def test_get_watch_lists_then_streams_added_modified_and_deleted(
    fleet: tuple[ServerProcess, AgentProcess], stream: Callable[..., LineStream]
) -> None:
    server, _ = fleet
    rest = server.http()
    assert rest.put(
        "/v1/projects/watched", json={"kind": "Project", "metadata": {"name": "watched"}, "spec": {}}
    ).is_success
    base = "/v1/projects/watched/apis"
    existing = rest.put(f"{base}/existing", json=api("existing", project="watched", operations=ITEMS)).json()

    watch = stream("get", "apis", "-w", "-p", "watched", server=server)
    listed = watch.next_matching(starts_with("ADDED apis/existing "))
    created = rest.put(f"{base}/fresh", json=api("fresh", project="watched", operations=ITEMS)).json()
    added = watch.next_matching(starts_with("ADDED apis/fresh "))
    updated = rest.put(f"{base}/fresh", json=api("fresh", project="watched", operations=ITEMS, version="v2")).json()
    # The watch sends each object's newest state: a status write right after the update may be what it shows.
    version = int(updated["metadata"]["resourceVersion"])
    modified = watch.next_matching(
        lambda line: line.startswith("MODIFIED apis/fresh ") and int(line.split()[2]) >= version
    )
    assert rest.delete(f"{base}/fresh").is_success
    deleted = watch.next_matching(starts_with("DELETED apis/fresh "))
    code = watch.interrupt()
    rest.close()

    assert int(listed.split()[2]) >= int(existing["metadata"]["resourceVersion"])
    assert int(added.split()[2]) >= int(created["metadata"]["resourceVersion"])
    assert modified
    assert int(deleted.split()[2]) > int(updated["metadata"]["resourceVersion"])
    assert code == 0
    # The object listed first is not repeated as if it had been created while watching.
    assert not any(line.startswith("ADDED apis/existing") for line in watch.seen[1:])


def test_get_watch_of_one_name_prints_json_events(
    fleet: tuple[ServerProcess, AgentProcess], stream: Callable[..., LineStream]
) -> None:
    server, _ = fleet
    rest = server.http()

    watch = stream("get", "api", "jsonwatched", "-w", "-o", "json", server=server)
    # Whether the create lands before the command lists or after, it reads as ADDED first.
    rest.put("/v1/projects/default/apis/other-name", json=api("other-name", operations=ITEMS))
    rest.put("/v1/projects/default/apis/jsonwatched", json=api("jsonwatched", operations=ITEMS))
    first = json.loads(watch.next_matching(lambda line: True))
    code = watch.interrupt()
    rest.close()

    assert first["type"] == "ADDED"
    assert first["object"]["metadata"]["name"] == "jsonwatched"
    assert first["object"]["spec"]["basePath"] == "/jsonwatched"
    assert isinstance(first["revision"], int)
    assert code == 0


# --- diff ---


def test_diff_exits_0_and_prints_nothing_when_the_file_matches_the_server_defaults_included(
    fleet: tuple[ServerProcess, AgentProcess], tmp_path: Path
) -> None:
    server, _ = fleet
    doc = api("same", operations=ITEMS)
    with server.http() as http:
        assert http.put("/v1/projects/default/apis/same", json=doc).is_success
    del doc["metadata"]["project"]  # -p default supplies it, as for apply
    manifest = tmp_path / "same.yaml"
    manifest.write_text(yaml.safe_dump(doc))

    result = meshplane("diff", "-f", str(manifest), server=server)

    assert (result.returncode, result.stdout) == (0, ""), result.stderr


def test_diff_exits_1_with_a_unified_diff_of_spec_and_labels_and_marks_new_objects(
    fleet: tuple[ServerProcess, AgentProcess], tmp_path: Path
) -> None:
    server, _ = fleet
    with server.http() as http:
        assert http.put("/v1/projects/default/apis/drift", json=api("drift", operations=ITEMS)).is_success
    changed = api("drift", operations=[{"method": "POST", "path": "/items"}])
    changed["metadata"]["labels"] = {"team": "checkout"}
    manifest = tmp_path / "drift.yaml"
    manifest.write_text(yaml.safe_dump_all([changed, api("brand-new", operations=ITEMS)]))

    result = meshplane("diff", "-f", str(manifest), server=server)

    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["--- apis/drift -p default (server)", "+++ apis/drift -p default (file)"]
    assert "-  - method: GET" in lines and "+  - method: POST" in lines
    assert "+    team: checkout" in lines
    assert "apis/brand-new -p default: new" in lines
    # Nothing was applied.
    with server.http() as http:
        assert http.get("/v1/projects/default/apis/brand-new").status_code == 404


def test_diff_exits_2_on_an_invalid_document(fleet: tuple[ServerProcess, AgentProcess], tmp_path: Path) -> None:
    server, _ = fleet
    broken = api("broken", operations=ITEMS)
    broken["spec"]["backends"] = []
    manifest = tmp_path / "broken.yaml"
    manifest.write_text(yaml.safe_dump(broken))

    result = meshplane("diff", "-f", str(manifest), server=server)

    assert result.returncode == 2
    assert "backends" in result.stderr


# --- agent config-dump and admin endpoint ---


def test_config_dump_shows_the_gateway_listener_the_route_of_an_api_and_the_objects_held(
    fleet: tuple[ServerProcess, AgentProcess], tmp_path: Path
) -> None:
    server, agent = fleet
    assert apply(tmp_path, server, api("dumped", operations=ITEMS)).returncode == 0
    [entry] = delivery(server, "dumped")

    as_json = meshplane("agent", "config-dump", "--admin-address", agent.admin_address, server=None)
    as_yaml = meshplane("agent", "config-dump", "--admin-address", agent.admin_address, "-o", "yaml", server=None)

    assert as_json.returncode == 0, as_json.stderr
    dump = json.loads(as_json.stdout)
    assert yaml.safe_load(as_yaml.stdout) == dump
    assert dump["cluster"] == "edge-1"
    by_type = {t["typeUrl"].rsplit(".", 1)[-1]: t["resources"] for t in dump["gateways"]}
    [listener] = by_type["Listener"]
    assert listener["name"] == "gateway"
    assert listener["resource"]["@type"].endswith("envoy.config.listener.v3.Listener")
    assert listener["resource"]["address"]["socket_address"]["port_value"] == agent.gateway_port
    routes = {r["name"]: r["resource"] for r in by_type["RouteConfiguration"]}
    assert "/dumped" in json.dumps(routes["gateway"])
    held = {(o["kind"], o["name"]): o for o in dump["objects"]}
    assert held["API", "default/dumped"]["version"] == entry["version"]
    assert held["API", "default/dumped"]["rejected"] is False
    assert held["API", "default/dumped"]["object"]["spec"]["basePath"] == "/dumped"
    assert dump["rejected"] == []


def test_agent_admin_serves_metrics_and_health(fleet: tuple[ServerProcess, AgentProcess], tmp_path: Path) -> None:
    server, agent = fleet
    assert apply(tmp_path, server, api("counted", operations=ITEMS)).returncode == 0

    metrics = httpx.get(f"http://{agent.admin_address}/metrics", timeout=5)
    health = httpx.get(f"http://{agent.admin_address}/healthz", timeout=5)

    assert metrics.status_code == 200
    assert 'meshplane_agent_updates_total{result="applied"}' in metrics.text
    assert "meshplane_build_info" in metrics.text
    assert (health.status_code, health.text) == (200, "ok")


def test_config_dump_of_an_agent_that_is_not_there_is_a_one_line_error() -> None:
    result = meshplane("agent", "config-dump", "--admin-address", f"127.0.0.1:{free_port()}", server=None)

    assert result.returncode == 1
    assert "cannot reach the agent admin at" in result.stderr
    assert "Traceback" not in result.stderr
