"""Catalog changes under load leave the gateway's listener alone: no listener modified, no connection
drained or closed by the gateway, every request answered as the catalog said at the time, and a local
bucket keeps its count across changes that are not about it.

Real processes on loopback: the server, an agent with its rate limiter on a real Redis, one Envoy, an
upstream; callers on kept-alive connections send requests throughout, two of them callers the changes
concern (a key revoked, an application subscribed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest

from meshplane_testing import documents
from meshplane_testing.access_fleet import ISSUER, PROJECT, data_plane, issue
from meshplane_testing.envoy import EnvoyProcess
from meshplane_testing.eventually import eventually
from meshplane_testing.gateway import Gateway, status
from meshplane_testing.identity import IdentityProvider
from meshplane_testing.meshplane import AgentProcess, run_server
from meshplane_testing.north import put
from meshplane_testing.redis import RedisServer
from meshplane_testing.upstream import run_upstream

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(150)]

CALLERS = 4
CHANGES = 100
SIGNED = {"apiKey": {"header": "x-api-key"}}
LISTENER_STATS = (
    "listener_manager.listener_modified",
    "listener_manager.listener_removed",
    "listener_manager.listener_in_place_updated",
    "http.gateway.downstream_cx_drain_close",
    "http.gateway.downstream_cx_destroy_local",
    "http.gateway.downstream_cx_total",
)
"""Envoy's own counts of listener changes and of connections drained, closed by the gateway, or opened."""


@dataclass
class Fleet:
    agent: AgentProcess
    envoy: EnvoyProcess
    gateway: Gateway
    api: httpx.Client
    port: int
    key: str
    doomed: dict[str, str]
    """A key of the subscribed application that one of the changes revokes: its id and the key."""
    late: str
    """A key of an application that one of the changes subscribes."""
    idp: IdentityProvider

    def stats(self) -> dict[str, int]:
        _, body = self.envoy.admin("/stats?filter=^(listener_manager|http\\.gateway)\\.")
        found = dict(line.split(": ", 1) for line in body.splitlines() if ": " in line)
        return {name: int(found.get(name, "0")) for name in LISTENER_STATS}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, redis_server: RedisServer) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("listener")
    with (
        run_upstream("steady") as (port, _),
        run_server(tmp) as server,
        data_plane(tmp, server, "edge", redis_server, enforcer=False) as (agent, envoy, _),
        server.http() as api,
    ):
        put(api, documents.api("steady", backends=[documents.backend(port)]))
        put(api, documents.api("keyed", backends=[documents.backend(port)], authentication=SIGNED))
        put(api, documents.application("good"))
        put(api, documents.subscription("good-keyed", application="good", api="keyed", plan="gold"))
        put(api, documents.application("late"))
        key, doomed, late = issue(api, "good")["key"], issue(api, "good"), issue(api, "late")["key"]
        gateway = Gateway(agent.gateway_port)
        for ready in (key, doomed["key"]):
            gateway.wait_for("/keyed/x", status(200), headers={"x-api-key": ready}, timeout=30)
        gateway.wait_for("/keyed/x", status(403), headers={"x-api-key": late})
        yield Fleet(agent, envoy, gateway, api, port, key, doomed, late, IdentityProvider(ISSUER, "users"))
        gateway.close()


SUBSCRIBED_AT, REVOKED_AT = 48, 51
"""The changes that subscribe the late application and revoke the doomed key (a subscription, a revocation)."""


def _catalog_changes(fleet: Fleet) -> list[Callable[[int], None]]:
    """One of each sort of change, each made differently every time it comes round."""
    api = fleet.api

    def subscription(i: int) -> None:
        app = "late" if i == SUBSCRIBED_AT else f"app-{i}"
        if app != "late":
            put(api, documents.application(app))
        put(api, documents.subscription(f"{app}-keyed", application=app, api="keyed", plan="silver"))

    def plan_limit(i: int) -> None:
        target = {"kind": "SubscriptionPlan", "name": "silver"}
        scope = "local" if i % 2 else "global"
        put(
            api,
            documents.rate_limit_policy("silver", target=target, requestsPerUnit=100 + i, unit="second", scope=scope),
        )

    def key(i: int) -> None:
        issue(api, "good")

    def revocation(i: int) -> None:
        revoked = fleet.doomed if i == REVOKED_AT else issue(api, "good")
        api.delete(f"/v1/projects/{PROJECT}/applications/good/keys/{revoked['id']}").raise_for_status()

    def signing_key_rotation(i: int) -> None:
        api.post("/v1/signing-keys/rotate").raise_for_status()

    def jwt_provider(i: int) -> None:
        auth = {"jwt": {"issuer": ISSUER, "audiences": [f"users-{i}"], "jwks": fleet.idp.jwks}}
        put(api, documents.api("users", backends=[documents.backend(fleet.port)], authentication=auth))

    def api_added(i: int) -> None:
        put(api, documents.api(f"extra-{i}", backends=[documents.backend(fleet.port)]))

    def api_changed(i: int) -> None:
        put(api, documents.api("steady", backends=[documents.backend(fleet.port, timeout=f"{10 + i}s")]))

    return [subscription, plan_limit, key, revocation, signing_key_rotation, jwt_provider, api_added, api_changed]


def test_a_hundred_catalog_changes_under_load_leave_the_listener_and_connections_alone(fleet: Fleet) -> None:
    """Callers that the changes leave alone are answered 200 throughout; the caller whose key is revoked
    is answered 200 until it is, then 401; the one whose application is subscribed 403, then 200."""
    steady = [("/steady/x", {}), ("/keyed/x", {"x-api-key": fleet.key})]
    calls = {
        **{f"steady-{n}": steady for n in range(CALLERS)},
        "doomed": [("/keyed/x", {"x-api-key": fleet.doomed["key"]})],
        "late": [("/keyed/x", {"x-api-key": fleet.late})],
    }
    answers: dict[str, list[int]] = {name: [] for name in calls}
    failures: list[str] = []
    stop = threading.Event()

    def caller(name: str) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        with httpx.Client(base_url=f"http://127.0.0.1:{fleet.agent.gateway_port}", timeout=5, limits=limits) as client:
            while not stop.is_set():
                for path, headers in calls[name]:
                    try:
                        answers[name].append(client.get(path, headers=headers).status_code)
                    except httpx.TransportError as exc:
                        failures.append(f"{name} {path}: {exc!r}")
                time.sleep(0.005)

    callers = [threading.Thread(target=caller, args=(name,)) for name in calls]
    for thread in callers:
        thread.start()
    eventually(lambda: all(answers.values()), timeout=10, what="every caller's first answer")  # connections open
    before = fleet.stats()
    changes = _catalog_changes(fleet)
    try:
        for i in range(CHANGES):
            changes[i % len(changes)](i)
            time.sleep(0.03)
        made = fleet.stats()  # the checks below open a connection of their own

        def last(sort: int) -> int:
            return max(i for i in range(CHANGES) if i % len(changes) == sort)

        fleet.gateway.wait_for(f"/extra-{last(6)}/x", status(200), timeout=30)
        token = fleet.idp.token(aud=f"users-{last(5)}")
        fleet.gateway.wait_for("/users/x", status(200), headers={"authorization": f"Bearer {token}"}, timeout=30)
        time.sleep(0.5)  # traffic goes on over the last config
    finally:
        stop.set()
        for thread in callers:
            thread.join(timeout=10)
    after = {**fleet.stats(), "http.gateway.downstream_cx_total": made["http.gateway.downstream_cx_total"]}

    assert not failures, failures[:5]
    unchanged = [code for name in calls if name.startswith("steady") for code in answers[name]]
    assert len(unchanged) > 200, "too little traffic to say anything"
    assert set(unchanged) == {200}, {code: unchanged.count(code) for code in set(unchanged)}
    assert _one_switch(answers["doomed"], 200, 401), _runs(answers["doomed"])
    assert _one_switch(answers["late"], 403, 200), _runs(answers["late"])
    assert {name: after[name] - before[name] for name in LISTENER_STATS} == dict.fromkeys(LISTENER_STATS, 0)


def _one_switch(codes: list[int], first: int, then: int) -> bool:
    """Answered `first`, then `then` from some point on and never `first` again."""
    switched = codes.index(then) if then in codes else len(codes)
    return bool(codes) and codes[0] == first and set(codes[:switched]) == {first} and set(codes[switched:]) == {then}


def _runs(codes: list[int]) -> list[tuple[int, int]]:
    """(code, how many in a row), to show in a failure."""
    runs: list[tuple[int, int]] = []
    for code in codes:
        runs[-1:] = [(code, runs[-1][1] + 1)] if runs and runs[-1][0] == code else [*runs[-1:], (code, 1)]
    return runs


def test_a_local_bucket_keeps_its_count_across_unrelated_changes(fleet: Fleet) -> None:
    limit = {"requestsPerUnit": 5, "unit": "minute"}
    put(fleet.api, documents.api("counted", backends=[documents.backend(fleet.port)], rateLimit=limit))
    fleet.gateway.wait_for("/counted/x", status(200))  # the first of the five
    spent = [fleet.gateway.request("GET", "/counted/x").status_code for _ in range(2)]

    put(fleet.api, documents.api("unrelated", backends=[documents.backend(fleet.port)]))
    issue(fleet.api, "good")
    put(fleet.api, documents.subscription("good-steady", application="good", api="steady", plan="gold"))
    fleet.gateway.wait_for("/unrelated/x", status(200))
    rest = [fleet.gateway.request("GET", "/counted/x").status_code for _ in range(3)]

    assert spent == [200, 200]
    assert rest == [200, 200, 429], "the bucket started again: its count was lost with an unrelated change"
