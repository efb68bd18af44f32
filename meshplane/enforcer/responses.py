"""Decisions as ext_authz answers: identity headers for the upstream, or a JSON error for the caller."""

from __future__ import annotations

import json

from envoy.config.core.v3.base_pb2 import HeaderValue, HeaderValueOption
from envoy.service.auth.v3 import external_auth_pb2
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2
from google.rpc import code_pb2, status_pb2

from meshplane.dataplane import APPLICATION_HEADER, KEY_ID_HEADER, PLAN_HEADER
from meshplane.enforcer.decision import Allow, Denial

_OVERWRITE = HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
_OK = status_pb2.Status(code=code_pb2.OK)


def _header(name: str, value: str) -> HeaderValueOption:
    return HeaderValueOption(header=HeaderValue(key=name, value=value), append_action=_OVERWRITE)


def allowed_response(allow: Allow) -> external_auth_pb2.CheckResponse:
    """Who is calling, for the upstream (set over whatever the client sent), minus the credential;
    the application and plan also go to the gateway's metadata, for per-application limits."""
    api, key = allow.api, allow.key
    metadata = struct_pb2.Struct()
    metadata.update({"application": f"{key.project}/{key.application}", "plan": allow.plan})
    return external_auth_pb2.CheckResponse(
        status=_OK,
        ok_response=external_auth_pb2.OkHttpResponse(
            headers=[
                _header(APPLICATION_HEADER, key.application),
                _header(PLAN_HEADER, allow.plan),
                _header(KEY_ID_HEADER, key.key_id),
            ],
            headers_to_remove=[api.key_header] if api.key_header else [],
            query_parameters_to_remove=[api.key_query] if api.key_query else [],
        ),
        dynamic_metadata=metadata,
    )


def _denied_response(denial: Denial) -> external_auth_pb2.CheckResponse:
    headers = [_header("content-type", "application/json")]
    if denial.status == 401:
        headers.append(_header("www-authenticate", "APIKey"))
        code = code_pb2.UNAUTHENTICATED
    else:
        code = code_pb2.PERMISSION_DENIED
    return external_auth_pb2.CheckResponse(
        status=status_pb2.Status(code=code, message=denial.reason),
        denied_response=external_auth_pb2.DeniedHttpResponse(
            status=http_status_pb2.HttpStatus(code=denial.status),  # type: ignore[arg-type]
            headers=headers,
            body=json.dumps({"error": denial.reason}),
        ),
    )


DENIED_RESPONSES = {denial: _denied_response(denial) for denial in Denial}
"""Built once: a denial's answer never depends on the request."""
