"""Rollouts through a real fleet: three clusters in waves canary → eu → rest, each with its agent and Envoy. Every
claim about what a cluster serves is checked by traffic through its gateway, never by status alone."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from meshplane.agent.bootstrap import envoy_bootstrap
from meshplane.model.rollouts import rollout_name
from meshplane_testing import documents
from meshplane_testing.envoy import run_envoy, run_envoy_config
from meshplane_testing.eventually import eventually
from meshplane_testing.gateway import Gateway
from meshplane_testing.meshplane import AgentProcess, ServerProcess, run_agent, run_server
from meshplane_testing.process import free_port
from meshplane_testing.upstream import run_upstream

CLUSTERS = {"edge-1": {"region": "eu", "tier": "canary"}, "eu-1": {"region": "eu"}, "us-1": {"region": "us"}}
UPSTREAMS = ("v1", "v2", "v3")
SERVER_ENV = {"MESHPLANE_ROLLOUT_INTERVAL": "0.2"}
FIGURES_EVERY = ["--figures-interval", "0.3"]


@dataclass
class Fleet:
    tmp_path: Path
    ports: dict[str, int]
    """upstream name -> its port ("broken" answers 500)."""
    server_ports: tuple[int, int]
    stack: contextlib.ExitStack
    server: ServerProcess
    rest: httpx.Client
    gateways: dict[str, Gateway] = field(default_factory=dict)
    agents: dict[str, AgentProcess] = field(default_factory=dict)
    server_stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def kill_and_restart_server(self) -> None:
        """kill -9, then a new server process on the same store and ports: its agents reconnect to it."""
        self.server.process.kill()
        self.server_stack.close()
        self.server_stack = contextlib.ExitStack()
        self.server = self.server_stack.enter_context(
            run_server(self.tmp_path, ports=self.server_ports, env=SERVER_ENV)
        )
        self.rest = self.server_stack.enter_context(self.server.http())


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp_path = tmp_path_factory.mktemp("rollouts")
    with contextlib.ExitStack() as stack:
        ports = {name: stack.enter_context(run_upstream(name))[0] for name in UPSTREAMS}
        ports["broken"] = stack.enter_context(run_upstream("broken", status=500))[0]
        server_ports = (free_port(), free_port())
        fleet = Fleet(tmp_path, ports, server_ports, stack, None, None)  # type: ignore[arg-type]
        stack.callback(lambda: fleet.server_stack.close())
        fleet.server = fleet.server_stack.enter_context(run_server(tmp_path, ports=server_ports, env=SERVER_ENV))
        fleet.rest = fleet.server_stack.enter_context(fleet.server.http())
        for cluster, labels in CLUSTERS.items():
            admin = free_port()  # the agent reads its gateway's figures there
            flags = [*FIGURES_EVERY, "--envoy-admin-address", f"127.0.0.1:{admin}"]
            agent = stack.enter_context(run_agent(tmp_path, cluster, fleet.server, labels=labels, extra=flags))
            fleet.agents[cluster] = agent
            if cluster == "edge-1":
                # The canary's gateway allows only tiny regexes: a templated path is refused by this Envoy alone.
                bootstrap = envoy_bootstrap("gw-edge-1", "127.0.0.1", agent.xds_port, admin_port=admin)
                bootstrap["layered_runtime"] = {
                    "layers": [{"name": "strict", "static_layer": {"re2.max_program_size.error_level": 15}}]
                }
                envoy = stack.enter_context(run_envoy_config(tmp_path, "gw-edge-1", bootstrap))
            else:
                envoy = stack.enter_context(run_envoy(tmp_path, f"gw-{cluster}", agent.xds_port, admin_port=admin))
            envoy.wait_listener(agent.gateway_port)
            fleet.gateways[cluster] = Gateway(agent.gateway_port)
            stack.callback(fleet.gateways[cluster].close)
        yield fleet


def upstream_at(gateway: Gateway, path: str) -> str | None:
    """Which upstream answers `path` at this gateway now (None: no 200 answer)."""
    try:
        answer = gateway.request("GET", path)
    except httpx.TransportError:
        return None
    return answer.json().get("upstream") if answer.status_code == 200 else None


def serving(fleet: Fleet, path: str) -> dict[str, str | None]:
    return {cluster: upstream_at(gateway, path) for cluster, gateway in fleet.gateways.items()}


def wait_serving(fleet: Fleet, path: str, expected: dict[str, str | None], timeout: float = 20.0) -> None:
    eventually(lambda: serving(fleet, path) == expected, timeout=timeout, interval=0.1, what=f"{path} → {expected}")


def api_doc(fleet: Fleet, name: str, upstream: str, case: str, **spec: Any) -> dict[str, Any]:
    return documents.api(name, labels={"case": case}, backends=[documents.backend(fleet.ports[upstream])], **spec)


def policy(case: str, canary_bake: str = "4s", **spec: Any) -> dict[str, Any]:
    waves = [
        {"name": "canary", "clusters": ["edge-1"], "bake": canary_bake},
        {"name": "eu", "clusterSelector": {"matchLabels": {"region": "eu"}}, "bake": "2s"},
        {"name": "rest"},
    ]
    body = {"selector": {"kinds": ["API"], "matchLabels": {"case": case}}, "waves": waves, **spec}
    return documents.document("RolloutPolicy", case, spec=body)


def put(rest: httpx.Client, path: str, doc: dict[str, Any]) -> dict[str, Any]:
    answer = rest.put(path, json=doc)
    assert answer.status_code in (200, 201), answer.text
    return answer.json()


def start_case(fleet: Fleet, case: str, canary_bake: str = "4s", **policy_spec: Any) -> str:
    """API `case` served by v1 everywhere, then a policy governing its next changes; its path."""
    put(fleet.rest, f"/v1/projects/default/apis/{case}", api_doc(fleet, case, "v1", case))
    wait_serving(fleet, f"/{case}/x", dict.fromkeys(CLUSTERS, "v1"))
    put(fleet.rest, f"/v1/projects/default/rolloutpolicies/{case}", policy(case, canary_bake, **policy_spec))
    return f"/{case}/x"


def rollout(fleet: Fleet, case: str) -> dict[str, Any]:
    answer = fleet.rest.get(f"/v1/projects/default/rollouts/{rollout_name('API', case)}")
    answer.raise_for_status()
    return answer.json()["spec"]


def wait_phase(fleet: Fleet, case: str, phase: str, timeout: float = 30.0) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        spec = rollout(fleet, case)
        return spec if spec["phase"] == phase else None

    return eventually(reached, timeout=timeout, interval=0.1, what=f"rollout of {case} {phase}")


class Watcher:
    """Samples what every gateway serves of one path, all along a rollout."""

    def __init__(self, fleet: Fleet, path: str):
        self.fleet, self.path = fleet, path
        self.samples: list[dict[str, str | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(serving(self.fleet, self.path))
            time.sleep(0.05)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def ever(self, cluster: str, upstream: str) -> bool:
        return any(sample[cluster] == upstream for sample in self.samples)


def never_ahead(samples: list[dict[str, str | None]], new: str) -> None:
    """At no moment did a later wave serve the change while an earlier one did not."""
    for sample in samples:
        if sample["eu-1"] == new:
            assert sample["edge-1"] == new, sample
        if sample["us-1"] == new:
            assert sample["eu-1"] == new, sample


def test_a_healthy_change_reaches_each_wave_in_order_and_the_others_serve_the_old_version_meanwhile(
    fleet: Fleet,
) -> None:
    path = start_case(fleet, "healthy")
    started = time.monotonic()
    with Watcher(fleet, path) as watcher:
        put(fleet.rest, "/v1/projects/default/apis/healthy", api_doc(fleet, "healthy", "v2", "healthy"))
        wait_serving(fleet, path, {"edge-1": "v2", "eu-1": "v1", "us-1": "v1"}, timeout=10)
        wait_serving(fleet, path, {"edge-1": "v2", "eu-1": "v2", "us-1": "v1"}, timeout=10)
        done = wait_phase(fleet, "healthy", "Succeeded")
        wait_serving(fleet, path, dict.fromkeys(CLUSTERS, "v2"))
    took = time.monotonic() - started
    never_ahead(watcher.samples, "v2")
    assert [w["state"] for w in done["waves"]] == ["Succeeded"] * 3
    assert [[c["name"] for c in w["clusters"]] for w in done["waves"]] == [["edge-1"], ["eu-1"], ["us-1"]]
    print(f"three-wave rollout: {took:.1f} s, of which 6.0 s bake")
    metrics = fleet.rest.get("/metrics").text
    assert 'meshplane_rollout_transitions_total{entered="Succeeded"}' in metrics
    assert 'meshplane_rollout_transitions_total{entered="NextWave"}' in metrics


def test_a_change_the_canary_envoy_refuses_is_rolled_back_and_no_later_wave_receives_it(fleet: Fleet) -> None:
    path = start_case(fleet, "refused")
    templated = [{"method": "GET", "path": "/x"}, {"method": "GET", "path": "/items/{id}/parts/{part}/x/{y}"}]
    with Watcher(fleet, "/refused/items/7/parts/8/x/9") as watcher:
        put(
            fleet.rest,
            "/v1/projects/default/apis/refused",
            api_doc(fleet, "refused", "v2", "refused", operations=templated),
        )
        ended = wait_phase(fleet, "refused", "RolledBack")
        time.sleep(1)
    assert "RE2 program size" in ended["reason"]
    assert not watcher.ever("eu-1", "v2") and not watcher.ever("us-1", "v2")
    stored = fleet.rest.get("/v1/projects/default/apis/refused").json()
    assert stored["spec"]["backends"][0]["port"] == fleet.ports["v1"]  # the store equals what is served
    assert stored["spec"]["operations"] == []
    wait_serving(fleet, path, dict.fromkeys(CLUSTERS, "v1"))


def test_a_change_whose_backend_answers_5xx_at_the_canary_is_rolled_back_by_the_error_ratio(fleet: Fleet) -> None:
    path = start_case(fleet, "erring", canary_bake="20s", failOn={"errorRatio": 0.2, "minRequests": 20})
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            upstream_at(fleet.gateways["edge-1"], path)
            time.sleep(0.02)

    caller = threading.Thread(target=traffic, daemon=True)
    with Watcher(fleet, path) as watcher:
        caller.start()
        try:
            put(fleet.rest, "/v1/projects/default/apis/erring", api_doc(fleet, "erring", "broken", "erring"))
            ended = wait_phase(fleet, "erring", "RolledBack", timeout=20)
        finally:
            stop.set()
            caller.join(timeout=10)
    assert "answered 5xx" in ended["reason"]
    assert watcher.ever("edge-1", None)  # the canary did serve the broken backend
    assert not watcher.ever("eu-1", None) and not watcher.ever("us-1", None)
    wait_serving(fleet, path, dict.fromkeys(CLUSTERS, "v1"))


PAUSED_BAKE = 20.0
"""The canary's bake in the pause test: long enough that the pause, sent once the bake began, lands inside it
however loaded the machine is."""


def test_pause_holds_the_rollout_and_resume_continues_it(fleet: Fleet) -> None:
    path = start_case(fleet, "paused", canary_bake=f"{PAUSED_BAKE:.0f}s")
    name = rollout_name("API", "paused")
    put(fleet.rest, "/v1/projects/default/apis/paused", api_doc(fleet, "paused", "v2", "paused"))
    wait_serving(fleet, path, {"edge-1": "v2", "eu-1": "v1", "us-1": "v1"}, timeout=10)
    started = eventually(lambda: rollout(fleet, "paused")["waves"][0].get("bakeStartedAt"), what="the canary's bake")
    fleet.rest.post(f"/v1/projects/default/rollouts/{name}/pause").raise_for_status()
    baked = datetime.fromisoformat(started) + timedelta(seconds=PAUSED_BAKE + 1)
    time.sleep(max(0.0, (baked - datetime.now(UTC)).total_seconds()))  # past the end of the canary's bake
    assert serving(fleet, path) == {"edge-1": "v2", "eu-1": "v1", "us-1": "v1"}
    assert rollout(fleet, "paused")["phase"] == "Paused"
    refused = fleet.rest.post(f"/v1/projects/default/rollouts/{name}/pause")
    assert refused.status_code == 409
    fleet.rest.post(f"/v1/projects/default/rollouts/{name}/resume").raise_for_status()
    wait_phase(fleet, "paused", "Succeeded")
    wait_serving(fleet, path, dict.fromkeys(CLUSTERS, "v2"))


def test_a_newer_write_mid_rollout_supersedes_it_and_later_waves_never_see_the_superseded_version(
    fleet: Fleet,
) -> None:
    path = start_case(fleet, "superseded")
    with Watcher(fleet, path) as watcher:
        put(fleet.rest, "/v1/projects/default/apis/superseded", api_doc(fleet, "superseded", "v2", "superseded"))
        wait_serving(fleet, path, {"edge-1": "v2", "eu-1": "v1", "us-1": "v1"}, timeout=10)
        put(fleet.rest, "/v1/projects/default/apis/superseded", api_doc(fleet, "superseded", "v3", "superseded"))
        wait_phase(fleet, "superseded", "Succeeded")
        wait_serving(fleet, path, dict.fromkeys(CLUSTERS, "v3"))
    assert not watcher.ever("eu-1", "v2") and not watcher.ever("us-1", "v2")
    never_ahead(watcher.samples, "v3")


def test_an_offline_cluster_is_skipped_under_skip_and_waited_for_under_wait(fleet: Fleet) -> None:
    late = {"metadata": {"name": "late-1", "labels": {"region": "ap"}}, "spec": {}}
    fleet.rest.put("/v1/clusters/late-1", json=late).raise_for_status()
    try:
        path = start_case(fleet, "skipping")
        put(fleet.rest, "/v1/projects/default/apis/skipping", api_doc(fleet, "skipping", "v2", "skipping"))
        done = wait_phase(fleet, "skipping", "Succeeded")
        late = [c for w in done["waves"] for c in w["clusters"] if c["name"] == "late-1"]
        assert late[0]["state"] == "Skipped"
        wait_serving(fleet, path, dict.fromkeys(CLUSTERS, "v2"))

        waiting_path = start_case(fleet, "waiting", offline="Wait")
        put(fleet.rest, "/v1/projects/default/apis/waiting", api_doc(fleet, "waiting", "v2", "waiting"))
        wait_serving(fleet, waiting_path, dict.fromkeys(CLUSTERS, "v2"), timeout=15)
        time.sleep(1)
        spec = rollout(fleet, "waiting")
        assert (spec["phase"], spec["currentWave"]) == ("Progressing", 2)
        with (
            run_agent(fleet.tmp_path, "late-1", fleet.server, labels={"region": "ap"}) as agent,
            run_envoy(fleet.tmp_path, "gw-late-1", agent.xds_port) as envoy,
        ):
            envoy.wait_listener(agent.gateway_port)
            wait_phase(fleet, "waiting", "Succeeded")
            late_gateway = Gateway(agent.gateway_port)
            assert upstream_at(late_gateway, waiting_path) == "v2"
            assert upstream_at(late_gateway, path) == "v2"  # the skipped change, taken when it connected
            late_gateway.close()
    finally:
        fleet.rest.delete("/v1/clusters/late-1")


def test_a_server_killed_between_waves_resumes_the_rollout(fleet: Fleet) -> None:
    path = start_case(fleet, "restarted")
    put(fleet.rest, "/v1/projects/default/apis/restarted", api_doc(fleet, "restarted", "v2", "restarted"))
    wait_serving(fleet, path, {"edge-1": "v2", "eu-1": "v1", "us-1": "v1"}, timeout=10)
    fleet.kill_and_restart_server()
    assert serving(fleet, path) == {"edge-1": "v2", "eu-1": "v1", "us-1": "v1"}
    wait_phase(fleet, "restarted", "Succeeded", timeout=40)
    wait_serving(fleet, path, dict.fromkeys(CLUSTERS, "v2"))


def test_history_and_audit_tell_what_a_rollout_did_and_only_to_those_who_may_see(fleet: Fleet) -> None:
    start_case(fleet, "audited")
    templated = [{"method": "GET", "path": "/items/{id}/parts/{part}/x/{y}"}]
    put(
        fleet.rest,
        "/v1/projects/default/apis/audited",
        api_doc(fleet, "audited", "v2", "audited", operations=templated),
    )
    wait_phase(fleet, "audited", "RolledBack")
    name = rollout_name("API", "audited")

    versions = fleet.rest.get("/v1/projects/default/apis/audited/history").raise_for_status().json()["items"]
    assert [v["who"] for v in versions] == [f"rollout/{name}", "token/bootstrap-admin", "token/bootstrap-admin"]
    restored, refused, first = (
        fleet.rest.get(f"/v1/projects/default/apis/audited/history/{v['revision']}").json()["spec"] for v in versions
    )
    assert restored == first and refused != first
    entries = fleet.rest.get("/v1/audit", params={"who": f"rollout/{name}"}).raise_for_status().json()["items"]
    assert ("API", "audited", "update") in {(e["kind"], e["name"], e["operation"]) for e in entries}
    assert all(e["project"] == "default" for e in entries)
    states = fleet.rest.get(f"/v1/projects/default/rollouts/{name}/history").raise_for_status().json()["items"]
    phases = [
        fleet.rest.get(f"/v1/projects/default/rollouts/{name}/history/{s['revision']}").json()["spec"]["phase"]
        for s in states
    ]
    assert phases[0] == "RolledBack" and phases[-1] == "Progressing"

    fleet.rest.post("/v1/projects", json=documents.project("elsewhere"))
    token = fleet.rest.post("/v1/tokens", json={"name": "elsewhere-viewer", "role": "viewer", "project": "elsewhere"})
    bound = {"Authorization": f"Bearer {token.raise_for_status().json()['token']}"}
    with httpx.Client(base_url=fleet.server.url, headers=bound, timeout=10) as viewer:
        assert viewer.get("/v1/audit", params={"who": f"rollout/{name}"}).json()["items"] == []
        assert viewer.get(f"/v1/projects/default/rollouts/{name}").status_code == 404
        assert viewer.post(f"/v1/projects/default/rollouts/{name}/pause").status_code == 404
    token = fleet.rest.post("/v1/tokens", json={"name": "default-viewer", "role": "viewer", "project": "default"})
    own = {"Authorization": f"Bearer {token.raise_for_status().json()['token']}"}
    with httpx.Client(base_url=fleet.server.url, headers=own, timeout=10) as viewer:
        assert viewer.get(f"/v1/projects/default/rollouts/{name}").status_code == 200
        assert viewer.post(f"/v1/projects/default/rollouts/{name}/resume").status_code == 403
