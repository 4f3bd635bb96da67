"""The HTTP sending transports: ``xhr_send`` (a JSON array in the body) and ``jsonp_send``
(the same array as form field ``d``, or as the raw body).

The answer is held until the messages are fed to the STOMP session, and one session's send
requests are fed one after the other in arrival order, so a client's frames arrive as it
sent them.  Errors are the spec's: 404 for an unknown session, 500 ``Payload expected.``
for an empty payload, 500 ``Broken JSON encoding.`` for anything but a JSON array of
strings; and 413 for a body over ``max_send_size`` (checked per route: aiohttp's own limit
is the whole listener's).
"""

from __future__ import annotations

from urllib.parse import parse_qs

from aiohttp import web
from aiohttp.typedefs import Handler

from waystation.gateway.http.context import read_body
from waystation.gateway.http.sockjs.framing import PayloadError, decode_payload, to_bytes
from waystation.gateway.http.sockjs.headers import TEXT, cors, forbidden, no_cache, requester
from waystation.gateway.http.sockjs.session import Sessions


def _form_payload(request: web.Request, raw: bytes) -> bytes:
    if request.content_type != "application/x-www-form-urlencoded":
        return raw
    fields = parse_qs(raw.decode("latin-1"), keep_blank_values=True, encoding="utf-8")
    return fields.get("d", [""])[0].encode()


def handler(sessions: Sessions, jsonp: bool, limit: int) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        sid = request.match_info["session"]
        session = sessions.get(sid)
        if session is None:
            return web.Response(status=404, text="No such SockJS session.", headers=cors(request))
        if not session.belongs_to(*requester(request)):
            return forbidden(request, sid)
        raw = await read_body(request, limit)
        if raw is None:
            text = f"Payload too large: over max_send_size ({limit} bytes)."
            return web.Response(status=413, text=text, headers=cors(request))
        try:
            chunks = to_bytes(decode_payload(_form_payload(request, raw) if jsonp else raw))
        except PayloadError as e:
            return web.Response(status=500, text=str(e), headers=cors(request))
        await session.feed(chunks)
        sessions.logged_in(session)  # leaves the lobby once its CONNECT went through
        if jsonp:
            return web.Response(body=b"ok", headers=no_cache(request, TEXT))
        return web.Response(status=204, headers=no_cache(request, TEXT))

    return handle


__all__ = ["handler"]
