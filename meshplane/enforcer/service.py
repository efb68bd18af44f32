"""The ext_authz gRPC service: decide against the current snapshot, count, answer."""

from __future__ import annotations

import time
from collections.abc import Callable

from envoy.service.auth.v3 import external_auth_pb2

from meshplane.callout_server import Unary
from meshplane.enforcer.decision import Denial, decide
from meshplane.enforcer.responses import DENIED_RESPONSES, allowed_response
from meshplane.enforcer.snapshot import Snapshot
from meshplane.observability.metrics import ENFORCER_DECISIONS

# Bound once: the request path should not look labels up.
_ALLOWED = ENFORCER_DECISIONS.labels("allowed")
_CHECK = external_auth_pb2.DESCRIPTOR.services_by_name["Authorization"].methods_by_name["Check"]
_DENIED = {denial: ENFORCER_DECISIONS.labels(denial.name.lower()) for denial in Denial}


class AuthorizationService:
    """`envoy.service.auth.v3.Authorization`, answering from whatever `snapshot()` returns at the time."""

    def __init__(self, snapshot: Callable[[], Snapshot], clock: Callable[[], float] = time.time) -> None:
        self._snapshot = snapshot
        self._clock = clock

    def methods(self) -> list[Unary]:
        return [Unary(_CHECK, self.check)]

    async def check(self, request: external_auth_pb2.CheckRequest) -> external_auth_pb2.CheckResponse:
        decision = decide(self._snapshot(), request, self._clock())
        if isinstance(decision, Denial):
            _DENIED[decision].inc()
            return DENIED_RESPONSES[decision]
        _ALLOWED.inc()
        return allowed_response(decision)
