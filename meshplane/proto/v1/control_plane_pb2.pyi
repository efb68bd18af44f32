import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeliveryState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELIVERY_STATE_UNSPECIFIED: _ClassVar[DeliveryState]
    PENDING: _ClassVar[DeliveryState]
    APPLIED: _ClassVar[DeliveryState]
    FAILED: _ClassVar[DeliveryState]
DELIVERY_STATE_UNSPECIFIED: DeliveryState
PENDING: DeliveryState
APPLIED: DeliveryState
FAILED: DeliveryState

class RegisterClusterRequest(_message.Message):
    __slots__ = ("cluster", "agent_version", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    agent_version: str
    labels: _containers.ScalarMap[str, str]
    def __init__(self, cluster: _Optional[str] = ..., agent_version: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RegisterClusterResponse(_message.Message):
    __slots__ = ("revision",)
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class ObjectDelivery(_message.Message):
    __slots__ = ("type_url", "name", "version", "state", "message")
    TYPE_URL_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    type_url: str
    name: str
    version: str
    state: DeliveryState
    message: str
    def __init__(self, type_url: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[str] = ..., state: _Optional[_Union[DeliveryState, str]] = ..., message: _Optional[str] = ...) -> None: ...

class ReportStatusRequest(_message.Message):
    __slots__ = ("cluster", "idempotency_key", "deliveries")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    idempotency_key: str
    deliveries: _containers.RepeatedCompositeFieldContainer[ObjectDelivery]
    def __init__(self, cluster: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., deliveries: _Optional[_Iterable[_Union[ObjectDelivery, _Mapping]]] = ...) -> None: ...

class LocalObject(_message.Message):
    __slots__ = ("kind", "project", "name", "labels", "spec", "deleted", "status")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    KIND_FIELD_NUMBER: _ClassVar[int]
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    project: str
    name: str
    labels: _containers.ScalarMap[str, str]
    spec: _struct_pb2.Struct
    deleted: bool
    status: _struct_pb2.Struct
    def __init__(self, kind: _Optional[str] = ..., project: _Optional[str] = ..., name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., spec: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., deleted: _Optional[bool] = ..., status: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ReportObjectsRequest(_message.Message):
    __slots__ = ("cluster", "idempotency_key", "objects")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    idempotency_key: str
    objects: _containers.RepeatedCompositeFieldContainer[LocalObject]
    def __init__(self, cluster: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., objects: _Optional[_Iterable[_Union[LocalObject, _Mapping]]] = ...) -> None: ...

class ServiceKey(_message.Message):
    __slots__ = ("namespace", "name")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    name: str
    def __init__(self, namespace: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class ReportedService(_message.Message):
    __slots__ = ("labels", "spec")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.ScalarMap[str, str]
    spec: _struct_pb2.Struct
    def __init__(self, labels: _Optional[_Mapping[str, str]] = ..., spec: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ReportServicesRequest(_message.Message):
    __slots__ = ("cluster", "idempotency_key", "services", "removed", "complete", "present")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    SERVICES_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    idempotency_key: str
    services: _containers.RepeatedCompositeFieldContainer[ReportedService]
    removed: _containers.RepeatedCompositeFieldContainer[ServiceKey]
    complete: bool
    present: _containers.RepeatedCompositeFieldContainer[ServiceKey]
    def __init__(self, cluster: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., services: _Optional[_Iterable[_Union[ReportedService, _Mapping]]] = ..., removed: _Optional[_Iterable[_Union[ServiceKey, _Mapping]]] = ..., complete: _Optional[bool] = ..., present: _Optional[_Iterable[_Union[ServiceKey, _Mapping]]] = ...) -> None: ...

class ApiFigure(_message.Message):
    __slots__ = ("project", "name", "requests", "errors", "by_class")
    class ByClassEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    PROJECT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    BY_CLASS_FIELD_NUMBER: _ClassVar[int]
    project: str
    name: str
    requests: int
    errors: int
    by_class: _containers.ScalarMap[str, int]
    def __init__(self, project: _Optional[str] = ..., name: _Optional[str] = ..., requests: _Optional[int] = ..., errors: _Optional[int] = ..., by_class: _Optional[_Mapping[str, int]] = ...) -> None: ...

class ReportFiguresRequest(_message.Message):
    __slots__ = ("cluster", "idempotency_key", "figures", "sampled_at")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    FIGURES_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_AT_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    idempotency_key: str
    figures: _containers.RepeatedCompositeFieldContainer[ApiFigure]
    sampled_at: _timestamp_pb2.Timestamp
    def __init__(self, cluster: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., figures: _Optional[_Iterable[_Union[ApiFigure, _Mapping]]] = ..., sampled_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ReportResponse(_message.Message):
    __slots__ = ("duplicate",)
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    duplicate: bool
    def __init__(self, duplicate: _Optional[bool] = ...) -> None: ...
