"""A WebSocket connection dressed as asyncio streams, so stream code (a STOMP client such as
the bridge's ``StompLink``) runs over ``ws://`` / ``wss://`` unchanged.

aiohttp does the WebSocket work (handshake, subprotocols, TLS, an HTTP proxy: a ``wss://``
url goes through ``CONNECT``, a ``ws://`` one as a plain absolute-URI request).  On top of it
``WebSocketTransport`` is an ``asyncio.Transport``: each batch of writes goes out as one
WebSocket message (text when it is valid UTF-8, binary otherwise; split only past
``max_message_size``) and every incoming message, text or binary, is fed to the protocol as
bytes.  Write buffering, drain and read pausing follow the usual transport rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import ssl as ssl_module
from collections import deque
from collections.abc import Sequence
from typing import Any

import aiohttp
from aiohttp import WSMsgType

from waystation.client.proxyauth import proxy_auth_headers

STOMP_SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp")
READ_LIMIT = 256 * 1024
MAX_MESSAGE_SIZE = 16 * 1024 * 1024  # the default limit of Waystation's own /stomp endpoint
MAX_INCOMING_SIZE = 64 * 1024 * 1024  # the largest frame a bridge link accepts
CLOSE_TIMEOUT = 2.0  # seconds to wait for the peer's close frame


class WebSocketRefused(ConnectionError):
    """The server, or a proxy on the way, did not accept the WebSocket upgrade."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


def _reason(status: int) -> str:
    try:
        return f"{status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def _refusal(e: aiohttp.ClientResponseError, url: str, proxy: str | None) -> WebSocketRefused:
    """A message saying who refused: squid marks its own answers with ``X-Squid-Error``."""
    status = _reason(e.status)
    squid = e.headers.get("X-Squid-Error") if e.headers else None
    if isinstance(e, aiohttp.ClientHttpProxyError):
        text = f"proxy {proxy} refused the tunnel (CONNECT) for {url}: {status}"
    elif proxy and (squid or e.status in (403, 407)):
        text = f"proxy {proxy} refused the WebSocket upgrade to {url}: {status}"
    elif proxy:
        text = f"WebSocket upgrade to {url} through proxy {proxy} refused: {status}"
    else:
        text = f"server refused the WebSocket upgrade to {url}: {status}"
    return WebSocketRefused(text + (f" ({squid})" if squid else ""), e.status)


class WebSocketTransport(asyncio.Transport):
    """An ``asyncio.Transport`` over an open aiohttp WebSocket; it owns the session."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        ws: aiohttp.ClientWebSocketResponse,
        protocol: asyncio.BaseProtocol,
        max_message_size: int = MAX_MESSAGE_SIZE,
    ) -> None:
        super().__init__()
        self._info: dict[str, Any] = {"subprotocol": ws.protocol, "websocket": ws}
        self._session = session
        self._ws = ws
        self._protocol: asyncio.Protocol = protocol  # type: ignore[assignment]
        self._max_message = max(1, max_message_size)
        self._pending: deque[bytes] = deque()
        self._buffered = 0
        self._high, self._low = 64 * 1024, 16 * 1024
        self._writing_paused = False
        self._wakeup = asyncio.Event()
        self._reading = asyncio.Event()
        self._reading.set()
        self._closing = False
        self._lost = False
        self._closer: asyncio.Task[None] | None = None
        loop = asyncio.get_running_loop()
        self._protocol.connection_made(self)
        self._reader = loop.create_task(self._read_loop())
        self._writer = loop.create_task(self._write_loop())

    # -- BaseTransport ------------------------------------------------------------------------
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name in self._info:
            return self._info[name]
        return self._ws.get_extra_info(name, default)  # socket, peername, sslcontext ...

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Send what is buffered, then the close frame; ``connection_lost`` follows."""
        if self._closing:
            return
        self._closing = True
        self._wakeup.set()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    # -- ReadTransport ------------------------------------------------------------------------
    def is_reading(self) -> bool:
        return self._reading.is_set() and not self._closing

    def pause_reading(self) -> None:
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()

    # -- WriteTransport -----------------------------------------------------------------------
    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._high = 64 * 1024 if high is None else high
        self._low = self._high // 4 if low is None else low
        self._maybe_pause()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def get_write_buffer_size(self) -> int:
        return self._buffered

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"data must be bytes-like, not {type(data).__name__}")
        if self._closing or not data:
            return
        chunk = bytes(data)
        self._pending.append(chunk)
        self._buffered += len(chunk)
        self._wakeup.set()
        self._maybe_pause()

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        raise NotImplementedError("a WebSocket has no half-close")

    def abort(self) -> None:
        """Drop what is buffered and the connection, without the closing handshake."""
        self._closing = True
        self._pending.clear()
        self._buffered = 0
        if not self._lost:
            self._writer.cancel()
            self._reader.cancel()
            self._closer = asyncio.get_running_loop().create_task(
                self._finish(None, handshake=False)
            )

    # -- internals ----------------------------------------------------------------------------
    def _maybe_pause(self) -> None:
        if not self._writing_paused and self._buffered > self._high:
            self._writing_paused = True
            self._protocol.pause_writing()

    def _maybe_resume(self) -> None:
        if self._writing_paused and self._buffered <= self._low:
            self._writing_paused = False
            self._protocol.resume_writing()

    def _take(self) -> bytes:
        """The next message: whole writes joined up to the size limit (one write larger than
        the limit is split, which a stream protocol such as STOMP does not mind)."""
        pending = self._pending
        first = pending[0]
        if len(first) > self._max_message:
            pending[0] = first[self._max_message :]
            return first[: self._max_message]
        parts = [pending.popleft()]
        size = len(first)
        while pending and size + len(pending[0]) <= self._max_message:
            size += len(pending[0])
            parts.append(pending.popleft())
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def _write_loop(self) -> None:
        try:
            while True:
                if not self._pending:
                    if self._closing:
                        break
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                message = self._take()
                try:
                    message.decode("utf-8")
                    opcode = WSMsgType.TEXT
                except UnicodeDecodeError:
                    opcode = WSMsgType.BINARY
                await self._ws.send_frame(message, opcode)
                self._buffered -= len(message)
                self._maybe_resume()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the connection broke under a write
            if not self._lost:
                self._reader.cancel()
            await self._finish(_as_os_error(e), handshake=False)
            return
        if not self._lost:
            self._reader.cancel()
        await self._finish(None, handshake=True)

    async def _read_loop(self) -> None:
        exc: Exception | None = None
        try:
            while True:
                await self._reading.wait()
                msg = await self._ws.receive()
                if msg.type is WSMsgType.TEXT:
                    self._protocol.data_received(msg.data.encode("utf-8"))
                elif msg.type is WSMsgType.BINARY:
                    self._protocol.data_received(msg.data)
                elif msg.type is WSMsgType.ERROR:
                    exc = _as_os_error(msg.data)
                    break
                else:  # CLOSE, CLOSING, CLOSED: the peer ended the conversation
                    break
        except asyncio.CancelledError:
            raise
        except Exception as e:
            exc = _as_os_error(e)
        if exc is None:
            self._protocol.eof_received()
        self._closing = True
        self._pending.clear()
        self._buffered = 0
        if not self._lost:
            self._writer.cancel()
        await self._finish(exc, handshake=exc is None)

    async def _finish(self, exc: Exception | None, *, handshake: bool) -> None:
        """Close the WebSocket and the session, then tell the protocol (once)."""
        if self._lost:
            return
        self._lost = True
        try:
            if not self._ws.closed:
                # without the handshake, close() is cut at its first wait: the close frame
                # may go out, but the response is released (no "Unclosed response" left)
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(CLOSE_TIMEOUT if handshake else 0):
                        await self._ws.close()
        finally:
            try:
                with contextlib.suppress(Exception):
                    await self._session.close()
            finally:  # even when cancelled: the protocol must learn the connection is gone
                if self._writing_paused:
                    self._writing_paused = False
                    with contextlib.suppress(Exception):
                        self._protocol.resume_writing()
                self._protocol.connection_lost(exc)


def _via_proxy(url: str) -> str:
    """aiohttp sends a ``ws://`` request to a proxy as ``GET ws://...``, a form proxies
    reject (squid: 501); as ``http://`` it is an ordinary request with an Upgrade header,
    which the proxy forwards or refuses by its policy.  (``wss://`` goes through CONNECT.)"""
    scheme, sep, rest = url.partition("://")
    return {"ws": "http", "wss": "https"}.get(scheme.lower(), scheme) + sep + rest


def _as_os_error(e: object) -> OSError:
    if isinstance(e, OSError):
        return e
    text = str(e) or type(e).__name__
    return ConnectionResetError(f"WebSocket connection lost: {text}")


async def open_websocket_connection(
    url: str,
    *,
    subprotocols: Sequence[str] = STOMP_SUBPROTOCOLS,
    proxy: str | None = None,
    proxy_auth: tuple[str, str] | None = None,
    ssl: ssl_module.SSLContext | None = None,
    limit: int = READ_LIMIT,
    max_message_size: int = MAX_MESSAGE_SIZE,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open ``url`` (``ws://`` or ``wss://``) and return streams over it, like
    ``asyncio.open_connection``.  ``ssl`` verifies a ``wss://`` server (None: the system's
    CAs).  The caller applies its own timeout.

    Raises OSError: ``WebSocketRefused`` when the server or the proxy answered the upgrade
    with something other than 101, another OSError when nothing could be reached."""
    auth_headers, proxy_headers = proxy_auth_headers(
        proxy_auth if proxy else None, tunnelled=url.startswith("wss:")
    )
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None), headers=auth_headers)
    try:
        ws = await session.ws_connect(
            _via_proxy(url) if proxy else url,
            protocols=tuple(subprotocols),
            proxy=proxy,
            proxy_headers=proxy_headers,
            ssl=ssl if ssl is not None else True,
            autoclose=True,
            autoping=True,
            compress=0,
            max_msg_size=MAX_INCOMING_SIZE,
            timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=CLOSE_TIMEOUT),
        )
    except aiohttp.ClientResponseError as e:
        await session.close()
        raise _refusal(e, url, proxy) from None
    except OSError:
        await session.close()
        raise
    except aiohttp.ClientError as e:
        await session.close()
        raise ConnectionError(f"WebSocket to {url} failed: {e or type(e).__name__}") from None
    except BaseException:
        await session.close()
        raise
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit, loop=loop)
    protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    transport = WebSocketTransport(session, ws, protocol, max_message_size)
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    return reader, writer


__all__ = [
    "STOMP_SUBPROTOCOLS",
    "WebSocketRefused",
    "WebSocketTransport",
    "open_websocket_connection",
]
