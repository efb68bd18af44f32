"""Write-only spec fields: a value a user writes, the server keeps encrypted and only agents that need it read.

A `SealedValue` has three forms, chosen by who serializes it (the serialization context, see `Reveal`):
- shown (every read, list, watch, history and dump): `{"set": true, "digest": ...}`, never the value;
- stored: the digest and the ciphertext, which the server's `Sealer` made and alone can open;
- delivered (to an agent, over its mTLS channel): the value itself, as the user wrote it.
A document may carry the shown form back (a read-modify-write): the stored value is then kept unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field, GetJsonSchemaHandler, SerializationInfo, model_serializer, model_validator
from pydantic.json_schema import JsonSchemaValue

from meshplane.model.base import WireModel


class Reveal(StrEnum):
    """How much of a sealed value a serialization shows (`to_wire(context=...)`); absent: the shown form."""

    STORED = "stored"
    DELIVERED = "delivered"


REVEAL = "reveal"
"""The serialization context's key that holds a `Reveal`."""


class SealedValue(WireModel):
    """A write-only string. Only the digest (a keyed hash: equal values look equal, nothing else) is shown."""

    digest: str | None = None
    ciphertext: str | None = Field(default=None, repr=False)
    plaintext: str | None = Field(default=None, repr=False)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"plaintext": value}
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != "set"}
        return value

    @model_validator(mode="after")
    def _has_something(self) -> SealedValue:
        if self.digest is None and self.plaintext is None:
            raise ValueError("a write-only field takes its value (a string), or the digest shown by a read to keep it")
        return self

    @model_serializer(mode="plain")
    def _serialize(self, info: SerializationInfo) -> Any:
        reveal = (info.context or {}).get(REVEAL)
        if reveal == Reveal.DELIVERED:
            return self.plaintext
        if reveal == Reveal.STORED:
            return {"digest": self.digest, "ciphertext": self.ciphertext}
        return {"set": True, **({"digest": self.digest} if self.digest else {})}

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        # What a writer gives: the value itself (reads show an object with `set` and `digest` in its place).
        return {"type": "string", "format": "password", "description": "write-only: a read shows only its digest"}

    def __str__(self) -> str:
        return f"<sealed {self.digest}>"


def sealed_values(model: BaseModel, path: str = "") -> Iterator[tuple[str, SealedValue]]:
    """Every sealed value inside a model, with its wire path below it (`privateKey`, `backends[0].password`)."""
    for name, field in type(model).model_fields.items():
        alias = field.alias or name
        yield from _walk(getattr(model, name), f"{path}.{alias}" if path else alias)


def _walk(value: Any, path: str) -> Iterator[tuple[str, SealedValue]]:
    if isinstance(value, SealedValue):
        yield path, value
    elif isinstance(value, BaseModel):
        yield from sealed_values(value, path)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _walk(item, f"{path}[{index}]")


def replace_sealed(model: BaseModel, change: Any) -> Any:
    """`model` with each sealed value replaced by `change(path, value)`; models are frozen, so copied."""
    return _replace(model, "", change)


def _replace(value: Any, path: str, change: Any) -> Any:
    if isinstance(value, SealedValue):
        return change(path, value)
    if isinstance(value, BaseModel):
        update = {}
        for name, field in type(value).model_fields.items():
            alias = field.alias or name
            before = getattr(value, name)
            after = _replace(before, f"{path}.{alias}" if path else alias, change)
            if after is not before:
                update[name] = after
        return value.model_copy(update=update) if update else value
    if isinstance(value, list):
        items = [_replace(item, f"{path}[{index}]", change) for index, item in enumerate(value)]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value
