"""Reading this process's Prometheus registry, as a scrape would see it."""

from __future__ import annotations

from prometheus_client import REGISTRY


def sample(name: str, **labels: str) -> float:
    """The current value of one sample; 0.0 while it has never been recorded."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def present(name: str, **labels: str) -> bool:
    """Whether the sample is exported at all (a removed gauge label is not)."""
    return REGISTRY.get_sample_value(name, labels) is not None
