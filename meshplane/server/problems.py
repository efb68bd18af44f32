"""Errors as data: every failure of the north API is an RFC 9457 problem+json document."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from meshplane.model.registry import UnknownKind
from meshplane.model.resource import FieldError, InvalidObject
from meshplane.observability.logging import get_logger
from meshplane.store.errors import AlreadyExists, Compacted, Conflict, NotFound

PROBLEM_JSON = "application/problem+json"
log = get_logger("meshplane.server.problems")


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
            return problem_response(request, exc.status_code, str(exc.detail))
        for exc_type, status in status_of.items():
            if isinstance(exc, exc_type):
                return problem_response(request, status, str(exc))
        log.exception("unhandled error", path=request.url.path)
        return problem_response(request, 500, "internal error; see the server log")

    for exc_type in (Problem, InvalidObject, RequestValidationError, StarletteHTTPException, *status_of, Exception):
        app.add_exception_handler(exc_type, problem)
