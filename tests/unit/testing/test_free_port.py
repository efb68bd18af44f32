"""Ports handed to the processes tests start must not be ones the kernel can also hand out: a port from the
ephemeral range may be taken by any outgoing connection between the pick and the child's bind."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshplane_testing.process import free_port


def ephemeral_range() -> tuple[int, int]:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(low), int(high)


def test_free_ports_are_outside_the_kernels_ephemeral_range() -> None:
    low, high = ephemeral_range()
    picked = [free_port() for _ in range(200)]
    assert not [port for port in picked if low <= port <= high]


def test_free_ports_are_not_handed_out_twice_in_a_row() -> None:
    picked = [free_port() for _ in range(200)]
    assert len(set(picked)) == len(picked)


@pytest.mark.parametrize("worker", ["gw0", "gw1", "gw5"])
def test_each_test_worker_has_its_own_ports(monkeypatch: pytest.MonkeyPatch, worker: str) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    mine = {free_port() for _ in range(50)}
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    theirs = {free_port() for _ in range(50)}
    assert not mine & theirs
