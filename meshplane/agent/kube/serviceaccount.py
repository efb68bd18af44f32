"""The credentials of a pod's service account, for an agent that runs inside the cluster it manages.

The kubelet rotates the projected token in place and the old one expires soon after, so the token is
read again every minute, and at once when the API server answers 401 Unauthorized.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Mapping
from pathlib import Path

import httpx

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REFRESH = 60.0  # seconds


class NotInCluster(ValueError):
    """The service account's files or the API server's address are missing: not running in a pod."""


def in_pod(environ: Mapping[str, str], directory: Path = SERVICE_ACCOUNT_DIR) -> bool:
    """Whether this process runs in a pod with a service-account token mounted."""
    return bool(environ.get("KUBERNETES_SERVICE_HOST")) and (directory / "token").is_file()


def api_server_url(environ: Mapping[str, str]) -> str:
    """The API server's URL as Kubernetes tells every pod: its Service's address in the environment."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise NotInCluster("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set (are we in a pod?)")
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


class ServiceAccountToken(httpx.Auth):
    """Bearer authentication with the token file, re-read every `refresh` seconds and after a 401."""

    def __init__(self, path: Path, refresh: float = TOKEN_REFRESH, clock: Callable[[], float] = time.monotonic):
        self.path = path
        self.refresh = refresh
        self.clock = clock
        self._token = ""
        self._read_at = 0.0

    def token(self, reread: bool = False) -> str:
        if reread or not self._token or self.clock() - self._read_at >= self.refresh:
            try:
                self._token = self.path.read_text().strip()
            except OSError as exc:
                raise NotInCluster(f"cannot read the service-account token: {exc}") from None
            self._read_at = self.clock()
        return self._token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        sent = self.token()
        request.headers["Authorization"] = f"Bearer {sent}"
        response = yield request
        if response.status_code == 401 and (fresh := self.token(reread=True)) != sent:
            request.headers["Authorization"] = f"Bearer {fresh}"
            yield request
