"""The test fleet: three clusters (API server, Istio's CRDs, istiod) with one trust root, for the whole run.

Starting a cluster takes tens of seconds, so every module of tests/istio shares these; a test names
what it writes after itself (its own hosts, namespaces, objects) so that tests sharing a cluster do
not meet. Gateways are started per module, on the cluster the module needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from meshplane_testing.istio import Fleet, start_fleet

CLUSTERS = ("cluster-a", "cluster-b", "cluster-c")


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with start_fleet(Path(tmp_path_factory.mktemp("istio")), CLUSTERS) as fleet:
        yield fleet
