"""Benchmarks run where pytest is not installed: neither they nor the harness they share may import it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

# A child interpreter in which `import pytest` fails as if it were not installed, importing every benchmark.
BLOCKED_PYTEST = """
import importlib, pkgutil, sys
import bench

class NoPytest:
    def find_spec(self, name, path=None, target=None):
        if name == "pytest" or name.startswith(("pytest.", "_pytest", "pytest_")):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, NoPytest())
for module in pkgutil.iter_modules(bench.__path__):
    importlib.import_module(f"bench.{module.name}")
print("imported", len(list(pkgutil.iter_modules(bench.__path__))))
"""


def test_every_benchmark_imports_without_pytest() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED_PYTEST], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("imported ")


def test_the_blocker_refuses_pytest() -> None:
    """The check above would pass vacuously if the blocker let pytest through."""
    probe = BLOCKED_PYTEST + "import pytest\n"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode != 0
    assert "No module named 'pytest'" in done.stderr
