"""A process's Prometheus exposition, fetched and parsed."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from typing import NamedTuple

from prometheus_client.parser import text_string_to_metric_families


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return response.read().decode()


class Sample(NamedTuple):
    name: str
    labels: Mapping[str, str]
    value: float


class Scrape:
    """One /metrics answer, parsed."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = {family.name: family for family in text_string_to_metric_families(text)}
        self.samples = [
            Sample(sample.name, sample.labels, sample.value)
            for family in self.families.values()
            for sample in family.samples
        ]

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels`; 0.0 for none."""
        return sum(s.value for s in self.samples if s.name == name and labels.items() <= s.labels.items())

    def has(self, name: str, **labels: str) -> bool:
        return any(s.name == name and labels.items() <= s.labels.items() for s in self.samples)
