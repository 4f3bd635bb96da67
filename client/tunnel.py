"""Client side of the HTTP tunnel: asyncio streams whose bytes travel as HTTP requests.

:func:`open_tunnel_connection` returns ``(StreamReader, StreamWriter)`` over a custom
:class:`asyncio.Transport`, so any asyncio stream code (the bridges' STOMP link, a test
client) runs over the tunnel unchanged.  With ``proxy=`` aiohttp sends absolute-URI
requests to the proxy (no CONNECT, no upgrade): that is what passes a strict corporate
proxy.  The protocol is described in :mod:`gateway.http.tunnel`.

Two tasks carry the bytes.  The upstream task keeps one POST in flight and sends everything
written meanwhile in the next one; the downstream task keeps one poll outstanding.  A
failed request (proxy restarted, connection reset, 502/503/504) is sent again, from the
same offset, after a short backoff: the offsets make a repeat harmless, so nothing is lost
or duplicated.  Only ``retry_for`` seconds of continuous failure, or the server saying the
session is gone (404/410), end the connection: the reader then raises :class:`TunnelError`.

Backpressure: the server holds a POST at most ``response_time`` while its protocol session
holds input back, then says how many bytes it took; the rest goes again in the next POST.
Unsent bytes pile up here until ``pause_writing``, so the producer stalls as over TCP and
no request outlives a proxy's timeout.  A 413 halves the upload size.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl as ssl_mod
import time
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from waystation.client.proxyauth import proxy_auth_headers
from waystation.wire.tunnel import (
    CONTENT_TYPE,
    H_CLOSED,
    H_OFFSET,
    H_RECEIVED,
    H_TOKEN,
    PARAM_ACK,
    PARAM_OFFSET,
    PARAM_PROTOCOL,
    DownstreamReceiver,
    OffsetError,
    SessionInfo,
    UpstreamSender,
    parse_offset,
)

log = logging.getLogger("waystation.client.tunnel")

MAX_UP = 1 << 20  # bytes in one upstream POST (halved on each 413, down to MIN_UP)
MIN_UP = 1024
RETRY_STATUS = frozenset((502, 503, 504))  # a proxy that lost the server: try again
BACKOFF_FIRST = 0.05
BACKOFF_MAX = 1.0
REQUEST_HEADERS = {"Cache-Control": "no-cache"}


class TunnelError(ConnectionError):
    """The tunnel is gone: refused, closed by the server, or unreachable for too long."""


class _Retry(Exception):
    """A transient answer (502/503/504): treated like a failed connection."""


class _Http:
    """aiohttp requests to the tunnel, repeated until they succeed or ``retry_for`` ends."""

    def __init__(
        self,
        base: str,
        proxy: str | None,
        proxy_auth: tuple[str, str] | None,
        ssl: ssl_mod.SSLContext | None,
        retry_for: float,
    ) -> None:
        self.base = base.rstrip("/")
        self.proxy = proxy
        self.auth_headers, self.proxy_headers = proxy_auth_headers(
            proxy_auth if proxy else None, tunnelled=base.startswith("https:")
        )
        self.ssl: ssl_mod.SSLContext | bool = ssl if ssl is not None else True
        self.retry_for = retry_for
        self.stats = {"requests": 0, "failures": 0}  # live counters, for tests and logs
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=8, ssl=self.ssl),
            headers={**REQUEST_HEADERS, **self.auth_headers},
            auto_decompress=False,
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        data: bytes | None = None,
        read_timeout: float = 30.0,
        retry: bool = True,
    ) -> tuple[int, Mapping[str, str], bytes]:
        """(status, headers, body) of the first answer that is not transient.  TunnelError
        once requests have failed for ``retry_for`` seconds in a row."""
        url = self.base + path
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=read_timeout)
        headers = {"Content-Type": CONTENT_TYPE} if data is not None else None
        failing_since = 0.0
        delay = BACKOFF_FIRST
        while True:
            self.stats["requests"] += 1
            try:
                async with self.session.request(
                    method,
                    url,
                    params=params,
                    data=data,
                    headers=headers,
                    proxy=self.proxy,
                    proxy_headers=self.proxy_headers,
                    timeout=timeout,
                ) as resp:
                    body = await resp.read()
                    if resp.status in RETRY_STATUS:
                        raise _Retry(f"{resp.status} {body[:200]!r}")
                    return resp.status, resp.headers, body
            except (aiohttp.ClientError, TimeoutError, OSError, _Retry) as e:
                self.stats["failures"] += 1
                now = time.monotonic()
                failing_since = failing_since or now
                fatal = isinstance(e, aiohttp.ClientSSLError)  # a bad certificate stays bad
                if fatal or not retry or now - failing_since >= self.retry_for:
                    raise TunnelError(f"tunnel {method} {url}: {e!r}") from e
                log.debug("tunnel %s %s failed (%r); retrying in %.2fs", method, url, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)


def _check(status: int, body: bytes, what: str, ok: int = 200) -> None:
    if status != ok:
        text = body[:300].decode("utf-8", "replace").strip()
        raise TunnelError(f"tunnel {what}: {status} {text}")


class TunnelTransport(asyncio.Transport):
    """An asyncio transport whose bytes go up in POSTs and come down in polls."""

    def __init__(
        self,
        http: _Http,
        info: SessionInfo,
        protocol: asyncio.Protocol,
        extra: dict[str, Any],
    ) -> None:
        super().__init__(extra)
        self._http = http
        self._info = info
        self._protocol = protocol
        self._loop = asyncio.get_running_loop()
        self._path = f"/{info.session}"
        self._poll_timeout = info.response_time + 15.0
        self._up = UpstreamSender()
        self._down = DownstreamReceiver()
        self._up_ready = asyncio.Event()
        self._reading = asyncio.Event()
        self._reading.set()
        self._high = 1 << 20
        self._low = 1 << 18
        self._write_paused = False
        self._closing = False
        self._done = False
        self._session_gone = False  # a poll got 404/410: the session is over, no DELETE
        self._max_up = MAX_UP  # the server's max_request_size may be smaller
        self._up_dead = False  # the server refuses upstream bytes: writes are dropped
        self._tasks: set[asyncio.Task[None]] = set()
        self._up_task = self._spawn(self._upstream())
        self._down_task = self._spawn(self._downstream())

    def _spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- the two directions ---------------------------------------------------------------
    async def _upstream(self) -> None:
        try:
            while True:
                while not self._up.unacked:
                    if self._closing:
                        return
                    self._up_ready.clear()
                    await self._up_ready.wait()
                offset, body = self._up.window(self._max_up)
                status, headers, text = await self._http.request(
                    "POST",
                    self._path + "/up",
                    params={PARAM_OFFSET: str(offset)},
                    data=body,
                    read_timeout=max(30.0, self._poll_timeout),
                )
                if status == 413 and len(body) > MIN_UP:
                    self._max_up = max(MIN_UP, len(body) // 2)
                    log.info("tunnel: upstream body too large, now %d bytes", self._max_up)
                    continue
                if status in (404, 410):
                    # the protocol may have closed the session (after an ERROR frame, say):
                    # what is left comes down to the reader, so only writing stops here (and
                    # the DELETE at the end still goes out, for a session not yet ended)
                    self._up_dead = True
                    self._up = UpstreamSender(self._up.end)
                    if self._write_paused:
                        self._write_paused = False
                        self._protocol.resume_writing()
                    return
                _check(status, text, "upstream")
                # may be short of the body's end: the server held the rest back for
                # response_time (backpressure); it goes again in the next POST
                self._up.ack(parse_offset(headers.get(H_RECEIVED), H_RECEIVED))
                if self._write_paused and self._up.unacked <= self._low:
                    self._write_paused = False
                    self._protocol.resume_writing()
        except asyncio.CancelledError:
            raise
        except (TunnelError, OffsetError, ValueError) as e:
            self._finish(e if isinstance(e, TunnelError) else TunnelError(f"upstream: {e}"))

    async def _downstream(self) -> None:
        try:
            while True:
                while not self._reading.is_set():
                    await self._idle_while_paused()
                status, headers, body = await self._http.request(
                    "GET",
                    self._path + "/down",
                    params={PARAM_ACK: str(self._down.received)},
                    read_timeout=self._poll_timeout,
                )
                if status in (404, 410):
                    self._session_gone = True
                _check(status, body, "downstream")
                new = self._down.accept(parse_offset(headers.get(H_OFFSET), H_OFFSET), body)
                if new and not self._done:
                    self._protocol.data_received(new)
                if headers.get(H_CLOSED):
                    with contextlib.suppress(Exception):
                        self._protocol.eof_received()
                    self._finish(None)
                    return
        except asyncio.CancelledError:
            raise
        except (TunnelError, OffsetError, ValueError) as e:
            self._finish(e if isinstance(e, TunnelError) else TunnelError(f"downstream: {e}"))

    async def _idle_while_paused(self) -> None:
        """The reader is full, so no poll goes out; an empty POST now and then keeps the
        session from timing out meanwhile."""
        try:
            await asyncio.wait_for(self._reading.wait(), self._info.response_time)
        except TimeoutError:
            params = {PARAM_OFFSET: str(self._up.acked)}
            status, _, text = await self._http.request("POST", self._path + "/up", params=params)
            if status not in (404, 410):  # else the next poll reports it
                _check(status, text, "keep-alive")

    # -- Transport API --------------------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._done or self._up_dead or not data:
            return
        self._up.push(bytes(data))
        self._up_ready.set()
        if not self._write_paused and self._up.unacked > self._high:
            self._write_paused = True
            self._protocol.pause_writing()

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return self._up.unacked

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._high = (1 << 20) if high is None else high
        self._low = self._high // 4 if low is None else low
        if self._low > self._high:
            raise ValueError(f"high ({self._high}) must be >= low ({self._low})")

    def pause_reading(self) -> None:
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    def is_reading(self) -> bool:
        return self._reading.is_set() and not self._done

    def is_closing(self) -> bool:
        return self._closing or self._done

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol)
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def close(self) -> None:
        """Send what is buffered, then end the session."""
        if self._closing or self._done:
            return
        self._closing = True
        self._up_ready.set()
        self._spawn(self._close_after_flush())

    async def _close_after_flush(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(self._up_task)
        self._finish(None)

    def abort(self) -> None:
        self._closing = True
        self._finish(None)

    # -- the end --------------------------------------------------------------------------
    def _finish(self, exc: Exception | None) -> None:
        """Stop both directions, tell the protocol (once), end the session on the server."""
        if self._done:
            return
        self._done = True
        self._closing = True
        current = asyncio.current_task()
        for task in (self._up_task, self._down_task):
            if task is not current:
                task.cancel()
        if exc is not None:
            log.info("tunnel session %s lost: %s", self._info.session[:6], exc)
        self._loop.call_soon(self._protocol.connection_lost, exc)
        self._spawn(self._release())

    async def _release(self) -> None:
        try:
            if not self._session_gone:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(
                        self._http.request("DELETE", self._path, retry=False), 5.0
                    )
        finally:
            await self._http.session.close()


async def open_tunnel_connection(
    url: str,
    *,
    proxy: str | None = None,
    proxy_auth: tuple[str, str] | None = None,
    ssl: ssl_mod.SSLContext | None = None,
    protocol: str = "stomp",
    retry_for: float = 30.0,
    limit: int = 1 << 18,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open a tunnel session at ``url`` (e.g. ``http://host:8161/tunnel``) carrying
    ``protocol``; streams as from :func:`asyncio.open_connection`.

    ``proxy`` is an ``http://host:port`` forward proxy (``proxy_auth`` = (user, password)
    for Basic auth); ``ssl`` verifies an ``https://`` server.  Opening is retried like any
    request for ``retry_for`` seconds; TunnelError if the server refuses (e.g. an unknown
    protocol) or stays unreachable.  A retried open whose first answer was lost leaves an
    unused session on the server, which its session timeout removes."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"tunnel url must be http(s)://host[:port]/path, got {url!r}")
    loop = asyncio.get_running_loop()
    http = _Http(url, proxy, proxy_auth, ssl, retry_for)
    try:
        status, _, body = await http.request("POST", "/open", params={PARAM_PROTOCOL: protocol})
        _check(status, body, "open", ok=201)
        try:
            info = SessionInfo.from_json(_json(body))
        except ValueError as e:
            raise TunnelError(str(e)) from None
        if info.token:  # the session's secret: sent with every later request
            http.session.headers[H_TOKEN] = info.token
    except BaseException:
        await http.session.close()
        raise
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    stream_protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    extra = {
        "peername": (parts.hostname, port),
        "tunnel_session": info.session,
        "tunnel_stats": http.stats,
        "url": url,
    }
    transport = TunnelTransport(http, info, stream_protocol, extra)
    stream_protocol.connection_made(transport)
    writer = asyncio.StreamWriter(transport, stream_protocol, reader, loop)
    return reader, writer


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as e:
        raise TunnelError(f"tunnel open: the answer is not JSON ({e})") from None


__all__ = ["TunnelError", "TunnelTransport", "open_tunnel_connection"]
