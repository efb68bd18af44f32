"""Durations as users write them."""

from __future__ import annotations

import pytest

from meshplane.model.durations import duration_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("15s", 15.0),
        ("250ms", 0.25),
        ("1m30s", 90.0),
        ("2h", 7200.0),
        ("1.5s", 1.5),
        ("1h1m1s1ms", 3661.001),
        ("0s", 0.0),
    ],
)
def test_duration_seconds_adds_up_its_parts(text: str, seconds: float) -> None:
    assert duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "15", "s", "1d", "-1s", "1 s", "1s ", "1e3s", "soon", "1s2"])
def test_duration_seconds_refuses_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        duration_seconds(text)
