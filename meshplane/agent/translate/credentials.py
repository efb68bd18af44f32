"""Credentials the gateway presents to a backend (basic, bearer, a key header).

An upstream filter of the backend's own cluster (Envoy's credential injector) sets the header from an SDS
generic secret: the value is in no listener, route or cluster, Envoy's config dump redacts secrets, and a
new value changes the secret alone. The filter replaces whatever the caller sent in that header.
"""

from __future__ import annotations

import base64

from envoy.config.core.v3 import base_pb2, extension_pb2
from envoy.extensions.filters.http.credential_injector.v3 import credential_injector_pb2
from envoy.extensions.filters.http.upstream_codec.v3 import upstream_codec_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.http.injected_credentials.generic.v3 import generic_pb2
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2

from meshplane.agent.translate.common import ads_source, packed
from meshplane.model.upstream import BackendCredential

CREDENTIAL_INJECTOR = "envoy.filters.http.credential_injector"
GENERIC_CREDENTIAL = "envoy.http.injected_credentials.generic"
UPSTREAM_CODEC = "envoy.filters.http.upstream_codec"
AUTHORIZATION = "authorization"


def credential_secret_name(cluster: str) -> str:
    """One secret per backend cluster: `credential.<cluster>`."""
    return f"credential.{cluster}"


def credential_filters(cluster: str, credential: BackendCredential) -> list[hcm_pb2.HttpFilter]:
    """The cluster's upstream filters: the injector, then the codec every upstream filter chain ends with.
    Without its secret's value Envoy refuses the request rather than call the backend without it."""
    header = credential.api_key.header if credential.api_key is not None else AUTHORIZATION
    generic = generic_pb2.Generic(
        credential=secret_pb2.SdsSecretConfig(name=credential_secret_name(cluster), sds_config=ads_source()),
        header=header,
    )
    injector = credential_injector_pb2.CredentialInjector(
        overwrite=True,
        allow_request_without_credential=False,
        credential=extension_pb2.TypedExtensionConfig(name=GENERIC_CREDENTIAL, typed_config=packed(generic)),
    )
    return [
        hcm_pb2.HttpFilter(name=CREDENTIAL_INJECTOR, typed_config=packed(injector)),
        hcm_pb2.HttpFilter(name=UPSTREAM_CODEC, typed_config=packed(upstream_codec_pb2.UpstreamCodec())),
    ]


def credential_secret(cluster: str, credential: BackendCredential) -> secret_pb2.Secret:
    """The header's value as an SDS generic secret. A value this agent was not given (none delivered) is
    empty, so the injector refuses requests rather than send them bare."""
    return secret_pb2.Secret(
        name=credential_secret_name(cluster),
        generic_secret=secret_pb2.GenericSecret(secret=base_pb2.DataSource(inline_string=_header_value(credential))),
    )


def _header_value(credential: BackendCredential) -> str:
    if credential.basic is not None:
        password = credential.basic.password.plaintext
        if password is None:
            return ""
        pair = f"{credential.basic.username}:{password}".encode()
        return f"Basic {base64.b64encode(pair).decode()}"
    if credential.bearer is not None:
        token = credential.bearer.token.plaintext
        return f"Bearer {token}" if token is not None else ""
    assert credential.api_key is not None
    return credential.api_key.value.plaintext or ""
