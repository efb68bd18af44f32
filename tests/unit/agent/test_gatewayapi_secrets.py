"""The Gateway API controller serves a Secret as soon as a listener wants it, even one its reader already held
(read for an earlier listener): the reader tells of what changed, and a Secret that did not change is never told."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

from meshplane.agent.gatewayapi_addresses import AddressPool
from meshplane.agent.kube.client import KubeClient
from meshplane.agent.kube.gatewayapi import GatewayApiController
from meshplane.agent.kube.tls_secrets import SecretKey, TLSPair
from meshplane.gatewayapi.state import GatewayApiState, Programmed
from meshplane_testing.eventually import eventually_async

WANTED: SecretKey = ("web", "certificate")
HELD = TLSPair(certificate="CERT", private_key="KEY")


async def test_a_secret_the_reader_already_holds_is_served_once_a_listener_wants_it(tmp_path: Path) -> None:
    seen: list[Mapping[Any, Any]] = []

    def program(state: GatewayApiState) -> Programmed:
        seen.append(dict(state.secrets))
        return Programmed(secrets_wanted=frozenset({WANTED}))

    def secrets(wanted: Iterable[SecretKey]) -> Mapping[SecretKey, TLSPair]:
        return {key: HELD for key in wanted if key == WANTED}  # read before, unchanged since: never told again

    async def served() -> None:
        return None

    controller = GatewayApiController(
        cast(KubeClient, None), program, AddressPool(None, "127.0.0.1", tmp_path), lambda: {}, secrets, served
    )
    task = asyncio.create_task(controller.run())
    try:
        controller.changed()
        await eventually_async(lambda: any(WANTED in state for state in seen), timeout=5, what="the Secret served")
    finally:
        task.cancel()
