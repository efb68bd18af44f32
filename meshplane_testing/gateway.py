"""Calls through a gateway, polling until the data plane shows what a test expects."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping

import httpx

from meshplane_testing.eventually import eventually


class Gateway:
    def __init__(self, port: int, *, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None):
        """Plain HTTP to `host:port`, or HTTPS with `tls` (the name in the URL is what SNI sends)."""
        scheme = "https" if tls is not None else "http"
        self.http = httpx.Client(base_url=f"{scheme}://{host}:{port}", timeout=5, verify=tls or True)

    def request(self, method: str, path: str, headers: Mapping[str, str] | None = None) -> httpx.Response:
        return self.http.request(method, path, headers=headers)

    def wait_for(
        self,
        path: str,
        expect: Callable[[httpx.Response], bool],
        method: str = "GET",
        timeout: float = 15.0,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """Poll until the answer satisfies `expect`; the last answer is in the error otherwise."""
        last: httpx.Response | str = "no answer"

        def answered() -> httpx.Response | None:
            nonlocal last
            try:
                last = self.http.request(method, path, headers=headers)
            except httpx.TransportError as exc:
                last = repr(exc)
                return None
            return last if expect(last) else None

        try:
            return eventually(answered, timeout=timeout, what=f"{method} {path}")
        except TimeoutError:
            shown = f"{last.status_code} {last.text[:300]}" if isinstance(last, httpx.Response) else last
            raise AssertionError(f"{method} {path}: gave up after {timeout}s; last answer: {shown}") from None

    def close(self) -> None:
        self.http.close()


def from_upstream(name: str) -> Callable[[httpx.Response], bool]:
    return lambda r: r.status_code == 200 and r.json().get("upstream") == name


def status(code: int) -> Callable[[httpx.Response], bool]:
    return lambda r: r.status_code == code
