"""The console's fleet page with a large fleet: what it weighs and how soon it shows every cluster.

A server (SQLite) knows `--clusters` clusters, registered over REST (`PUT /v1/clusters/{name}`, none connected).
Headless Chromium (Debian's, through Playwright) opens the fleet page signed in, each run in a fresh browser
context (nothing cached), after one load that is not counted (it warms the browser and the server). Measured:
the page weight (bytes over the wire of every request the page completes: the console's own files, the API's
answers; the change stream stays open and is not counted) and the time to first render (from the navigation's
start until the fleet table holds a row per cluster, read in the page).
The floor: the same browser rendering a static HTML table of as many rows, with as many columns, served from
loopback. Prints one JSON object.

    .venv/bin/python -m bench.console [--clusters 1000] [--runs 5] [--quick]
"""

from __future__ import annotations

import contextlib
import html
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import distribution, emit, parser, ratio
from meshplane_testing.browser import chromium
from meshplane_testing.meshplane import ServerProcess, run_server

COLUMNS = 8
"""The fleet table's columns, which the floor's table has too."""
REGISTRARS = 8
TARGETS = {"first_render_ms_p50": 1500.0, "console_files_bytes": 150_000, "ratio_to_floor": 5.0}
ROWS = "table.data tbody tr[data-id]"


def register(server: ServerProcess, clusters: int) -> None:
    """`clusters` Cluster objects over REST, labelled with one of four regions, by a few concurrent writers."""
    with server.http() as http:

        def put(index: int) -> None:
            name = f"edge-{index:05d}"
            doc = {"metadata": {"name": name, "labels": {"region": f"r{index % 4}"}}, "spec": {}}
            http.put(f"/v1/clusters/{name}", json=doc).raise_for_status()

        with ThreadPoolExecutor(REGISTRARS) as pool:
            list(pool.map(put, range(clusters)))


@contextlib.contextmanager
def static_table(rows: int) -> Iterator[str]:
    """The URL of a plain HTML page holding a table of `rows` rows and COLUMNS columns, served on loopback."""
    cells = "".join(f"<td>value {c}</td>" for c in range(1, COLUMNS))
    body = "".join(
        f'<tr data-id="edge-{i:05d}"><td><a href="#">{html.escape(f"edge-{i:05d}")}</a></td>{cells}</tr>'
        for i in range(rows)
    )
    head = "".join(f"<th>column {c}</th>" for c in range(COLUMNS))
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>floor</title></head><body>'
        f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></body></html>'
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="floor", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def rendered_ms(browser: Any, url: str, rows: int, token: str | None = None) -> tuple[float, list[tuple[str, int]]]:
    """Milliseconds from the navigation's start to a frame whose table holds `rows` rows, in a fresh context
    (signed in with `token` through the tab's session storage, as the sign-in page leaves it); the URL and
    the bytes over the wire (the answer's headers and body) of each request the page completed meanwhile."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    if token is not None:
        context.add_init_script(f"sessionStorage.setItem('meshplane.token', {token!r})")
    page = context.new_page()
    finished: list[Any] = []
    page.on("requestfinished", lambda request: finished.append(request))
    try:
        page.goto(url, wait_until="commit")
        at = page.wait_for_function(
            f"() => document.querySelectorAll({ROWS!r}).length >= {rows} && performance.now()",
            polling="raf",
            timeout=120_000,
        ).json_value()
        sizes = [(request.url, request.sizes()) for request in finished]
        return float(at), [(url, size["responseHeadersSize"] + size["responseBodySize"]) for url, size in sizes]
    finally:
        context.close()


def weight(server: ServerProcess, requests: list[tuple[str, int]]) -> dict[str, int]:
    """Bytes over the wire of the requests, the console's files apart from the API's answers."""
    files = api = 0
    for url, size in requests:
        if url.startswith(f"{server.url}/ui/"):
            files += size
        else:
            api += size
    return {"console_files_bytes": files, "api_bytes": api, "total_bytes": files + api, "requests": len(requests)}


def run(work: Path, clusters: int, runs: int) -> dict[str, Any]:
    with run_server(work, insecure=True) as server, chromium() as browser:
        started = time.monotonic()
        register(server, clusters)
        registered = time.monotonic() - started
        fleet = f"{server.url}/ui/#/fleet"
        rendered_ms(browser, fleet, clusters, server.token)  # warms the browser and the server; not counted
        console = [rendered_ms(browser, fleet, clusters, server.token) for _ in range(runs)]
        with static_table(clusters) as url:
            rendered_ms(browser, url, clusters)
            floor = [rendered_ms(browser, url, clusters)[0] for _ in range(runs)]
        page_weight = weight(server, console[0][1])
    first_render = distribution([ms for ms, _ in console], 1)
    floor_ms = distribution(floor, 1)
    return {
        "registered_per_s": round(clusters / registered, 1),
        "page_weight": page_weight,
        "first_render_ms": first_render,
        "floor_static_table_ms": floor_ms,
        "ratio_to_floor": ratio(first_render["p50"], floor_ms["p50"]),
    }


def main() -> None:
    arguments = parser(__doc__, "100 clusters, 2 runs: proves the benchmark runs")
    arguments.add_argument("--clusters", type=int, default=1000, help="clusters the server knows")
    arguments.add_argument("--runs", type=int, default=5, help="page loads measured (and as many of the floor)")
    args = arguments.parse_args()
    clusters, runs = (100, 2) if args.quick else (args.clusters, args.runs)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="meshplane-bench-") as work:
        measured = run(Path(work), clusters, runs)
    report = {
        "benchmark": "console",
        "clusters": clusters,
        "runs": runs,
        **measured,
        "targets": TARGETS,
        "met": {
            "first_render_ms_p50": measured["first_render_ms"]["p50"] <= TARGETS["first_render_ms_p50"],
            "console_files_bytes": measured["page_weight"]["console_files_bytes"] <= TARGETS["console_files_bytes"],
            "ratio_to_floor": measured["ratio_to_floor"] is not None
            and measured["ratio_to_floor"] <= TARGETS["ratio_to_floor"],
        },
    }
    emit(report, started)


if __name__ == "__main__":
    main()
