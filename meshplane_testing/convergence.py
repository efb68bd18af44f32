"""The check every fault test ends with: a cluster's agent holds exactly the APIs the store places on it.

The store's side is read over REST, the agent's side straight from its local state (`state.db`, opened
read-only), so neither the server's projection nor the agent's memory is trusted. Placement is
evaluated here independently of the product, for what the fault tests use: an empty placement (every
cluster), `clusters: [...]` and `clusterSelector.matchLabels`.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from google.protobuf import json_format

from meshplane.model.wire import integral
from meshplane.proto.v1 import resources_pb2
from meshplane_testing.meshplane import ServerProcess

API_TYPE_URL = "type.googleapis.com/meshplane.v1.API"


@dataclass(frozen=True)
class Difference:
    """What stands between an agent and the store: names missing, extra, or held with another spec."""

    missing: list[str]
    extra: list[str]
    differing: list[str]

    def __bool__(self) -> bool:
        return bool(self.missing or self.extra or self.differing)

    def __str__(self) -> str:
        def few(names: list[str]) -> str:
            return ", ".join(names[:5]) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")

        return f"missing: [{few(self.missing)}], extra: [{few(self.extra)}], differing: [{few(self.differing)}]"


def placed_on(spec: dict[str, Any], cluster: str, labels: dict[str, str]) -> bool:
    """Whether an API with this spec belongs on the cluster (the subset of placement the tests use)."""
    placement = spec.get("placement") or {}
    names = placement.get("clusters") or []
    selector = placement.get("clusterSelector")
    if placement.get("logicalCloud") or (selector and selector.get("matchExpressions")):
        raise NotImplementedError(f"assert_converged does not evaluate this placement: {placement}")
    if not names and selector is None:
        return True
    if cluster in names:
        return True
    wanted = (selector or {}).get("matchLabels")
    return selector is not None and all(labels.get(key) == value for key, value in (wanted or {}).items())


def _list(http: httpx.Client, path: str) -> list[dict[str, Any]]:
    """Every item of a REST list, page after page."""
    items: list[dict[str, Any]] = []
    params: dict[str, str | int] = {"limit": 1000}
    while True:
        response = http.get(path, params=params)
        response.raise_for_status()
        page = response.json()
        items += page["items"]
        token = page["metadata"].get("continue")
        if not token:
            return items
        params = {"limit": 1000, "continue": token}


def store_apis(server: ServerProcess, cluster: str) -> dict[str, dict[str, Any]]:
    """`project/name` -> spec of every API the store places on the cluster, read over REST."""
    with server.http() as http:
        response = http.get(f"/v1/clusters/{cluster}")
        if response.status_code == 404:
            labels: dict[str, str] = {}  # not registered yet: only what goes everywhere or names it
        else:
            response.raise_for_status()
            labels = response.json()["metadata"].get("labels") or {}
        placed = {}
        for project in _list(http, "/v1/projects"):
            name = project["metadata"]["name"]
            for api in _list(http, f"/v1/projects/{name}/apis"):
                if placed_on(api["spec"], cluster, labels):
                    placed[f"{name}/{api['metadata']['name']}"] = integral(api["spec"])
        return placed


def held_rows(agent_state_dir: Path, type_url: str = API_TYPE_URL) -> list[tuple[str, str, bytes]]:
    """(name, version, body) of every resource of a type in the agent's local state, read-only."""
    path = Path(agent_state_dir) / "state.db"
    if not path.exists():
        return []
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        rows = db.execute("SELECT name, version, body FROM resources WHERE type_url = ?", (type_url,)).fetchall()
    finally:
        db.close()
    return [(name, version, bytes(body)) for name, version, body in rows]


def agent_apis(agent_state_dir: Path) -> dict[str, dict[str, Any]]:
    """`project/name` -> spec of every API in the agent's local state."""
    held = {}
    for name, _version, body in held_rows(agent_state_dir):
        message = resources_pb2.API()
        message.ParseFromString(body)
        held[name] = integral(json_format.MessageToDict(message.spec))
    return held


def held_bytes(agent_state_dir: Path) -> int:
    """The size of what the agent holds of APIs: names, versions and serialized messages."""
    return sum(len(name) + len(version) + len(body) for name, version, body in held_rows(agent_state_dir))


def difference(expected: dict[str, dict[str, Any]], held: dict[str, dict[str, Any]]) -> Difference:
    return Difference(
        missing=sorted(expected.keys() - held.keys()),
        extra=sorted(held.keys() - expected.keys()),
        differing=sorted(name for name in expected.keys() & held.keys() if expected[name] != held[name]),
    )


def assert_converged(server: ServerProcess, agent_state_dir: Path, cluster: str, timeout: float = 30.0) -> float:
    """Poll until the agent holds exactly the APIs the store places on `cluster`; return the seconds it took.

    Nothing missing, nothing extra, every spec equal. A server that does not answer (restarting) or a
    state file that cannot be read (being written) counts as not converged yet, until the timeout.
    """
    started = time.monotonic()
    deadline = started + timeout
    last: Difference | str = "no comparison made"
    while True:
        try:
            expected = store_apis(server, cluster)
            held = agent_apis(agent_state_dir)
        except (httpx.HTTPError, sqlite3.Error) as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            last = difference(expected, held)
            if not last:
                return time.monotonic() - started
        if time.monotonic() >= deadline:
            raise AssertionError(f"cluster {cluster} did not converge within {timeout}s; {last}")
        time.sleep(0.1)
