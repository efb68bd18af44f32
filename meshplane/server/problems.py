"""Errors as data: every failure of the north API is an RFC 9457 problem+json document."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from meshplane.model.registry import UnknownKind
from meshplane.model.resource import FieldError, InvalidObject
from meshplane.observability.logging import get_logger
from meshplane.store.errors import AlreadyExists, Compacted, Conflict, NotFound, OwnedElsewhere

PROBLEM_JSON = "application/problem+json"
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
log = get_logger("meshplane.server.problems")

_MEANINGS = {
    400: "Bad request: a body that is not JSON, or a query the server cannot read",
    401: "No valid bearer token",
    403: "The token's role may not do this",
    404: "Not found, or in a project the token does not cover",
    409: "Conflict: exists already, or a stale resourceVersion",
    413: "The body is larger than the server takes",
    415: "The body is not JSON (application/json, or application/merge-patch+json for a merge patch) nor YAML",
    422: "Invalid request or object, with field paths",
    429: "Too many failed authentications from this address; see Retry-After",
}


class ProblemDetail(BaseModel):
    """RFC 9457 problem document."""

    model_config = ConfigDict(extra="allow")
    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[FieldError] | None = None


def problem_responses(*statuses: int, body: bool = False) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` of a signed-in route that may fail with `statuses`. Any such route may answer
    401 and 429 (the sign-in and its brake) and 422 (a request FastAPI cannot read: without it here,
    FastAPI documents its own validation error, not the problem document sent); a POST, PUT or PATCH
    (`body`) also 400 (a body that does not parse), 413 and 415 (the request limits)."""
    codes = {401, 422, 429, *statuses, *((400, 413, 415) if body else ())}
    content = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/ProblemDetail"}}}
    return {code: {"description": _MEANINGS[code], "content": content} for code in sorted(codes)}


class Problem(Exception):
    """An error the API answers with as it is: status, title, detail and optional field errors."""

    def __init__(
        self,
        status: int,
        detail: str,
        errors: list[FieldError] | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors or []
        self.headers = headers or {}


def problem_response(
    request: Request,
    status: int,
    detail: str,
    errors: list[FieldError] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "instance": request.url.path,
    }
    if errors:
        body["errors"] = [e.to_wire() for e in errors]
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _allowed_methods(request: Request) -> str:
    """Every method some route serves at the request's path. The 405 that routing raises names only the methods
    of the first route whose path matched, and FastAPI makes one route per method."""
    routes = request.app.router.routes
    allowed = [
        method
        for method in _METHODS
        if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes)
    ]
    return ", ".join(allowed)


def _request_errors(exc: RequestValidationError) -> list[FieldError]:
    out = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        out.append(FieldError(path=".".join(loc), message=str(err.get("msg", "invalid"))))
    return out


def install_problem_handlers(app: FastAPI) -> None:
    """Map every exception the API can raise to a problem document; unknown ones to a bare 500."""
    status_of: dict[type[Exception], int] = {
        NotFound: 404,
        UnknownKind: 404,
        AlreadyExists: 409,
        Conflict: 409,
        OwnedElsewhere: 409,
        Compacted: 410,
    }

    async def problem(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, Problem):
            return problem_response(request, exc.status, exc.detail, exc.errors, exc.headers)
        if isinstance(exc, InvalidObject):
            return problem_response(request, 422, "the object is not valid", exc.errors)
        if isinstance(exc, RequestValidationError):
            return problem_response(request, 422, "the request is not valid", _request_errors(exc))
        if isinstance(exc, StarletteHTTPException):
            headers = dict(exc.headers or {})
            if exc.status_code == 405:
                headers["Allow"] = _allowed_methods(request)
            return problem_response(request, exc.status_code, str(exc.detail), headers=headers)
        for exc_type, status in status_of.items():
            if isinstance(exc, exc_type):
                return problem_response(request, status, str(exc))
        log.exception("unhandled error", path=request.url.path)
        return problem_response(request, 500, "internal error; see the server log")

    for exc_type in (Problem, InvalidObject, RequestValidationError, StarletteHTTPException, *status_of, Exception):
        app.add_exception_handler(exc_type, problem)
