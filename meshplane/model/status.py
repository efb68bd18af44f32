"""Status shapes written by the system only."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from meshplane.model.base import WireModel


class DeliveryState(StrEnum):
    PENDING = "Pending"
    APPLIED = "Applied"
    FAILED = "Failed"


class ClusterDelivery(WireModel):
    """What one placed cluster did with one object."""

    cluster: str
    state: DeliveryState
    version: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


class ObjectStatus(WireModel):
    """Status of a delivered object: one entry per cluster its placement selects."""

    model_config = WireModel.model_config | {"extra": "allow"}

    clusters: list[ClusterDelivery] = Field(default_factory=list)
