from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EnforcerApi(_message.Message):
    __slots__ = ("project", "name", "key_header", "key_query")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KEY_HEADER_FIELD_NUMBER: _ClassVar[int]
    KEY_QUERY_FIELD_NUMBER: _ClassVar[int]
    project: str
    name: str
    key_header: str
    key_query: str
    def __init__(self, project: _Optional[str] = ..., name: _Optional[str] = ..., key_header: _Optional[str] = ..., key_query: _Optional[str] = ...) -> None: ...

class KeyDigest(_message.Message):
    __slots__ = ("id", "sha256", "expires_unix")
    ID_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_FIELD_NUMBER: _ClassVar[int]
    id: str
    sha256: bytes
    expires_unix: int
    def __init__(self, id: _Optional[str] = ..., sha256: _Optional[bytes] = ..., expires_unix: _Optional[int] = ...) -> None: ...

class EnforcerApplication(_message.Message):
    __slots__ = ("project", "name", "keys")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    project: str
    name: str
    keys: _containers.RepeatedCompositeFieldContainer[KeyDigest]
    def __init__(self, project: _Optional[str] = ..., name: _Optional[str] = ..., keys: _Optional[_Iterable[_Union[KeyDigest, _Mapping]]] = ...) -> None: ...

class EnforcerSubscription(_message.Message):
    __slots__ = ("project", "name", "application", "api", "plan", "active")
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    APPLICATION_FIELD_NUMBER: _ClassVar[int]
    API_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    project: str
    name: str
    application: str
    api: str
    plan: str
    active: bool
    def __init__(self, project: _Optional[str] = ..., name: _Optional[str] = ..., application: _Optional[str] = ..., api: _Optional[str] = ..., plan: _Optional[str] = ..., active: _Optional[bool] = ...) -> None: ...
