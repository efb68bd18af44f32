"""A requirement missing from a module- or session-scoped fixture skips every test that uses it, saying what is
missing, and fails each of them under CI: never an error on the first test and a confusing one on the rest."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

SHARED_FIXTURES = """
import pytest

from meshplane_testing.process import MissingRequirement


@pytest.fixture(scope="module")
def per_module():
    raise MissingRequirement("frobnicator is not installed")


@pytest.fixture(scope="session")
def per_session():
    raise MissingRequirement("widget.yaml is missing")


def test_first_of_module(per_module): pass
def test_second_of_module(per_module): pass
def test_first_of_session(per_session): pass
def test_second_of_session(per_session): pass
"""


def run_with_our_conftest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    """pytest on the tests above with tests/conftest.py loaded as a plugin, in a directory of their own."""
    (tmp_path / "test_shared.py").write_text(SHARED_FIXTURES)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PYTHONPATH": str(REPO)}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-rsfE", "test_shared.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def outcomes(output: str) -> dict[str, int]:
    summary = output.strip().splitlines()[-1]
    return {word: int(count) for count, word in re.findall(r"(\d+) (\w+)", summary)}


def test_every_test_using_a_shared_fixture_whose_requirement_is_missing_is_skipped_locally(tmp_path: Path) -> None:
    done = run_with_our_conftest(tmp_path, ci=None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert outcomes(done.stdout) == {"skipped": 4}, done.stdout
    assert done.stdout.count("frobnicator is not installed") == 1  # -rs folds the same reason into one line
    assert "widget.yaml is missing" in done.stdout


def test_under_ci_every_such_test_fails_with_what_is_missing(tmp_path: Path) -> None:
    done = run_with_our_conftest(tmp_path, ci="true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert outcomes(done.stdout) == {"errors": 4}, done.stdout
    assert done.stdout.count("frobnicator is not installed") >= 2, done.stdout
    assert done.stdout.count("widget.yaml is missing") >= 2, done.stdout
