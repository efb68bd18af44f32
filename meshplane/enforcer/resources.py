"""Decoding and checking what the agent sends: a resource either makes sense to the enforcer or is refused."""

from __future__ import annotations

from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

from meshplane.dataplane import ENFORCER_API_TYPE, ENFORCER_APPLICATION_TYPE, ENFORCER_SUBSCRIPTION_TYPE
from meshplane.observability.metrics import short_type
from meshplane.proto.v1 import enforcer_pb2

EnforcerMessage = enforcer_pb2.EnforcerApi | enforcer_pb2.EnforcerApplication | enforcer_pb2.EnforcerSubscription

_MESSAGES: dict[str, type[EnforcerMessage]] = {
    ENFORCER_API_TYPE: enforcer_pb2.EnforcerApi,
    ENFORCER_APPLICATION_TYPE: enforcer_pb2.EnforcerApplication,
    ENFORCER_SUBSCRIPTION_TYPE: enforcer_pb2.EnforcerSubscription,
}


class InvalidResource(ValueError):
    """A resource the enforcer cannot use; the message names the resource and what is wrong with it."""


def decode(type_url: str, name: str, body: any_pb2.Any) -> EnforcerMessage:
    """The message of resource `name` in an update of `type_url` (one of ENFORCER_TYPES)."""
    try:
        message = _parse(type_url, body)
        _check_name(name, message)
        _check_body(message)
    except InvalidResource as exc:
        raise InvalidResource(f"{name}: {exc}") from None
    return message


def _parse(type_url: str, body: any_pb2.Any) -> EnforcerMessage:
    if body.type_url != type_url:
        raise InvalidResource(f"a {short_type(body.type_url)} in a {short_type(type_url)} update")
    try:
        return _MESSAGES[type_url].FromString(body.value)
    except DecodeError:
        raise InvalidResource(f"does not decode as {short_type(type_url)}") from None


def _check_name(name: str, message: EnforcerMessage) -> None:
    project, _, local = name.partition("/")
    if not project or not local or "/" in local:
        raise InvalidResource("the name is not project/name")
    if (project, local) != (message.project, message.name):
        raise InvalidResource(f"the body is {message.project}/{message.name}")


def _check_body(message: EnforcerMessage) -> None:
    match message:
        case enforcer_pb2.EnforcerApi(key_header="", key_query=""):
            raise InvalidResource("neither key_header nor key_query: no request could carry a key")
        case enforcer_pb2.EnforcerApplication():
            for index, key in enumerate(message.keys):
                if not key.id:
                    raise InvalidResource(f"keys[{index}].id is empty")
                if len(key.sha256) != 32:
                    raise InvalidResource(f"keys[{index}].sha256 is {len(key.sha256)} bytes, not 32")
                if key.expires_unix < 0:
                    raise InvalidResource(f"keys[{index}].expires_unix is negative")
        case enforcer_pb2.EnforcerSubscription():
            for field in ("application", "api"):
                value = getattr(message, field)
                if not value or "/" in value:
                    raise InvalidResource(f"{field} {value!r} is not a name of project {message.project}")
