"""The tunnel's HTTP requests: open, upstream POST, downstream poll, close."""

from __future__ import annotations

import asyncio

from aiohttp import web

from waystation.gateway.admission import REFUSAL_DELAY
from waystation.gateway.http.context import read_body
from waystation.gateway.http.tunnel.registry import Full, Registry
from waystation.gateway.http.tunnel.session import Ended, TunnelSession
from waystation.gateway.websocket.streams import peer_of
from waystation.wire.tunnel import (
    CONTENT_TYPE,
    H_CLOSED,
    H_OFFSET,
    H_RECEIVED,
    H_SENT,
    H_TOKEN,
    PARAM_ACK,
    PARAM_OFFSET,
    PARAM_PROTOCOL,
    SESSION_ID,
    OffsetError,
    SessionInfo,
    parse_offset,
)


def _text(status: int, text: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, text=text + "\n", headers=headers)


class Routes:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.max_request = registry.ctx.cfg.tunnel.max_request_size

    def add(self, app: web.Application, path: str) -> None:
        app.router.add_post(f"{path}/open", self.open)
        app.router.add_post(path + "/{sid}/up", self.up)
        app.router.add_get(path + "/{sid}/down", self.down)
        app.router.add_delete(path + "/{sid}", self.delete)

    def _session(self, request: web.Request) -> TunnelSession | web.Response:
        sid = request.match_info["sid"]
        found = self.registry.lookup(sid) if SESSION_ID.fullmatch(sid) else False
        if found is True:
            return _text(410, f"tunnel session {sid} is closed")
        if found is False:
            return _text(404, f"no tunnel session {sid[:40]!r} (unknown or expired)")
        assert isinstance(found, TunnelSession)
        if not found.authorized(request.headers.get(H_TOKEN)):
            return _text(
                403,
                f"{H_TOKEN} missing or wrong: only the client that opened the session may use it",
            )
        return found

    def _session_at(
        self, request: web.Request, param: str
    ) -> tuple[TunnelSession, int] | web.Response:
        """The session and the stream offset in query parameter ``param`` (or the answer)."""
        found = self._session(request)
        if isinstance(found, web.Response):
            return found
        try:
            return found, parse_offset(request.query.get(param), param)
        except ValueError as e:
            return _text(400, str(e))

    async def open(self, request: web.Request) -> web.Response:
        protocol = request.query.get(PARAM_PROTOCOL)
        known = self.registry.ctx.sessions
        if protocol not in known:
            what = "missing" if protocol is None else f"unknown protocol {protocol[:40]!r}"
            return _text(400, f"{PARAM_PROTOCOL}: {what}; known: {', '.join(sorted(known))}")
        try:
            session = self.registry.open(protocol, peer_of(request), request.remote or "?")
        except Full as e:
            if e.per_address:  # held a moment: a flooding loop is slowed to this pace
                await asyncio.sleep(REFUSAL_DELAY)
            return _text(503, f"{e}; try again later", {"Retry-After": "1"})
        registry = self.registry
        info = SessionInfo(
            session.sid, registry.response_time, registry.session_timeout, session.token
        ).to_json()
        return web.json_response(info, status=201)

    async def up(self, request: web.Request) -> web.Response:
        found = self._session_at(request, PARAM_OFFSET)
        if isinstance(found, web.Response):
            return found
        session, offset = found
        session.begin()
        try:
            data = await read_body(request, self.max_request)
            if data is None:
                return _text(413, f"upstream body over max_request_size ({self.max_request} bytes)")
            received = await session.up(offset, data)
        except OffsetError as e:
            return _text(409, f"{e}; resend from {e.expected}", {H_RECEIVED: str(e.expected)})
        except Ended:
            return _text(410, f"tunnel session {session.sid} is closed")
        finally:
            session.done()
            self.registry.logged_in(session)  # leaves the lobby once its login went through
        return web.Response(status=200, headers={H_RECEIVED: str(received)})

    async def down(self, request: web.Request) -> web.Response:
        found = self._session_at(request, PARAM_ACK)
        if isinstance(found, web.Response):
            return found
        session, ack = found
        session.begin()
        try:
            offset, body, closed = await session.down(ack)
        except OffsetError as e:
            return _text(409, str(e), {H_SENT: str(e.expected)})
        finally:
            session.done()
            self.registry.logged_in(session)
        headers = {H_OFFSET: str(offset)}
        if closed:
            headers[H_CLOSED] = "1"
            if not body:  # the client has everything: the session is over
                self.registry.end(session, "stream closed and fully delivered")
        return web.Response(body=body, headers=headers, content_type=CONTENT_TYPE)

    async def delete(self, request: web.Request) -> web.Response:
        found = self._session(request)
        if isinstance(found, web.Response):
            return found
        self.registry.end(found, "closed by the client")
        return web.Response(status=204)


__all__ = ["Routes"]
