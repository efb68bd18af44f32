"""Conditions as the specification writes them."""

from __future__ import annotations

from typing import Any

from meshplane.gatewayapi.state import TRANSITION_PLACEHOLDER


def condition(kind: str, ok: bool, reason: str, message: str, observed_generation: int) -> dict[str, Any]:
    """A condition whose `lastTransitionTime` is the placeholder the status writer replaces."""
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": observed_generation,
        "lastTransitionTime": TRANSITION_PLACEHOLDER,
    }
