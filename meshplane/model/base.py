"""Shared pydantic configuration: camelCase on the wire, unknown fields refused."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class WireModel(BaseModel):
    """Base of every resource part: the wire speaks camelCase, Python speaks snake_case.

    Unknown fields are refused so that a typo in a YAML file is an error, not a silent no-op.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )

    def to_wire(self, context: dict[str, Any] | None = None) -> dict:
        """The JSON-ready form, as users write it: camelCase, no unset optionals. `context`: what the parts
        that serialize by who asks read (see `model.sealed`)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True, context=context)
