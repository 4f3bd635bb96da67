"""A fault-injecting TCP proxy that makes a bad WAN link between two local processes.

There is no kernel traffic shaping on the test machines, so WAN tests put this proxy between
two brokers. It runs its own asyncio loop in a daemon thread; a synchronous test drives it::

    from wanproxy import WanProxy

    with WanProxy(target_port=site_b.stomp_port) as wan:      # listens on 127.0.0.1:wan.port
        start_site_a(bridge_url=f"tcp://127.0.0.1:{wan.port}")
        wan.set_latency(0.05, jitter_s=0.01)  # 50-60 ms each way; bytes are never reordered
        wan.set_bandwidth(1_000_000)          # bytes/s, per direction, per connection
        wan.cut()                             # RST every current connection, returns how many
        wan.blackhole()                       # packets vanish both ways; nothing is closed
        wan.blackhole(False)                  # path back; connections that lost bytes are reset
        wan.refuse()                          # new connections are reset at once
        wan.refuse(False)
        print(wan.stats())

Semantics, per connection and per direction:

* Latency: each chunk read is delivered ``one_way_s + uniform(0, jitter_s)`` later, but
  never before the chunk read ahead of it, so jitter never reorders bytes. Changes apply to
  bytes read after the call. EOF (half-close) travels through the same queue, behind the data.
* Bandwidth: a token bucket (burst 1/20 s, at least 256 bytes) paces writes; ``None`` = off.
* Back-pressure: at most ``max_buffer`` bytes (default 4 MiB) wait in a direction; above that
  the proxy stops reading that side, so a slow receiver slows the sender instead of growing
  the proxy's memory.
* ``blackhole()``: bytes read, and bytes still queued when they come due, are discarded; FINs
  and resets vanish too; connections stay open. New connections are accepted but never
  reach the target. A connection that lost anything cannot go on as an intact TCP stream, so
  when ``blackhole(False)`` restores the path such connections are reset (as the far end that
  gave up would do); connections that lost nothing carry on.
* A reset from either side resets the other side. If the target cannot be reached, the
  accepted client connection is reset.

``stats()`` keys: connections_total (accepted and proxied), connections_open, bytes_up
(client to target, delivered), bytes_down, cuts (calls to ``cut()``), connections_cut,
refused, target_failures, bytes_dropped (black-holed), bytes_buffered (queued right now).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

__all__ = ["WanProxy"]

LISTEN_HOST = "127.0.0.1"
READ_CHUNK = 64 * 1024
DEFAULT_MAX_BUFFER = 4 * 1024 * 1024
CONNECT_TIMEOUT_S = 5.0
CONTROL_TIMEOUT_S = 5.0
MIN_BURST = 256
MAX_BURST = 64 * 1024

_T = TypeVar("_T")

_STAT_KEYS = (
    "connections_total",
    "connections_open",
    "bytes_up",
    "bytes_down",
    "cuts",
    "connections_cut",
    "refused",
    "target_failures",
    "bytes_dropped",
    "bytes_buffered",
)


@dataclass(frozen=True)
class _Shape:
    """Link properties; replaced as a whole so the loop always sees a consistent set."""

    latency: float = 0.0
    jitter: float = 0.0
    rate: int | None = None


class _Link:
    """One proxied connection: the client leg, the target leg and their fate."""

    def __init__(self, client_writer: asyncio.StreamWriter) -> None:
        self.client_writer = client_writer
        self.target_writer: asyncio.StreamWriter | None = None
        self.done = asyncio.Event()
        self.aborted = False
        self.tainted = False  # lost bytes, a FIN or a reset to the black hole
        self._eofs_delivered = 0

    def abort(self) -> bool:
        """Reset both legs now; False if the link was already finished."""
        if self.done.is_set():
            return False
        self.aborted = True
        for writer in (self.client_writer, self.target_writer):
            if writer is not None:
                writer.transport.abort()
        self.done.set()
        return True

    def eof_delivered(self) -> None:
        """One direction delivered its EOF; after both, the link ends gracefully."""
        self._eofs_delivered += 1
        if self._eofs_delivered >= 2:
            self.done.set()


class _Pipe:
    """One direction of a link: read a leg, queue ``(deliver_at, bytes|None)``, write the other."""

    def __init__(
        self,
        proxy: WanProxy,
        link: _Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        counter: str,
    ) -> None:
        self.proxy = proxy
        self.link = link
        self.reader = reader
        self.writer = writer
        self.counter = counter
        self.queue: deque[tuple[float, bytes | None]] = deque()
        self.buffered = 0
        self.has_data = asyncio.Event()
        self.has_space = asyncio.Event()
        self.has_space.set()
        self.last_at = 0.0
        self.tokens = 0.0
        self.stamp = 0.0

    def _put(self, data: bytes | None) -> None:
        shape = self.proxy._shape
        delay = shape.latency
        if shape.jitter > 0:
            delay += self.proxy._rng.uniform(0.0, shape.jitter)
        at = max(asyncio.get_running_loop().time() + delay, self.last_at)
        self.last_at = at
        self.queue.append((at, data))
        if data:
            self.buffered += len(data)
            self.proxy._count("bytes_buffered", len(data))
        self.has_data.set()

    def _release(self, n: int) -> None:
        self.buffered -= n
        self.proxy._count("bytes_buffered", -n)
        if self.buffered <= self.proxy.max_buffer // 2:
            self.has_space.set()

    def discard_queue(self) -> None:
        """Forget queued bytes (the link is gone) and fix the buffered count."""
        n = sum(len(data) for _, data in self.queue if data)
        self.queue.clear()
        if n:
            self._release(n)

    def _drop(self, n: int) -> None:
        self.link.tainted = True
        if n:
            self.proxy._count("bytes_dropped", n)

    async def read_loop(self) -> None:
        """Read the source leg into the queue, pausing while the queue is over the cap."""
        while not self.link.done.is_set():
            if self.buffered >= self.proxy.max_buffer:
                self.has_space.clear()
                await self.has_space.wait()
                continue
            try:
                data = await self.reader.read(READ_CHUNK)
            except OSError:
                self._source_gone(reset=True)
                return
            if self.link.done.is_set():
                return
            if not data:
                self._source_gone(reset=False)
                return
            if self.proxy._dark:
                self._drop(len(data))
                continue
            self._put(data)

    def _source_gone(self, reset: bool) -> None:
        if self.proxy._dark:
            self._drop(0)  # the FIN or RST vanishes; reset when the path is back
        elif reset:
            self.link.abort()
        else:
            self._put(None)

    async def send_loop(self) -> None:
        """Deliver queued chunks in order once due, paced by the bandwidth cap."""
        loop = asyncio.get_running_loop()
        while not self.link.done.is_set():
            if not self.queue:
                self.has_data.clear()
                await self.has_data.wait()
                continue
            at, data = self.queue[0]
            wait = at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            self.queue.popleft()
            if data is None:
                if self.proxy._dark:
                    self._drop(0)
                    return
                with contextlib.suppress(OSError, RuntimeError):
                    if self.writer.can_write_eof():
                        self.writer.write_eof()
                self.link.eof_delivered()
                return
            try:
                await self._write(data)
            except OSError:
                self.link.abort()
                return
            finally:
                self._release(len(data))

    async def _write(self, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        pos = 0
        while pos < len(data) and not self.link.done.is_set():
            if self.proxy._dark:
                self._drop(len(data) - pos)
                return
            if self.writer.transport.is_closing():
                self.link.abort()  # writing to a dead socket: the sender gets a reset
                return
            n = len(data) - pos
            rate = self.proxy._shape.rate
            if rate is not None:
                burst = max(MIN_BURST, min(MAX_BURST, rate // 20))
                n = min(n, burst)
                now = loop.time()
                self.tokens = min(float(burst), self.tokens + (now - self.stamp) * rate)
                self.stamp = now
                self.tokens -= n
                if self.tokens < 0:
                    await asyncio.sleep(-self.tokens / rate)
                    if self.link.done.is_set():
                        return
                    if self.proxy._dark:
                        self._drop(len(data) - pos)
                        return
            self.writer.write(data[pos : pos + n])
            self.proxy._count(self.counter, n)
            pos += n
            await self.writer.drain()


class WanProxy:
    """A TCP proxy on 127.0.0.1 that simulates a slow, lossy, breakable WAN link."""

    def __init__(
        self,
        target_port: int,
        target_host: str = "127.0.0.1",
        listen_port: int = 0,
        *,
        max_buffer: int = DEFAULT_MAX_BUFFER,
    ) -> None:
        if max_buffer <= 0:
            raise ValueError("max_buffer must be positive")
        self.target_host = target_host
        self.target_port = target_port
        self.port = listen_port
        self.max_buffer = max_buffer
        self._shape = _Shape()
        self._dark = False
        self._refusing = False
        self._rng = random.Random()
        self._lock = threading.Lock()
        self._stats = dict.fromkeys(_STAT_KEYS, 0)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._startup_error: BaseException | None = None

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> WanProxy:
        """Start the loop thread; return once listening (``self.port`` is then bound)."""
        if self._thread is not None:
            raise RuntimeError("WanProxy already started")
        ready = threading.Event()
        self._startup_error = None
        thread = threading.Thread(
            target=self._run, args=(ready,), name=f"wanproxy->{self.target_port}", daemon=True
        )
        self._thread = thread
        thread.start()
        if not ready.wait(CONTROL_TIMEOUT_S):
            raise TimeoutError("WanProxy did not start listening in time")
        if self._startup_error is not None:
            thread.join(CONTROL_TIMEOUT_S)
            self._thread = None
            raise self._startup_error
        return self

    def stop(self) -> None:
        """Reset every connection, close the listener and join the thread (idempotent)."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return
        self._check_not_loop_thread()
        if loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(
                    CONTROL_TIMEOUT_S + 2
                )
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
        thread.join(CONTROL_TIMEOUT_S)
        self._thread = None

    def __enter__(self) -> WanProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------- link control

    def set_latency(self, one_way_s: float, jitter_s: float = 0.0) -> None:
        """Delay each chunk by ``one_way_s + uniform(0, jitter_s)`` in each direction."""
        if one_way_s < 0 or jitter_s < 0:
            raise ValueError("latency and jitter must be >= 0")
        with self._lock:
            self._shape = _Shape(float(one_way_s), float(jitter_s), self._shape.rate)

    def set_bandwidth(self, bytes_per_s: int | None) -> None:
        """Cap each direction of each connection at ``bytes_per_s``; ``None`` removes the cap."""
        if bytes_per_s is not None and bytes_per_s <= 0:
            raise ValueError("bandwidth must be positive or None")
        with self._lock:
            self._shape = _Shape(self._shape.latency, self._shape.jitter, bytes_per_s)

    def cut(self) -> int:
        """Reset (RST) every current connection now; return how many were cut."""
        return self._on_loop(self._cut()) if self._running() else 0

    def blackhole(self, on: bool = True) -> None:
        """Silently drop traffic both ways on all connections without closing them."""
        if self._running():
            self._on_loop(self._set_dark(on))
        else:
            self._dark = on

    def refuse(self, on: bool = True) -> None:
        """While on, new connections are reset as soon as they are accepted."""
        self._refusing = on

    def stats(self) -> dict[str, int]:
        """A snapshot of the counters (see the module docstring)."""
        with self._lock:
            return dict(self._stats)

    # ---------------------------------------------------------------- internals

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._stats[key] += n

    def _running(self) -> bool:
        return self._thread is not None and self._loop is not None and self._loop.is_running()

    def _check_not_loop_thread(self) -> None:
        if threading.current_thread() is self._thread:
            raise RuntimeError("WanProxy control methods must not be called from its own loop")

    def _on_loop(self, coro: Coroutine[Any, Any, _T]) -> _T:
        self._check_not_loop_thread()
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(CONTROL_TIMEOUT_S)

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            server = loop.run_until_complete(
                asyncio.start_server(self._handle, LISTEN_HOST, self.port)
            )
        except BaseException as exc:  # reported to start()
            self._startup_error = exc
            loop.close()
            ready.set()
            return
        self._server = server
        self.port = int(server.sockets[0].getsockname()[1])
        ready.set()
        try:
            loop.run_forever()
        finally:
            leftovers = asyncio.all_tasks(loop)
            for task in leftovers:
                task.cancel()
            if leftovers:
                loop.run_until_complete(
                    asyncio.wait_for(
                        asyncio.gather(*leftovers, return_exceptions=True), CONTROL_TIMEOUT_S
                    )
                )
            loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.abort()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=CONTROL_TIMEOUT_S)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def _cut(self) -> int:
        n = sum(1 for link in list(self._links) if link.abort())
        self._count("cuts")
        self._count("connections_cut", n)
        return n

    async def _set_dark(self, on: bool) -> None:
        self._dark = on
        if not on:
            for link in list(self._links):
                if link.tainted:
                    link.abort()

    async def _handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            if self._refusing:
                self._count("refused")
                c_writer.transport.abort()
                return
            link = _Link(c_writer)
            self._links.add(link)
            self._count("connections_total")
            self._count("connections_open")
            try:
                await self._serve(link, c_reader, c_writer)
            except asyncio.CancelledError:
                pass  # stop(): a cancelled callback task would be logged as an error
            finally:
                self._links.discard(link)
                self._count("connections_open", -1)
                link.abort()  # no-op unless cancelled midway
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _serve(
        self, link: _Link, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter
    ) -> None:
        if self._dark:
            # The handshake would vanish: the target never hears of this connection.
            link.tainted = True
            sink = asyncio.create_task(self._swallow(c_reader))
            try:
                await link.done.wait()
            finally:
                sink.cancel()
                await asyncio.gather(sink, return_exceptions=True)
            return
        try:
            t_reader, t_writer = await asyncio.wait_for(
                asyncio.open_connection(self.target_host, self.target_port), CONNECT_TIMEOUT_S
            )
        except (OSError, TimeoutError):
            self._count("target_failures")
            link.abort()
            return
        link.target_writer = t_writer
        if link.done.is_set():  # cut or stopped while connecting
            t_writer.transport.abort()
            return
        pipes = (
            _Pipe(self, link, c_reader, t_writer, "bytes_up"),
            _Pipe(self, link, t_reader, c_writer, "bytes_down"),
        )
        tasks = [asyncio.create_task(p.read_loop()) for p in pipes]
        tasks += [asyncio.create_task(p.send_loop()) for p in pipes]
        try:
            await link.done.wait()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for p in pipes:
                p.discard_queue()
            if not link.aborted:  # both EOFs delivered: close politely, flushing writes
                c_writer.close()
                t_writer.close()

    async def _swallow(self, reader: asyncio.StreamReader) -> None:
        """Read and discard a black-holed connection until it ends."""
        with contextlib.suppress(OSError):
            while True:
                data = await reader.read(READ_CHUNK)
                if not data:
                    return
                self._count("bytes_dropped", len(data))
