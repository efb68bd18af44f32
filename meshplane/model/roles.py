"""The roles a north-API caller holds; what each may write is said by each kind (see `registry`)."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    ADMIN = "admin"
    PUBLISHER = "publisher"
    SUBSCRIBER = "subscriber"
    VIEWER = "viewer"
