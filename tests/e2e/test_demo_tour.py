"""The README's HTTPS tour, run as written against `meshplane demo`: its real server, agent, Envoy and
upstream on the demo's fixed ports, from a fresh directory holding only `examples/`. Each command of the
tour's HTTPS block runs in bash, in the order the README gives, and shows what the README says it shows:
HTTPS with the demo's CA, a client certificate accepted and its absence refused, a JSON access-log line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from meshplane.demo import HTTPS_PORT, MTLS_PORT
from meshplane_testing.eventually import eventually
from meshplane_testing.process import Process

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

Done = subprocess.CompletedProcess[str]


def https_block() -> list[str]:
    """The commands of the README's fenced sh block that calls the HTTPS listeners; indented lines are what
    a command shows, not commands."""
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.DOTALL)
    (block,) = [text for text in blocks if f":{HTTPS_PORT}/" in text]
    return [line for line in block.splitlines() if line and not line[0].isspace()]


def answered_by_upstream(done: Done) -> dict:
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["upstream"] == "demo-upstream" and seen["path"] == "/items", seen
    assert seen["headers"]["x-forwarded-proto"] == "https", seen
    return seen


def served_over_https(done: Done) -> None:
    answered_by_upstream(done)


def served_to_the_client_certificate(done: Done) -> None:
    seen = answered_by_upstream(done)
    assert "CN=demo-client" in seen["headers"]["x-forwarded-client-cert"], seen


def refused_in_the_handshake(done: Done) -> None:
    assert done.returncode != 0 and done.stdout == "", (done.returncode, done.stdout)


def a_json_line_of_the_client_certificate_call(done: Done) -> None:
    assert done.returncode == 0, done.stderr
    line = json.loads(done.stdout)
    assert (line["api"], line["operation"], line["status"]) == ("shop", "GET /items", 200), line
    assert re.fullmatch(r"[0-9a-f]{64}", line["client_certificate_fingerprint"]), line


def succeeded(done: Done) -> None:
    assert done.returncode == 0, done.stderr


def listening(done: Done) -> bool:
    return done.returncode == 0


def flushed(done: Done) -> bool:
    """Envoy writes its access-log file out every second: the line of the last call may not be there yet."""
    return '"client_certificate_fingerprint":"' in done.stdout


@dataclass(frozen=True)
class Step:
    starts: str
    """How the README's command starts."""
    shows: Callable[[Done], None]
    ready: Callable[[Done], bool] | None = None
    """What to wait for first, by running the command again, where the gateway takes a moment."""


STEPS = [
    Step("meshplane tls create shop-cert ", succeeded),
    Step("{ cat examples/shop-https.yaml;", succeeded),
    # the first call waits for the agent to push the new listeners to Envoy
    Step(
        f"curl -s --cacert .meshplane-demo/tls/ca.crt https://shop.demo.localhost:{HTTPS_PORT}/",
        served_over_https,
        listening,
    ),
    Step(
        "curl -s --cacert .meshplane-demo/tls/ca.crt --cert .meshplane-demo/tls/client.crt",
        served_to_the_client_certificate,
    ),
    Step(
        f"curl -s --cacert .meshplane-demo/tls/ca.crt https://shop.demo.localhost:{MTLS_PORT}/",
        refused_in_the_handshake,
    ),
    Step("tail -n 1 .meshplane-demo/logs/access.log", a_json_line_of_the_client_certificate_call, flushed),
]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A running demo in a fresh directory, and the environment of the tour's second shell."""
    here = tmp_path_factory.mktemp("tour")
    (here / "examples").symlink_to(ROOT / "examples")
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    process = Process([sys.executable, "-m", "meshplane", "demo"], here / "demo.log", env, cwd=here)
    try:
        process.wait_ready(lambda: "meshplane demo is running" in process.log(), timeout=60, what="the demo")
        env["MESHPLANE_TOKEN"] = (here / ".meshplane-demo" / "server" / "admin-token").read_text().strip()
        yield here, env
    finally:
        process.stop(timeout=30)
    assert "meshplane demo stopped." in process.log()


def run(command: str, here: Path, env: dict[str, str]) -> Done:
    return subprocess.run(["bash", "-c", command], cwd=here, env=env, capture_output=True, text=True, timeout=30)


def run_step(step: Step, command: str, here: Path, env: dict[str, str]) -> Done:
    if step.ready is None:
        return run(command, here, env)
    ready = step.ready

    def answer() -> Done | None:
        done = run(command, here, env)
        return done if ready(done) else None

    return eventually(answer, timeout=30, what=f"{command!r} to be ready")


def test_the_readme_https_tour_runs_as_written_against_the_demo(demo: tuple[Path, dict[str, str]]) -> None:
    here, env = demo
    commands = https_block()
    assert [next((s.starts for s in STEPS if c.startswith(s.starts)), c) for c in commands] == [s.starts for s in STEPS]
    for step, command in zip(STEPS, commands, strict=True):
        step.shows(run_step(step, command, here, env))


def test_the_demo_prints_the_consoles_address_and_the_console_is_served_there(
    demo: tuple[Path, dict[str, str]],
) -> None:
    here, _ = demo
    printed = re.search(r"^\s+console\s+(http://\S+/ui/)\s", (here / "demo.log").read_text(), flags=re.MULTILINE)
    assert printed is not None, "the demo printed no console line"
    done = run(f"curl -s {printed.group(1)}", here, {**os.environ})
    assert done.returncode == 0 and "<title>meshplane</title>" in done.stdout, (done.returncode, done.stdout)
