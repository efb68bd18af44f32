"""The FastAPI application of the management server: the one place the north API is assembled, for the
server process and for in-process tests alike."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from meshplane import __version__
from meshplane.console.routes import install_console
from meshplane.observability.http_requests import ObserveRequests
from meshplane.server.access_checks import ApiLookup
from meshplane.server.acting import RequestActor
from meshplane.server.api import install_object_routes
from meshplane.server.auth.guard import Authenticator, current_principal
from meshplane.server.auth.routes import tokens_router
from meshplane.server.auth.tokens import TokenService
from meshplane.server.cluster_resources import cluster_resources_router
from meshplane.server.credentials import Credentials, credentials_router
from meshplane.server.dependents import install_dependents_routes
from meshplane.server.figures import figures_router
from meshplane.server.hardening import DEFAULT_MAX_BODY, RequestLimits
from meshplane.server.history import install_history_routes
from meshplane.server.objects import ObjectService
from meshplane.server.problems import install_problem_handlers
from meshplane.server.projection import FleetProjection
from meshplane.server.revocations import revocations_router
from meshplane.server.rollout_policies import PolicyLookup
from meshplane.server.rollout_routes import rollout_routes
from meshplane.server.sealing import Sealer
from meshplane.server.signing import SigningKeys
from meshplane.server.watch import watch_router
from meshplane.store.store import Store


def create_app(
    store: Store,
    ready: Callable[[], bool] = lambda: True,
    authenticator: Authenticator | None = None,
    metrics_need_token: bool = False,
    max_body: int = DEFAULT_MAX_BODY,
    api_lookup: ApiLookup | None = None,
    policy_lookup: PolicyLookup | None = None,
    tokens: TokenService | None = None,
    signing: SigningKeys | None = None,
    projection: FleetProjection | None = None,
    revocations: bool = False,
    sealer: Sealer | None = None,
    console_oidc: dict[str, str] | None = None,
) -> FastAPI:
    """The north API. The server process always passes an authenticator; without one (in-process tests)
    every caller is an admin. The application keys' endpoints need the signing keys, what a cluster receives
    needs the fleet projection: each is served when given; `revocations` serves revoking agent certificates.
    The server process gives them all. The web console is served at /ui/ (`console_oidc`: the OpenID provider
    its sign-in page offers, if any)."""
    app = FastAPI(
        title="meshplane",
        version=__version__,
        description="Multi-cluster control plane for API management and L7 traffic.",
    )
    app.state.authenticator = authenticator
    install_problem_handlers(app)
    app.add_middleware(RequestLimits, max_body=max_body)

    @app.get("/healthz", tags=["Health"], summary="Liveness")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["Health"],
        summary="Readiness: the store answers and sync is running",
        responses={
            503: {
                "description": "Not ready: the store does not answer, or sync is still starting",
                "content": {
                    "application/json": {"schema": {"type": "object", "additionalProperties": {"type": "string"}}}
                },
            }
        },
    )
    async def readyz(response: Response) -> dict[str, str]:
        try:
            await store.current_revision()
        except Exception as exc:  # any store failure means not ready
            response.status_code = 503
            return {"status": "store unavailable", "detail": type(exc).__name__}
        if not ready():
            response.status_code = 503
            return {"status": "starting"}
        return {"status": "ok"}

    @app.get("/metrics", tags=["Health"], summary="Prometheus metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        if metrics_need_token:
            await current_principal(request)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    objects = ObjectService(store, api_lookup, sealer, policy_lookup)
    install_object_routes(app, objects)
    install_history_routes(app, store)
    install_dependents_routes(app, objects)
    app.include_router(figures_router(objects))
    app.include_router(watch_router(store))
    app.include_router(tokens_router(tokens or TokenService(store)))
    if projection is not None:
        app.include_router(cluster_resources_router(projection))
        app.include_router(rollout_routes(store, projection))
    if revocations:
        app.include_router(revocations_router(store))
    if signing is not None:
        app.include_router(credentials_router(Credentials(store, ObjectService(store), signing)))
    app.add_middleware(RequestActor)  # inside the request's span: it records its trace id
    install_console(app, console_oidc)
    app.add_middleware(ObserveRequests)  # outermost: span and timing cover every layer
    return app
