"""An end-to-end run is observable: metrics that move, JSON logs, and no secret anywhere an operator looks.

One run of real processes on loopback (the server, an agent with its enforcer and rate limiter, Envoy and
an upstream), scraped before and after a few writes and calls through the gateway.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from meshplane.dataplane import RATELIMIT_DOMAIN
from meshplane_testing.access_fleet import ISSUER, data_plane, declare
from meshplane_testing.envoy import EnvoyProcess
from meshplane_testing.eventually import eventually
from meshplane_testing.gateway import Gateway, status
from meshplane_testing.identity import IdentityProvider
from meshplane_testing.meshplane import AgentProcess, ServerProcess, ServiceProcess, run_server
from meshplane_testing.metrics import Scrape
from meshplane_testing.process import Process
from meshplane_testing.redis import RedisServer
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(150)]

CLUSTER = "edge"
ISSUED = ("good", "lonely", "blocked", "imported", "expired", "revoked")
"""The keys `declare` has the server issue or import (the others it only makes up)."""
OBJECT_NAMES = {"signed", "opaque", "users", "limited", "local", "cors", "good", "lonely", "blocked"} | {
    f"{app}-{api}" for app in ("good", "blocked") for api in ("signed", "opaque", "cors")
}
"""What `declare` names its objects: never a label value."""
REPORT = "/meshplane.v1.ControlPlane/ReportStatus"


@dataclass
class Run:
    server: ServerProcess
    agent: AgentProcess
    envoy: EnvoyProcess
    services: dict[str, ServiceProcess]
    api: httpx.Client
    keys: dict[str, str]
    before: dict[str, Scrape]
    after: dict[str, Scrape]

    def scrape(self) -> dict[str, Scrape]:
        """Every process's /metrics: the server's north API, the agent's admin, the services' own ports."""
        others = {"agent": f"http://{self.agent.admin_address}/metrics"}
        others |= {name: f"http://127.0.0.1:{service.metrics_port}/metrics" for name, service in self.services.items()}
        return {"server": self.scrape_server(), **{name: Scrape(_get(url)) for name, url in others.items()}}

    def scrape_server(self) -> Scrape:
        response = self.api.get("/metrics")  # as the admin: the server may want a token for /metrics
        response.raise_for_status()
        return Scrape(response.text)

    def processes(self) -> dict[str, Process]:
        """Every meshplane process of the run (Envoy and Redis are not ours)."""
        return {
            "server": self.server.process,
            "agent": self.agent.process,
            **{name: service.process for name, service in self.services.items()},
        }


def _get(url: str) -> str:
    response = httpx.get(url, timeout=5)
    response.raise_for_status()
    return response.text


def synced(scrape: Scrape) -> bool:
    """The cluster's agent is connected and holds, applied, everything placed on it."""
    return (
        scrape.total("meshplane_connected_agents") == 1
        and scrape.has("meshplane_cluster_delivery_lag_revisions", cluster=CLUSTER)
        and scrape.total("meshplane_cluster_delivery_lag_revisions", cluster=CLUSTER) == 0
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("observability")
    with (
        run_upstream("orders") as (port, _),
        run_server(tmp) as server,
        data_plane(tmp, server, CLUSTER, redis_server) as (agent, envoy, services),
        server.http() as api,
        contextlib.closing(Gateway(agent.gateway_port)) as gateway,
    ):
        observed = Run(server, agent, envoy, services, api, {}, {}, {})
        eventually(lambda: synced(observed.scrape_server()), timeout=30, what="the agent to connect and sync")
        observed.before = observed.scrape()

        observed.keys = declare(api, port, IdentityProvider(ISSUER, "orders"))
        good = {"x-api-key": observed.keys["good"]}
        gateway.wait_for("/signed/items", status(200), headers=good, timeout=30)
        gateway.wait_for("/opaque/items", status(200), headers=good, timeout=30)
        gateway.wait_for("/opaque/items", status(401), headers={"x-api-key": observed.keys["revoked"]})
        gateway.wait_for(f"/opaque/items?key={observed.keys['imported']}", status(200))
        gateway.wait_for("/limited/x", lambda r: "x-ratelimit-limit" in r.headers, timeout=30)
        observed.after = eventually(lambda: scrape_if_synced(observed), timeout=30, what="every change applied")
        yield observed


def scrape_if_synced(run: Run) -> dict[str, Scrape] | None:
    """Every process's scrape, when the server's says the cluster holds everything: one taken a moment later
    could already count a change the server made meanwhile (keys expiring, its own status)."""
    scrapes = run.scrape()
    return scrapes if synced(scrapes["server"]) else None


def moved(run: Run, process: str, name: str, **labels: str) -> float:
    return run.after[process].total(name, **labels) - run.before[process].total(name, **labels)


def test_the_servers_metrics_exist_and_moved(run: Run) -> None:
    after = run.after["server"]

    assert after.total("meshplane_connected_agents") == 1
    assert moved(run, "server", "meshplane_xds_pushes_total", server="sync") > 0
    assert moved(run, "server", "meshplane_xds_push_latency_seconds_count", server="sync") > 0
    assert moved(run, "server", "meshplane_xds_acks_total", server="sync") > 0
    assert "meshplane_xds_nacks" in after.families
    assert after.total("meshplane_cluster_delivery_lag_revisions", cluster=CLUSTER) == 0
    assert after.has("meshplane_cluster_delivery_lag_seconds", cluster=CLUSTER)
    assert moved(run, "server", "meshplane_http_requests_total", method="PUT") > 0
    assert moved(run, "server", "meshplane_http_request_duration_seconds_count", method="POST") > 0
    assert moved(run, "server", "meshplane_grpc_requests_total", method=REPORT, code="OK") > 0
    assert after.total("meshplane_grpc_request_duration_seconds_count", method=REPORT) > 0
    for operation in ("put", "get", "deliveries_changed"):  # the feeder takes this server's own writes unread
        assert moved(run, "server", "meshplane_store_transaction_duration_seconds_count", operation=operation) > 0
    assert after.has("meshplane_build_info")


def test_the_agents_metrics_exist_and_moved(run: Run) -> None:
    after = run.after["agent"]

    assert moved(run, "agent", "meshplane_agent_updates_total", result="applied") > 0
    assert moved(run, "agent", "meshplane_agent_gateway_publishes_total", state="applied") > 0
    assert moved(run, "agent", "meshplane_xds_pushes_total", server="gateway") > 0
    assert moved(run, "agent", "meshplane_xds_acks_total", server="gateway") > 0
    assert after.has("process_cpu_seconds_total") and after.has("process_resident_memory_bytes")
    assert after.has("meshplane_build_info")


def test_the_enforcer_and_rate_limiter_count_their_decisions(run: Run) -> None:
    assert moved(run, "enforcer", "meshplane_enforcer_decisions_total", decision="allowed") > 0
    assert moved(run, "enforcer", "meshplane_enforcer_config_updates_total", result="applied") > 0
    assert moved(run, "ratelimiter", "meshplane_ratelimit_decisions_total", domain=RATELIMIT_DOMAIN) > 0
    assert run.after["ratelimiter"].has("process_cpu_seconds_total")


def test_no_label_names_an_object(run: Run) -> None:
    values = {value for scrape in run.after.values() for sample in scrape.samples for value in sample.labels.values()}

    assert not values & OBJECT_NAMES
    assert not [value for value in values if "default/" in value]  # how delivered resources are named


def secrets_of(run: Run) -> dict[str, str]:
    """Every secret the run used, by where it came from; a PEM key by each line of its body."""
    found = {role: run.keys[role] for role in ISSUED}
    found |= {
        f"{role} signature": run.keys[role].rsplit(".", 1)[-1] for role in ISSUED if run.keys[role].count(".") == 2
    }
    keys = [*sorted((run.server.data_dir / "signing").glob("*.pem")), run.server.pki.agent_files(CLUSTER).key]
    assert len(keys) >= 2, keys
    for path in keys:
        body = [line for line in path.read_text().splitlines() if line and not line.startswith("-----")]
        found |= {f"{path.name} line {number}": line for number, line in enumerate(body) if len(line) >= 32}
    with contextlib.suppress(OSError):
        if token := getattr(run.server, "token", None):
            found["bearer token"] = token
    return found


def test_no_secret_reaches_a_log_a_config_dump_or_the_metrics(run: Run) -> None:
    places = {f"{name} log": process.log() for name, process in run.processes().items()}
    places["envoy log"] = run.envoy.log()
    places["agent /config_dump"] = _get(f"http://{run.agent.admin_address}/config_dump")
    places["envoy config dump"] = json.dumps(run.envoy.config_dump())
    places |= {f"{name} /metrics": scrape.text for name, scrape in run.scrape().items()}
    secrets = secrets_of(run)

    leaks = [(what, where) for what, secret in secrets.items() for where, text in places.items() if secret in text]

    assert not leaks


def log_lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


def test_every_log_line_is_a_json_object_with_time_level_logger_and_message_through_shutdown(run: Run) -> None:
    """Runs last: it stops the processes, so that their shutdown is in the logs too."""
    processes = run.processes()
    for name in ("enforcer", "ratelimiter", "agent", "server"):
        processes[name].stop()

    for name, process in processes.items():
        lines = log_lines(process.log_path)
        assert lines, f"{name} logged nothing"
        for number, line in enumerate(lines, 1):
            try:
                record: Any = json.loads(line)
            except ValueError:
                pytest.fail(f"{name} log line {number} is not JSON: {line[:300]}")
            assert isinstance(record, dict), (name, number, line)
            missing = {"time", "level", "logger", "message"} - record.keys()
            assert not missing, f"{name} log line {number} lacks {missing}: {line[:300]}"
