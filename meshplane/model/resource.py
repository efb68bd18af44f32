"""The Kubernetes-shaped envelope around every kind's spec."""

from __future__ import annotations

from typing import Generic, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from meshplane.model.base import WireModel
from meshplane.model.meta import ObjectMeta
from meshplane.model.status import ObjectStatus

API_GROUP = "meshplane.io"
API_VERSION = f"{API_GROUP}/v1alpha1"

SpecT = TypeVar("SpecT", bound=BaseModel)
StatusT = TypeVar("StatusT", bound=BaseModel)


class Resource(WireModel, Generic[SpecT, StatusT]):
    """apiVersion, kind, metadata, spec, status: the same shape in YAML, REST and a cluster's CRs."""

    api_version: Literal["meshplane.io/v1alpha1"] = API_VERSION
    kind: str
    metadata: ObjectMeta
    spec: SpecT
    status: StatusT = Field(  # type: ignore[assignment]
        default_factory=ObjectStatus, json_schema_extra={"readOnly": True}
    )
    """The system's to write: a user's write may carry it, and it is ignored there."""


class FieldError(WireModel):
    """One validation failure, at a dotted field path such as `spec.backends[0].port`."""

    path: str
    message: str


class InvalidObject(ValueError):
    """A document that does not describe a valid object; carries every field error found."""

    def __init__(self, errors: list[FieldError]):
        self.errors = errors
        super().__init__("; ".join(f"{e.path}: {e.message}" if e.path else e.message for e in errors))


def _path(loc: tuple[int | str, ...], prefix: str) -> str:
    text = prefix
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not part.startswith(("function-", "function_", "model_validator")):
            text += f".{part}" if text else part
    return text


def field_errors(exc: ValidationError, prefix: str = "") -> list[FieldError]:
    """pydantic's errors as field paths in the wire's (camelCase) names."""
    out = []
    for err in exc.errors(include_url=False):
        message = err["msg"].removeprefix("Value error, ")
        out.append(FieldError(path=_path(err["loc"], prefix), message=message))
    return out
