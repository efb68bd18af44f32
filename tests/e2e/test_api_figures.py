"""Per-API figures from the gateways to the store and the north API: a server, an agent, Envoy, real traffic.

The upstream answers `/status/<code>` with that code, so a test decides how many answers are 5xx; the agent
reports every 0.3 s. Reports are checked where the rollouts read them (the store) and at the REST endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from meshplane.proto.v1 import control_plane_pb2, control_plane_pb2_grpc
from meshplane.server.control_plane import MAX_FIGURES
from meshplane.store import Store
from meshplane.store.records import ApiFigureRecord
from meshplane_testing import documents
from meshplane_testing.cli import meshplane
from meshplane_testing.envoy import EnvoyProcess, run_envoy
from meshplane_testing.eventually import eventually
from meshplane_testing.gateway import Gateway, status
from meshplane_testing.meshplane import AgentProcess, ServerProcess, run_agent, run_server
from meshplane_testing.north import put
from meshplane_testing.process import free_port
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(120)]

CLUSTER = "edge"
INTERVAL = 0.3
WITHIN = 20 * INTERVAL
"""How long a change may take to show: a few report intervals, and Envoy's counters are immediate."""
UNREADABLE = "gateway stats cannot be read"


@dataclass
class Fleet:
    tmp: Path
    server: ServerProcess
    envoy_admin: int
    agents: contextlib.ExitStack
    envoys: contextlib.ExitStack
    agent: AgentProcess | None = None
    gateway: Gateway = field(init=False)

    def start_agent(self) -> None:
        """The cluster's agent, started again where its gateway expects it."""
        ports = (self.agent.xds_port, self.agent.gateway_port) if self.agent else None
        flags = ["--envoy-admin-address", f"127.0.0.1:{self.envoy_admin}", "--figures-interval", str(INTERVAL)]
        self.agent = self.agents.enter_context(run_agent(self.tmp, CLUSTER, self.server, ports=ports, extra=flags))

    def restart_agent(self) -> None:
        self.agents.close()
        self.start_agent()

    def start_envoy(self) -> EnvoyProcess:
        assert self.agent is not None
        envoy = self.envoys.enter_context(
            run_envoy(self.tmp, f"gw-{CLUSTER}", self.agent.xds_port, admin_port=self.envoy_admin)
        )
        envoy.wait_listener(self.agent.gateway_port)
        return envoy

    def figures(self, api: str = "orders") -> dict[str, Any]:
        response = httpx.get(
            f"{self.server.url}/v1/projects/{documents.PROJECT}/apis/{api}/figures",
            headers=self.server.headers,
            timeout=5,
        )
        assert response.status_code == 200, response.text
        return response.json()["clusters"]

    def gateway_counts(self) -> dict[str, Any]:
        """What the gateway counted of the API since it started, as the agent reads it now."""
        assert self.agent is not None
        apis = httpx.get(f"http://127.0.0.1:{self.agent.admin_port}/api_figures", timeout=5).json()["apis"]
        return apis.get(f"{documents.PROJECT}/orders", {"requests": 0, "errors": 0})

    def stored(self, api: str = "orders") -> dict[str, ApiFigureRecord]:
        async def read() -> dict[str, ApiFigureRecord]:
            store = await Store.open(f"sqlite+aiosqlite:///{self.server.data_dir / 'meshplane.db'}")
            try:
                return await store.figures_of(documents.PROJECT, api)
            finally:
                await store.close()

        return asyncio.run(read())


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("figures")
    with contextlib.ExitStack() as stack:
        port, _ = stack.enter_context(run_upstream("orders", status_by_path=True))
        server = stack.enter_context(run_server(tmp))
        north = stack.enter_context(server.http())
        put(north, documents.api("orders", backends=[documents.backend(port)]))
        put(north, documents.api("quiet", backends=[documents.backend(port)]))
        agents, envoys = (stack.enter_context(contextlib.ExitStack()) for _ in range(2))
        fleet = Fleet(tmp, server, free_port(), agents, envoys)
        fleet.start_agent()
        assert fleet.agent is not None
        fleet.gateway = Gateway(fleet.agent.gateway_port)
        stack.callback(fleet.gateway.close)
        fleet.start_envoy()
        fleet.gateway.wait_for("/orders/ready", status(200), timeout=30)
        yield fleet


def send(fleet: Fleet, ok: int, failing: int) -> None:
    answers = [fleet.gateway.request("GET", "/orders/items").status_code for _ in range(ok)]
    answers += [fleet.gateway.request("GET", "/orders/status/503").status_code for _ in range(failing)]
    assert sorted(answers) == [200] * ok + [503] * failing


def grown_by(fleet: Fleet, before: dict[str, Any], requests: int) -> dict[str, Any]:
    """The cluster's figures once they count `requests` more than `before`."""
    return eventually(
        lambda: (now := fleet.figures().get(CLUSTER)) and now["requests"] >= before["requests"] + requests and now,
        timeout=WITHIN,
        what=f"{requests} more requests in the reported figures",
    )


def test_traffic_through_the_gateway_shows_in_the_store_and_at_the_rest_endpoint(fleet: Fleet) -> None:
    before = eventually(lambda: fleet.figures().get(CLUSTER), timeout=WITHIN, what="the first figures report")

    send(fleet, ok=7, failing=3)

    after = grown_by(fleet, before, 10)
    assert (after["requests"] - before["requests"], after["errors"] - before["errors"]) == (10, 3)
    grew = {c: after["byClass"].get(c, 0) - before["byClass"].get(c, 0) for c in after["byClass"]}
    assert grew == {"2xx": 7, "5xx": 3}
    assert after["errorRatio"] == pytest.approx(after["errors"] / after["requests"])
    assert after["resets"] == 0
    stored = fleet.stored()[CLUSTER]
    assert (stored.requests, stored.errors, stored.by_class) == (after["requests"], after["errors"], after["byClass"])
    assert datetime.fromisoformat(after["sampledAt"]) == stored.sampled_at
    assert fleet.figures("quiet")[CLUSTER]["requests"] == 0  # served, and no traffic


def test_counts_stay_monotonic_across_a_gateway_restart_and_an_unreadable_gateway_is_not_zeroed(fleet: Fleet) -> None:
    send(fleet, ok=2, failing=1)
    steady = eventually(  # every request the gateway counted is reported
        lambda: (now := fleet.figures()[CLUSTER])["requests"] == fleet.gateway_counts()["requests"] and now,
        timeout=WITHIN,
        what="the reported figures to catch up with the gateway's",
    )

    logged = len(fleet.agent.process.log())
    fleet.envoys.close()  # the gateway stops: its stats cannot be read
    eventually(lambda: UNREADABLE in fleet.agent.process.log()[logged:], timeout=WITHIN, what="the agent to say so")
    time.sleep(3 * INTERVAL)
    assert fleet.figures()[CLUSTER]["requests"] == steady["requests"]
    fleet.start_envoy()  # counts from zero again
    fleet.gateway.wait_for("/orders/ready", status(200), timeout=30)
    send(fleet, ok=1, failing=1)

    counted = fleet.gateway_counts()
    assert 3 <= counted["requests"] < steady["requests"]  # the new gateway's own counts
    after = grown_by(fleet, steady, counted["requests"])
    assert (after["requests"], after["errors"]) == (steady["requests"] + counted["requests"], steady["errors"] + 1)
    assert after["resets"] == 0
    assert fleet.agent.process.log()[logged:].count(UNREADABLE) == 1  # once, not once a round


def test_an_agent_restarted_after_its_gateway_reports_lower_counts_and_the_server_counts_a_reset(
    fleet: Fleet,
) -> None:
    fleet.envoys.close()  # the gateway restarts: the agent carries what it had counted
    fleet.start_envoy()
    fleet.gateway.wait_for("/orders/ready", status(200), timeout=30)
    send(fleet, ok=1, failing=1)
    carried = eventually(
        lambda: (now := fleet.figures()[CLUSTER])["requests"] > fleet.gateway_counts()["requests"] and now,
        timeout=WITHIN,
        what="the figures to count what the gateway counted before it restarted",
    )

    fleet.restart_agent()  # and loses it
    send(fleet, ok=1, failing=0)

    after = eventually(
        lambda: (now := fleet.figures()[CLUSTER])["resets"] > carried["resets"] and now,
        timeout=WITHIN + 10,
        what="the server to count a reset",
    )
    assert after["resets"] == carried["resets"] + 1
    caught_up = eventually(  # the new agent's counts: the gateway's own, nothing carried
        lambda: (now := fleet.figures()[CLUSTER])["requests"] == fleet.gateway_counts()["requests"] and now,
        timeout=WITHIN,
        what="the figures to catch up with the gateway's",
    )
    assert caught_up["requests"] < carried["requests"] and caught_up["resets"] == after["resets"]


def report(
    cluster: str, *figures: control_plane_pb2.ApiFigure, sampled: bool = True
) -> control_plane_pb2.ReportFiguresRequest:
    request = control_plane_pb2.ReportFiguresRequest(cluster=cluster, figures=figures, idempotency_key="k")
    if sampled:
        request.sampled_at.FromDatetime(datetime.now(UTC))
    return request


def figure(name: str = "ghost", requests: int = 10, errors: int = 1, **by_class: int) -> control_plane_pb2.ApiFigure:
    classes = by_class or {"2xx": requests - errors, "5xx": errors}
    return control_plane_pb2.ApiFigure(
        project=documents.PROJECT, name=name, requests=requests, errors=errors, by_class=classes
    )


def refusal(fleet: Fleet, request: control_plane_pb2.ReportFiguresRequest) -> grpc.aio.AioRpcError:
    """The server's answer to `request`, sent with the certificate of cluster `edge`, which must refuse it."""

    async def call() -> grpc.aio.AioRpcError:
        credentials = fleet.server.agent_credentials(CLUSTER)
        async with grpc.aio.secure_channel(fleet.server.grpc_address, credentials) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await control_plane_pb2_grpc.ControlPlaneStub(channel).ReportFigures(request, timeout=10)
        return refused.value

    return asyncio.run(call())


def test_an_agent_cannot_report_figures_for_another_cluster(fleet: Fleet) -> None:
    refused = refusal(fleet, report("other", figure()))

    assert refused.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "not 'other'" in (refused.details() or "")
    assert fleet.stored("ghost") == {}


BAD_REPORTS = [
    ("negative count", [figure(requests=-1, errors=0, **{"2xx": 0})], "negative count"),
    ("more errors than requests", [figure(requests=1, errors=2, **{"5xx": 2})], "2 errors of 1 requests"),
    ("unknown status class", [figure(requests=1, errors=0, **{"2xx": 1, "teapot": 1})], "'teapot' is not a status"),
    ("errors not the 5xx", [figure(requests=3, errors=1, **{"2xx": 3})], "by_class 5xx is 0"),
    ("bad API name", [figure(name="Not A Name")], "figures[0].name"),
    ("an API twice", [figure(), figure()], "given twice"),
    ("too many entries", [figure(), *(figure(name=f"api-{n}") for n in range(MAX_FIGURES))], f"at most {MAX_FIGURES}"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "figures", "message"), BAD_REPORTS, ids=[row[0] for row in BAD_REPORTS])
def test_a_bad_figures_report_is_refused_and_nothing_is_stored(
    fleet: Fleet, case: str, figures: list[control_plane_pb2.ApiFigure], message: str
) -> None:
    refused = refusal(fleet, report(CLUSTER, *figures))

    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT, case
    assert message in (refused.details() or ""), refused.details()
    assert fleet.stored("ghost") == {}


@pytest.mark.parametrize(
    ("sampled_at", "message"),
    [(None, "sampled_at: required"), (datetime.now(UTC) + timedelta(hours=1), "ahead of the server's clock")],
    ids=["no sampling time", "a sampling time ahead"],
)
def test_a_figures_report_without_a_good_sampling_time_is_refused(
    fleet: Fleet, sampled_at: datetime | None, message: str
) -> None:
    request = report(CLUSTER, figure(), sampled=False)
    if sampled_at is not None:
        request.sampled_at.FromDatetime(sampled_at)

    refused = refusal(fleet, request)

    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (refused.details() or ""), refused.details()
    assert fleet.stored("ghost") == {}


def test_figures_are_read_as_the_api_is_unknown_apis_and_other_projects_answer_404(fleet: Fleet) -> None:
    path = f"{fleet.server.url}/v1/projects/{documents.PROJECT}/apis"
    viewer = fleet.server.bearer("viewer", documents.PROJECT)
    elsewhere = fleet.server.bearer("viewer", "elsewhere")

    assert httpx.get(f"{path}/orders/figures", headers=viewer, timeout=5).status_code == 200
    assert httpx.get(f"{path}/orders/figures", headers=elsewhere, timeout=5).status_code == 404
    assert httpx.get(f"{path}/orders/figures", timeout=5).status_code == 401
    unknown = httpx.get(f"{path}/nothing/figures", headers=fleet.server.headers, timeout=5)
    assert unknown.status_code == 404 and unknown.headers["content-type"].startswith("application/problem+json")


def test_the_cli_shows_an_apis_figures_per_cluster(fleet: Fleet) -> None:
    send(fleet, ok=1, failing=0)
    grown_by(fleet, {"requests": 0}, 1)

    shown = meshplane("figures", "orders", "-p", documents.PROJECT, server=fleet.server)

    assert shown.returncode == 0, shown.stderr
    header, row = shown.stdout.splitlines()[:2]
    assert header.split()[:4] == ["CLUSTER", "REQUESTS", "5XX", "ERROR"]
    assert row.split()[0] == CLUSTER
