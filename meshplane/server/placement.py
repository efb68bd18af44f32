"""Placement: which clusters an object goes to. Pure: labels in, cluster names out."""

from __future__ import annotations

from collections.abc import Mapping

from meshplane.model.meta import Placement


def placed_clusters(placement: Placement, clusters: Mapping[str, Mapping[str, str]]) -> frozenset[str]:
    """The names of the clusters (name -> labels) that the placement selects."""
    return frozenset(name for name, labels in clusters.items() if placement.selects(name, dict(labels)))
