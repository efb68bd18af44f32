"""The gateway's API-key filter (dataplane/keys-filter, proxy-wasm): opaque keys checked inside Envoy.

It makes the enforcer's decisions from a table of digests (see `keys_table`) with no call out of the gateway.
Like the other discovered filters it sits in every chain switched off, and each opaque-key route switches it
on; it tells the route's API by the route's name, which the table maps. Every worker of every gateway shares
one VM per code (`vm_id`), so a new table is a new plugin configuration, not a new VM.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.wasm.v3 import wasm_pb2 as wasm_filter_pb2
from envoy.extensions.wasm.v3 import wasm_pb2
from google.protobuf import wrappers_pb2

from meshplane.agent.translate.common import packed

KEYS_FILTER = "meshplane.keys"
WASM_RUNTIME = "envoy.wasm.runtime.v8"


def keys_filter_config(wasm_file: str, table: Mapping[str, Any]) -> wasm_filter_pb2.Wasm:
    """The filter loaded from `wasm_file` (on the gateways' host) holding `table`; a table it cannot read is
    refused by the filter (and so NACKed), never half-applied."""
    text = json.dumps(table, sort_keys=True, separators=(",", ":"))
    return wasm_filter_pb2.Wasm(
        config=wasm_pb2.PluginConfig(
            name=KEYS_FILTER,
            root_id=KEYS_FILTER,
            vm_config=wasm_pb2.VmConfig(
                vm_id=KEYS_FILTER,
                runtime=WASM_RUNTIME,
                code=base_pb2.AsyncDataSource(local=base_pb2.DataSource(filename=wasm_file)),
            ),
            configuration=packed(wrappers_pb2.StringValue(value=text)),
        )
    )
