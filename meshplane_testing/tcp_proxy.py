"""A TCP proxy for fault tests: sits between an agent and its server and breaks the link on command.

It runs its own asyncio loop in a background thread, so sync-style tests drive it with plain calls:
`cut()` drops every current connection (new ones are accepted), `stall()` stops forwarding in both
directions while keeping the sockets open (a silent dead link: no data, no FIN, no RST), `block()`
closes every new connection at once, `set_delay()` delivers each chunk that much later (latency,
not a bandwidth cap), and `resume()` undoes a stall and a block. Bytes actually forwarded are
counted per direction: upstream is client -> target, downstream is target -> client.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_CHUNK = 64 * 1024
# Ends of a direction, as queued after the last chunk: the peer closed (EOF) or its socket failed (RESET).
_EOF = None
_RESET = b""


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close a socket with an RST (linger 0) instead of a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None and not writer.transport.is_closing():
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Link:
    """One proxied connection: a client socket, its target socket, and the four tasks pumping between them."""

    def __init__(self, client: asyncio.StreamWriter, target: asyncio.StreamWriter) -> None:
        self.client = client
        self.target = target
        self.tasks: list[asyncio.Task[None]] = []
        self.ended = 0
        """Directions whose writer has finished."""

    def abort(self) -> None:
        """Drop both sockets at once, as a cut cable would: the peers see a reset, not an orderly close."""
        for writer in (self.client, self.target):
            _reset(writer)
        for task in self.tasks:
            if task is not asyncio.current_task():
                task.cancel()


class TcpProxy:
    """Forwards 127.0.0.1:`port` to `target_host:target_port`; see the module docstring for the controls."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.port = 0
        self.bytes_upstream = 0
        self.bytes_downstream = 0
        self.connections = 0
        """Connections accepted and forwarded so far (blocked ones are not counted)."""
        self._delay = 0.0
        self._blocked = False
        self._links: set[_Link] = set()
        self._waiting: dict[asyncio.StreamWriter, asyncio.Future[None]] = {}
        """Connections accepted during a stall, not yet forwarded anywhere."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._flowing: asyncio.Event | None = None

    @property
    def address(self) -> str:
        """`host:port` to give a client instead of the target's address."""
        return f"127.0.0.1:{self.port}"

    # --- lifecycle ---

    def start(self) -> TcpProxy:
        self._thread.start()
        self._call(self._start())
        return self

    def close(self) -> None:
        """Stop listening, drop every connection and stop the loop; safe to call twice."""
        if not self._thread.is_alive():
            return
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    # --- controls (each has taken effect when it returns) ---

    def cut(self) -> None:
        """Drop every current connection; new ones are accepted as before."""
        self._call(self._cut())

    def stall(self) -> None:
        """Stop forwarding bytes, both ways and on new connections too, but keep every socket open."""
        self._call(self._set_flowing(False))

    def resume(self) -> None:
        """Forward again (what was held back goes out first, in order) and accept new connections again."""
        self._blocked = False
        self._call(self._set_flowing(True))

    def block(self) -> None:
        """Close new connections as soon as they are accepted; current ones are left alone."""
        self._blocked = True

    def set_delay(self, seconds: float) -> None:
        """Deliver each chunk `seconds` after it was read (0 for none); applies to chunks read from now on."""
        self._delay = max(0.0, seconds)

    @property
    def open_connections(self) -> int:
        return len(self._links)

    # --- the loop's side ---

    def _call(self, coroutine: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._cut()
        if self._server is not None:
            await self._server.wait_closed()

    async def _cut(self) -> None:
        waiting, self._waiting = dict(self._waiting), {}
        for client_writer, dropped in waiting.items():
            _reset(client_writer)
            dropped.set_result(None)
        links, self._links = list(self._links), set()
        for link in links:
            link.abort()
        tasks = [task for link in links for task in link.tasks]
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _set_flowing(self, flowing: bool) -> None:
        assert self._flowing is not None
        if flowing:
            self._flowing.set()
        else:
            self._flowing.clear()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if self._blocked:
            _reset(client_writer)
            return
        assert self._flowing is not None
        if not self._flowing.is_set():
            # Over a stalled link a new connection gets nowhere, not even to the target, until a resume or a cut.
            dropped = asyncio.get_running_loop().create_future()
            self._waiting[client_writer] = dropped
            flowing = asyncio.create_task(self._flowing.wait())
            try:
                await asyncio.wait([flowing, dropped], return_when=asyncio.FIRST_COMPLETED)
            finally:
                flowing.cancel()
                self._waiting.pop(client_writer, None)
            if dropped.done():
                return
        try:
            target_reader, target_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            _reset(client_writer)  # the target is down: the client sees its connection fail
            return
        self.connections += 1
        link = _Link(client_writer, target_writer)
        self._links.add(link)
        up: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()
        down: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()
        link.tasks = [
            asyncio.create_task(self._read(client_reader, up)),
            asyncio.create_task(self._write(up, target_writer, link, upstream=True)),
            asyncio.create_task(self._read(target_reader, down)),
            asyncio.create_task(self._write(down, client_writer, link, upstream=False)),
        ]

    async def _read(self, reader: asyncio.StreamReader, queue: asyncio.Queue[tuple[float, bytes | None]]) -> None:
        """Read chunks and stamp each with the time it is due; then _EOF, or _RESET if the socket failed."""
        loop = asyncio.get_running_loop()
        end = _EOF
        try:
            while chunk := await reader.read(_CHUNK):
                queue.put_nowait((loop.time() + self._delay, chunk))
        except (ConnectionError, OSError):
            end = _RESET
        queue.put_nowait((loop.time() + self._delay, end))

    async def _write(
        self,
        queue: asyncio.Queue[tuple[float, bytes | None]],
        writer: asyncio.StreamWriter,
        link: _Link,
        *,
        upstream: bool,
    ) -> None:
        """Deliver chunks when due and while flowing; pass an orderly end on as a half-close, a failure as a drop."""
        assert self._flowing is not None
        loop = asyncio.get_running_loop()
        clean = False
        try:
            while True:
                due, chunk = await queue.get()
                await self._flowing.wait()
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                await self._flowing.wait()  # a stall may have begun while this chunk was waiting
                if chunk is _EOF:
                    break
                if chunk == _RESET:
                    raise ConnectionResetError
                writer.write(chunk)
                # Counted once handed to the socket, before yielding: when stall() returns, the counts are final.
                if upstream:
                    self.bytes_upstream += len(chunk)
                else:
                    self.bytes_downstream += len(chunk)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
            clean = True
        except (ConnectionError, OSError):
            pass
        finally:
            link.ended += 1
            if not clean:
                link.abort()
            if not clean or link.ended == 2:
                link.client.close()
                link.target.close()
                self._links.discard(link)


@contextlib.contextmanager
def run_tcp_proxy(target_port: int, target_host: str = "127.0.0.1") -> Iterator[TcpProxy]:
    """A started proxy to the target; closed (every connection dropped) on exit."""
    proxy = TcpProxy(target_port, target_host).start()
    try:
        yield proxy
    finally:
        proxy.close()
