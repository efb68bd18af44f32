"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from meshplane_testing.meshplane import ServerProcess, run_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A management server process for the whole module, on its defaults (tests keep apart by their names)."""
    with run_server(tmp_path_factory.mktemp("server")) as running:
        yield running
