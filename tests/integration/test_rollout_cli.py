"""`meshplane rollout …` and `apply --wait` on governed writes, run as a user runs them, against a server process.

No agent connects: clusters `a` and `b` are registered over REST only. Under a policy whose offline clusters
Wait, the canary (`a`) is given the change and stays Pending for good, so a rollout progresses until someone
acts on it; under offline: Skip every wave skips its clusters and the rollout succeeds after its bakes.
Each test writes a new Gateway in a project of its own (a create: its abort deletes it).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from meshplane_testing.cli import cli, meshplane
from meshplane_testing.meshplane import ServerProcess, run_server

pytestmark = pytest.mark.timeout(90)

_projects = itertools.count(1)
_ports = itertools.count(18100)


@contextlib.contextmanager
def run_fleet(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server that knows clusters `a` and `b`, neither connected."""
    with run_server(tmp_path) as server:
        for cluster in ("a", "b"):
            server.put({"kind": "Cluster", "metadata": {"name": cluster}, "spec": {}})
        yield server


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with run_fleet(tmp_path_factory.mktemp("rollouts")) as server:
        yield server


@pytest.fixture
def own_fleet(tmp_path: Path) -> Iterator[ServerProcess]:
    """A fleet for a test of governed updates alone, whose server may not outlive them."""
    with run_fleet(tmp_path) as server:
        yield server


def governed_project(server: ServerProcess, offline: str = "Wait", kinds: list[str] | None = None) -> str:
    """A new project whose changes roll out in waves canary (cluster a, 1s bake) then rest (1s bake)."""
    project = f"roll{next(_projects)}"
    server.put({"kind": "Project", "metadata": {"name": project}, "spec": {}})
    waves = [{"name": "canary", "clusters": ["a"], "bake": "1s"}, {"name": "rest", "bake": "1s"}]
    spec: dict[str, Any] = {"waves": waves, "offline": offline, "selector": {"kinds": kinds or []}}
    server.put({"kind": "RolloutPolicy", "metadata": {"name": "careful", "project": project}, "spec": spec})
    return project


def gateway(project: str, name: str = "edge") -> dict[str, Any]:
    listener = {"name": "http", "port": next(_ports)}
    return {"kind": "Gateway", "metadata": {"name": name, "project": project}, "spec": {"listeners": [listener]}}


def rollout_of(server: ServerProcess, project: str, name: str = "gateway-edge") -> dict[str, Any]:
    with server.http() as http:
        return http.get(f"/v1/projects/{project}/rollouts/{name}").raise_for_status().json()


def stored_spec(server: ServerProcess, project: str) -> dict[str, Any]:
    with server.http() as http:
        return http.get(f"/v1/projects/{project}/gateways/edge").raise_for_status().json()["spec"]


def canary_given_it(server: ServerProcess, project: str) -> bool:
    """Whether the rollout of Gateway `edge` gave cluster `a` the change (False while there is no rollout)."""
    with server.http() as http:
        found = http.get(f"/v1/projects/{project}/rollouts/gateway-edge")
    return found.status_code == 200 and found.json()["spec"]["released"] == ["a"]


def until(check: Any, what: str, within: float = 20.0) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def progressing(server: ServerProcess) -> str:
    """A project holding Gateway `edge` whose rollout gave the canary the change and waits there."""
    project = governed_project(server)
    server.put(gateway(project))
    until(
        lambda: [c["state"] for c in rollout_of(server, project)["spec"]["waves"][0]["clusters"]] == ["Pending"],
        "the canary to be given the change",
    )
    return project


def act(server: ServerProcess, project: str, action: str) -> dict[str, Any]:
    with server.http() as http:
        return http.post(f"/v1/projects/{project}/rollouts/gateway-edge/{action}").raise_for_status().json()


def rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.strip().splitlines()]


def test_rollout_list_shows_active_rollouts_and_every_one_with_all(fleet: ServerProcess) -> None:
    project = progressing(fleet)

    listed = meshplane("rollout", "list", "-p", project, server=fleet)

    assert listed.returncode == 0, listed.stderr
    header, row = rows(listed.stdout)
    assert header == ["NAME", "OBJECT", "REVISION", "PHASE", "WAVE", "REASON"]
    revision = rollout_of(fleet, project)["spec"]["toRevision"]
    assert row == [
        "gateway-edge",
        "gateways/edge",
        "-p",
        project,
        "new",
        "→",
        str(revision),
        "Progressing",
        "canary",
        "(1/2)",
    ]

    act(fleet, project, "promote")
    assert rows(meshplane("rollout", "list", "-p", project, server=fleet).stdout) == [header]
    every = meshplane("rollout", "list", "--all", "-p", project, server=fleet)
    assert every.returncode == 0, every.stderr
    _, ended = rows(every.stdout)
    assert ended[:1] == ["gateway-edge"] and "Succeeded" in ended


def test_rollout_status_shows_each_wave_with_its_clusters_states(fleet: ServerProcess) -> None:
    project = progressing(fleet)

    shown = meshplane("rollout", "status", "gateway-edge", "-p", project, server=fleet)
    by_kind = meshplane("rollout", "status", "gateway", "edge", "-p", project, "-o", "json", server=fleet)

    assert shown.returncode == 0, shown.stderr
    lines = rows(shown.stdout)
    assert ["Phase", "Progressing"] in lines
    assert ["Object", "gateways/edge", "-p", project] in lines
    [canary] = [line for line in lines if line[:1] == ["canary"]]
    assert canary[:5] == ["canary", "Progressing", "1s", "to", "bake"] and canary[5:7] == ["a", "Pending"]
    [rest] = [line for line in lines if line[:1] == ["rest"]]
    assert rest == ["rest", "Waiting", "1s", "to", "bake", "b", "Waiting"]
    assert by_kind.returncode == 0, by_kind.stderr
    assert json.loads(by_kind.stdout)["metadata"]["name"] == "gateway-edge"


def test_pause_holds_a_rollout_and_resume_lets_it_go_on(fleet: ServerProcess) -> None:
    project = progressing(fleet)

    paused = meshplane("rollout", "pause", "gateway-edge", "-p", project, server=fleet)
    again = meshplane("rollout", "pause", "gateway-edge", "-p", project, server=fleet)
    held = rollout_of(fleet, project)["spec"]["phase"]
    resumed = meshplane("rollout", "resume", "gateway", "edge", "-p", project, server=fleet)

    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.strip() == "rollout gateway-edge paused: Paused, paused by request"
    assert held == "Paused"
    assert again.returncode == 1
    assert "cannot pause rollout 'gateway-edge'" in again.stderr and "only a progressing rollout" in again.stderr
    assert resumed.returncode == 0, resumed.stderr
    assert rollout_of(fleet, project)["spec"]["phase"] == "Progressing"


def test_promote_gives_every_cluster_the_change_and_ends_the_rollout(fleet: ServerProcess) -> None:
    project = progressing(fleet)

    promoted = meshplane("rollout", "promote", "gateway-edge", "-p", project, server=fleet)
    late = meshplane("rollout", "promote", "gateway-edge", "-p", project, server=fleet)

    assert promoted.returncode == 0, promoted.stderr
    spec = rollout_of(fleet, project)["spec"]
    assert (spec["phase"], spec["released"]) == ("Succeeded", ["a", "b"])
    assert late.returncode == 1
    assert "cannot promote rollout 'gateway-edge': rollout is Succeeded" in late.stderr


def test_abort_of_a_created_object_ends_the_rollout_and_deletes_the_object(fleet: ServerProcess) -> None:
    project = progressing(fleet)

    aborted = meshplane("rollout", "abort", "gateway-edge", "-p", project, server=fleet)

    assert aborted.returncode == 0, aborted.stderr
    assert rollout_of(fleet, project)["spec"]["phase"] == "Aborted"
    with fleet.http() as http:
        assert http.get(f"/v1/projects/{project}/gateways/edge").status_code == 404


def test_abort_of_an_update_puts_the_previous_spec_back(own_fleet: ServerProcess) -> None:
    """A governed update: its rollout keeps the previous version, read from the store's history."""
    fleet = own_fleet
    project = governed_project(fleet, offline="Skip")
    first = gateway(project)
    fleet.put(first)
    until(lambda: rollout_of(fleet, project)["spec"]["phase"] == "Succeeded", "the create's rollout to succeed")
    with fleet.http() as http:
        stored = http.get(f"/v1/projects/{project}/gateways/edge").raise_for_status().json()
    policy = {"waves": [{"name": "canary", "clusters": ["a"]}, {"name": "rest"}], "offline": "Wait"}
    fleet.put({"kind": "RolloutPolicy", "metadata": {"name": "careful", "project": project}, "spec": policy})
    fleet.put({**first, "spec": {"listeners": [{"name": "http", "port": next(_ports)}]}})
    until(lambda: canary_given_it(fleet, project), "the update's canary to be given it")

    aborted = meshplane("rollout", "abort", "gateway-edge", "-p", project, server=fleet)

    assert aborted.returncode == 0, aborted.stderr
    assert rollout_of(fleet, project)["spec"]["phase"] == "Aborted"
    with fleet.http() as http:
        restored = http.get(f"/v1/projects/{project}/gateways/edge").raise_for_status().json()
    assert restored["spec"] == stored["spec"]
    assert int(restored["metadata"]["resourceVersion"]) > int(stored["metadata"]["resourceVersion"])


def test_rollout_actions_say_what_is_wrong_when_refused(fleet: ServerProcess) -> None:
    project = progressing(fleet)
    viewer = fleet.bearer("viewer", project)["Authorization"].removeprefix("Bearer ")

    missing = meshplane("rollout", "pause", "api-nowhere", "-p", project, server=fleet)
    forbidden = meshplane("rollout", "abort", "gateway-edge", "-p", project, "--token", viewer, server=fleet)
    unknown = meshplane("rollout", "status", "nokind", "edge", "-p", project, server=fleet)

    assert missing.returncode == 1
    assert "rollout 'api-nowhere' not found" in missing.stderr and "meshplane rollout list" in missing.stderr
    assert forbidden.returncode == 1
    assert "not allowed to abort rollout 'gateway-edge'" in forbidden.stderr
    assert rollout_of(fleet, project)["spec"]["phase"] == "Progressing"
    assert unknown.returncode == 2


def apply_wait(server: ServerProcess, tmp_path: Path, doc: dict[str, Any], *flags: str) -> subprocess.Popen[str]:
    """`meshplane apply -f FILE --wait` started in the background."""
    manifest = tmp_path / f"{doc['metadata']['project']}.yaml"
    manifest.write_text(yaml.safe_dump(doc))
    argv, env = cli(["apply", "-f", str(manifest), "--wait", *flags], server)
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        stdout, stderr = process.communicate(timeout=45)
    finally:
        process.kill()
    return process.returncode, stdout, stderr


def test_apply_wait_follows_a_rollout_wave_by_wave_until_it_succeeds(fleet: ServerProcess, tmp_path: Path) -> None:
    project = governed_project(fleet, offline="Skip")

    code, stdout, stderr = finished(apply_wait(fleet, tmp_path, gateway(project), "--timeout", "30"))

    assert code == 0, stdout + stderr
    lines = stdout.splitlines()
    label = f"gateways/edge -p {project}"
    assert lines[0] == f"{label} created"
    for line in (
        f"{label} wave canary a Skipped",
        f"{label} wave canary Succeeded",
        f"{label} wave rest b Skipped",
        f"{label} wave rest Succeeded",
        f"rolled out {label}: every wave succeeded",
    ):
        assert line in lines, stdout
    assert lines.index(f"{label} wave canary Succeeded") < lines.index(f"{label} wave rest b Skipped")


def test_apply_wait_stops_at_a_pause_and_says_why(fleet: ServerProcess, tmp_path: Path) -> None:
    project = governed_project(fleet)
    waiting = apply_wait(fleet, tmp_path, gateway(project), "--timeout", "30")
    until(lambda: canary_given_it(fleet, project), "the canary to be given the change")

    act(fleet, project, "pause")
    code, stdout, stderr = finished(waiting)

    assert code == 3, stdout + stderr
    assert f"gateways/edge -p {project} wave canary a Pending" in stdout.splitlines()
    assert f"paused gateways/edge -p {project}: paused by request; resume, promote or abort it" in stdout


def test_apply_wait_through_pauses_keeps_following_until_the_rollout_ends(fleet: ServerProcess, tmp_path: Path) -> None:
    project = governed_project(fleet)
    waiting = apply_wait(fleet, tmp_path, gateway(project), "--timeout", "30", "--through-pauses")
    until(lambda: canary_given_it(fleet, project), "the canary to be given the change")

    act(fleet, project, "pause")
    time.sleep(1.5)
    still = waiting.poll()
    act(fleet, project, "promote")
    code, stdout, stderr = finished(waiting)

    assert still is None, stdout
    assert code == 0, stdout + stderr
    assert f"gateways/edge -p {project} rollout gateway-edge Paused" in stdout
    assert f"rolled out gateways/edge -p {project}: promoted" in stdout


def test_apply_wait_fails_with_the_reason_when_the_rollout_is_aborted(fleet: ServerProcess, tmp_path: Path) -> None:
    project = governed_project(fleet)
    waiting = apply_wait(fleet, tmp_path, gateway(project), "--timeout", "30")
    until(lambda: canary_given_it(fleet, project), "the canary to be given the change")

    act(fleet, project, "abort")
    code, stdout, stderr = finished(waiting)

    assert code == 1, stdout + stderr
    assert f"failed gateways/edge -p {project}: aborted by request; the object it made deleted" in stdout


def test_apply_wait_times_out_on_a_rollout_that_does_not_end(fleet: ServerProcess, tmp_path: Path) -> None:
    project = governed_project(fleet)

    code, stdout, stderr = finished(apply_wait(fleet, tmp_path, gateway(project), "--timeout", "2"))

    assert code == 2, stdout + stderr
    assert f"timed out waiting for gateways/edge -p {project} (rollout gateway-edge at wave canary (1/2))" in stdout


def test_apply_wait_of_an_unchanged_object_follows_the_rollout_still_under_way(
    fleet: ServerProcess, tmp_path: Path
) -> None:
    project = progressing(fleet)
    before = rollout_of(fleet, project)
    doc = {**gateway(project), "spec": stored_spec(fleet, project)}

    code, stdout, stderr = finished(apply_wait(fleet, tmp_path, doc, "--timeout", "2"))

    assert code == 2, stdout + stderr
    assert f"timed out waiting for gateways/edge -p {project} (rollout gateway-edge at wave canary (1/2))" in stdout
    assert rollout_of(fleet, project)["spec"]["startedAt"] == before["spec"]["startedAt"]


def test_apply_wait_of_an_ungoverned_write_follows_its_delivery_as_before(fleet: ServerProcess, tmp_path: Path) -> None:
    project = governed_project(fleet, kinds=["API"])  # the policy governs APIs only

    code, stdout, stderr = finished(apply_wait(fleet, tmp_path, gateway(project), "--timeout", "2"))

    assert code == 2, stdout + stderr
    assert "rollout" not in stdout
    assert f"timed out after 2s waiting for: gateways/edge -p {project} on a, gateways/edge -p {project} on b" in stdout


def test_apply_wait_of_an_update_superseded_by_a_newer_write_fails(own_fleet: ServerProcess, tmp_path: Path) -> None:
    """A governed update (the newer write) keeps the version before it, read from the store's history."""
    fleet = own_fleet
    project = governed_project(fleet)
    first = gateway(project)
    waiting = apply_wait(fleet, tmp_path, first, "--timeout", "30")
    until(lambda: canary_given_it(fleet, project), "the canary to be given the change")

    newer = fleet.put({**first, "spec": {"listeners": [{"name": "http", "port": next(_ports)}]}})
    code, stdout, stderr = finished(waiting)

    assert code == 1, stdout + stderr
    revision = newer["metadata"]["resourceVersion"]
    assert f"failed gateways/edge -p {project}: superseded by the write at revision {revision}" in stdout
