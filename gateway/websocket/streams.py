"""Stream protocols over WebSocket: each adapter's session, fed WebSocket messages.

STOMP is at ``websocket.stomp_path`` (``/stomp``), every other protocol at ``/<name>``
(``/amqp``, ``/mqtt``), each offering its adapter's subprotocols (``v12.stomp``...; ``amqp``,
``AMQPWSB10``; ``mqtt``, ``mqttv3.1``; a client that asks for none is served too, as RabbitMQ
does; one that asks only for others gets 400 naming those offered).  What a session
writes during one loop turn leaves as one WebSocket message; STOMP parsers read several
frames from one message, and AMQP and MQTT are byte streams anyway.  For STOMP a message
is sent as text when it is valid UTF-8, otherwise (and always for the binary protocols) as
binary.  A large incoming message is fed to the session in slices, one per loop turn.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import WSMsgType, hdrs, web

from waystation.gateway.adapter import ProtocolAdapter, StreamSession
from waystation.gateway.admission import connect_deadline, peer_text
from waystation.gateway.http.context import HttpContext
from waystation.gateway.queued_link import SLICE, QueuedLink, feed

if TYPE_CHECKING:
    from waystation.config.listeners import WebSocketConfig

log = logging.getLogger("waystation.websocket")

GONE_CHECK = 1.0  # seconds between looks at the socket while the session's input is held


def peer_of(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    return peer_text(peer)


def client_gone(request: web.Request) -> bool:
    """The client's connection is closed (aiohttp drops the transport when it is lost)."""
    t = request.transport
    return t is None or t.is_closing()


async def input_resumed(link: QueuedLink, request: web.Request) -> bool:
    """Wait while the session holds its input back (a send to a full BLOCK address); False
    if the client went away or the session closed meanwhile.  No message is taken from the
    socket while waiting (that is the backpressure), so the socket itself is looked at every
    GONE_CHECK seconds: a client that drops it must not leave the session, with its
    subscriptions and unacked messages, held until the address drains."""
    reading = link.reading
    while not reading.is_set():
        if client_gone(request):
            return False
        try:
            await asyncio.wait_for(reading.wait(), GONE_CHECK)
        except TimeoutError:
            pass
    return not link.closing


async def _pump(ws: web.WebSocketResponse, link: QueuedLink, text: bool = True) -> None:
    """Send what the session writes, one WebSocket message per batch (``text``: as a text
    message when the batch is UTF-8)."""
    while True:
        await link.wait()
        data = link.take()
        if data:
            opcode = WSMsgType.BINARY
            if text:
                try:
                    data.decode()
                    opcode = WSMsgType.TEXT
                except UnicodeDecodeError:
                    pass
            await ws.send_frame(data, opcode)
        if link.closing and not link.pending:
            await ws.close()
            return


async def finish(
    ws: web.WebSocketResponse, link: QueuedLink, session: StreamSession, pump: asyncio.Future[None]
) -> None:
    """End a session whose socket is done: let the pump send what is queued (2 s at most),
    then close the socket."""
    session.connection_lost()
    link.target = None  # the session and its link refer to each other: freed now, not by GC
    if not link.closing:
        link.close()
    try:
        await asyncio.wait_for(pump, 2.0)
    except (TimeoutError, ConnectionError, asyncio.CancelledError):
        pump.cancel()
    if not ws.closed:
        await ws.close()


def setup(app: web.Application, ctx: HttpContext) -> None:
    """A WebSocket path for each stream protocol the context carries."""
    sockets: weakref.WeakSet[web.WebSocketResponse] = weakref.WeakSet()
    cfg = ctx.cfg.websocket
    for name, new_session in ctx.sessions.items():
        adapter = ctx.adapters[name]
        path = getattr(cfg, f"{name}_path", f"/{name}")
        app.router.add_get(path, _handler(adapter, new_session, cfg, sockets))

    async def close_all(app: web.Application) -> None:
        for ws in list(sockets):
            await ws.close(code=1001, message=b"server shutdown")

    app.on_shutdown.append(close_all)


def _handler(
    adapter: ProtocolAdapter,
    new_session: Callable[[QueuedLink], StreamSession],
    cfg: WebSocketConfig,
    sockets: weakref.WeakSet[web.WebSocketResponse],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    refused = f"this path takes WebSocket upgrades ({adapter.name.upper()})\n"
    offered = set(adapter.subprotocols)

    async def handle(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(
            protocols=adapter.subprotocols,
            max_msg_size=cfg.max_message_size,
            compress=False,
            autoping=True,
        )
        if not ws.can_prepare(request).ok:
            raise web.HTTPBadRequest(text=refused)
        asked = request.headers.get(hdrs.SEC_WEBSOCKET_PROTOCOL, "")
        if asked.strip() and not offered & {p.strip() for p in asked.split(",")}:
            # aiohttp would answer without a subprotocol, which browsers fail obscurely
            raise web.HTTPBadRequest(
                text=f"subprotocols offered here: {', '.join(adapter.subprotocols)}\n"
            )
        try:
            await ws.prepare(request)
        except ConnectionError:  # the client went away before the 101: nothing to serve
            log.debug("WebSocket %s: the client left before its upgrade was answered",
                      peer_of(request))  # fmt: skip
            return web.Response(status=400, text="the client left\n")  # reaches nobody
        sockets.add(ws)
        link = QueuedLink(peer_of(request))
        session = new_session(link)
        link.target = session
        login = connect_deadline(session, cfg.connect_timeout.total_seconds())
        pump = asyncio.ensure_future(_pump(ws, link, adapter.text_frames))
        resumed = functools.partial(input_resumed, link, request)
        reading = link.reading
        try:
            async for msg in ws:
                if msg.type is WSMsgType.ERROR:
                    log.info("WebSocket %s: %s", link.peer, ws.exception())
                    break
                data = msg.data.encode() if msg.type is WSMsgType.TEXT else msg.data
                if len(data) <= SLICE and reading.is_set():
                    session.data_received(data)  # the common case, without a coroutine
                elif not await feed(session, link, data, resumed):
                    break
                if session.closed:
                    break
                if not reading.is_set() and not await resumed():
                    break  # took no more messages while input was held, and the client left
        except ConnectionError:  # gone while aiohttp answered a ping or a close: normal
            log.debug("WebSocket %s: the client went away", link.peer)
        finally:
            if login is not None:
                login.cancel()
            await finish(ws, link, session, pump)
        return ws

    return handle
