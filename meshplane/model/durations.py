"""Durations as users write them (`15s`, `250ms`, `1m30s`) and as Envoy wants them."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str) -> float:
    """Seconds in a duration string; ValueError if it is not one."""
    pos = 0
    total = 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"{text!r} is not a duration such as 500ms, 15s, 1m30s or 2h")
    return total


def _check(text: str) -> str:
    duration_seconds(text)
    return text


Duration = Annotated[str, AfterValidator(_check)]


MAX_LIFETIME_DAYS = 36_500


def _within_lifetime(text: str) -> str:
    """Bounded, so that now plus the duration is still a date rather than an overflow."""
    if duration_seconds(text) > MAX_LIFETIME_DAYS * 86_400:
        raise ValueError(f"{text!r} is longer than {MAX_LIFETIME_DAYS} days")
    return text


Lifetime = Annotated[Duration, AfterValidator(_within_lifetime)]
"""How long a credential lives (a key, a token, an overlap)."""
