"""SockJS over a real WebSocket: ``/{server}/{session}/websocket`` with SockJS framing
(``o``, ``h``, ``a[...]``, ``c[...]``; the client sends JSON arrays of strings) and the raw
``/websocket`` (each text message is STOMP bytes as they are, as at ``/stomp`` but text
only).  A WebSocket session lives as long as its connection: session ids may be reused and
no other request can join it.  Broken JSON from the client closes the connection at once,
as the spec asks.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import weakref

from aiohttp import WSCloseCode, WSMsgType, web
from aiohttp.typedefs import Handler

from waystation.gateway.admission import connect_deadline
from waystation.gateway.http.context import HttpContext
from waystation.gateway.http.sockjs import framing
from waystation.gateway.http.sockjs.textlink import TextLink
from waystation.gateway.queued_link import feed
from waystation.gateway.stomp import ADAPTER as STOMP
from waystation.gateway.stomp.session import StompSession
from waystation.gateway.websocket.streams import finish, input_resumed, peer_of

log = logging.getLogger("waystation.sockjs")


async def _pump(
    ws: web.WebSocketResponse, link: TextLink, framed: bool, heartbeat: float | None
) -> None:
    """Send what the session writes, in SockJS framing (with heart-beats) when ``framed``."""
    if framed:
        await ws.send_str(framing.OPEN)
    while True:
        if not await link.wait(heartbeat if framed else None):
            await ws.send_str(framing.HEARTBEAT)
            continue
        data = link.take()
        if data:
            text = data.decode()  # TextLink lets only UTF-8 through
            await ws.send_str(framing.messages([text]) if framed else text)
        if link.closing and not link.pending:
            if framed:
                await ws.send_str(framing.close(*framing.GO_AWAY))
            await ws.close()
            return


def _refusal(request: web.Request) -> web.Response | None:
    """The spec's answers to requests that cannot become WebSockets."""
    if request.method != "GET":
        return web.Response(status=405, headers={"Allow": "GET"})
    if request.headers.get("Upgrade", "").lower() != "websocket":
        return web.Response(status=400, text='Can "Upgrade" only to "WebSocket".')
    tokens = {t.strip().lower() for t in request.headers.get("Connection", "").split(",")}
    if "upgrade" not in tokens:
        return web.Response(status=400, text='"Connection" must be "Upgrade".')
    return None


def handlers(
    ctx: HttpContext, heartbeat: float | None, sockets: weakref.WeakSet[web.WebSocketResponse]
) -> tuple[Handler, Handler]:
    max_size = ctx.cfg.websocket.max_message_size

    async def serve(request: web.Request, framed: bool) -> web.StreamResponse:
        refused = _refusal(request)
        if refused is not None:
            return refused
        ws = web.WebSocketResponse(
            protocols=STOMP.subprotocols, max_msg_size=max_size, compress=False, autoping=True
        )
        await ws.prepare(request)
        sockets.add(ws)
        link = TextLink(peer_of(request), lambda m, d: session.fail(m, d))
        session = StompSession(ctx.engine, link, ctx.stomp)
        link.target = session
        login = connect_deadline(session, ctx.cfg.sockjs.connect_timeout.total_seconds())
        pump = asyncio.ensure_future(_pump(ws, link, framed, heartbeat))
        resumed = functools.partial(input_resumed, link, request)
        try:
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    if framed:
                        if not msg.data:
                            continue  # the spec: empty messages are ignored
                        try:
                            chunks = framing.to_bytes(framing.decode_payload(msg.data, True))
                        except framing.PayloadError as e:
                            log.info("SockJS WebSocket %s: %s", link.peer, e)
                            await ws.close(code=WSCloseCode.PROTOCOL_ERROR, message=str(e).encode())
                            break
                    else:
                        chunks = [msg.data.encode()]
                elif msg.type is WSMsgType.BINARY and not framed:
                    chunks = [msg.data]
                else:
                    break  # binary SockJS frames, errors
                data = b"".join(chunks)  # SockJS messages are pieces of one STOMP stream
                if not await feed(session, link, data, resumed) or session.closed:
                    break
                if not await resumed():  # take no more messages while input is held
                    break
        finally:
            if login is not None:
                login.cancel()
            await finish(ws, link, session, pump)
        return ws

    async def framed(request: web.Request) -> web.StreamResponse:
        return await serve(request, True)

    async def raw(request: web.Request) -> web.StreamResponse:
        return await serve(request, False)

    return framed, raw


__all__ = ["handlers"]
