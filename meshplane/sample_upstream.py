"""A tiny HTTP upstream that echoes what reached it: the demo's backend, and the tests'."""

from __future__ import annotations

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def echo_app(name: str) -> Starlette:
    """Answers every request with its own method, path (with query) and headers, as JSON."""

    async def echo(request: Request) -> JSONResponse:
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return JSONResponse(
            {"upstream": name, "method": request.method, "path": path, "headers": dict(request.headers)}
        )

    return Starlette(routes=[Route("/{path:path}", echo, methods=METHODS)])


def main() -> None:
    """`python -m meshplane.sample_upstream NAME PORT`: serve on 127.0.0.1:PORT until stopped."""
    name, port = sys.argv[1], int(sys.argv[2])
    uvicorn.run(echo_app(name), host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
