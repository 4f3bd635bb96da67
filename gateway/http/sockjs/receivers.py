"""The HTTP receiving transports: xhr (polling), xhr_streaming, eventsource, htmlfile and
jsonp (polling).  They differ only in content type, prelude and how a frame is wrapped;
the session rules are the same for all (see session.py).

A polling request answers with the first frame there is (messages, the close frame, or a
heart-beat after ``heartbeat`` seconds of silence).  A streaming request stays open and
carries frames until ``response_limit`` bytes have gone (then the client opens the next
one, so the browser can free what it read).  A client dropping a request is noticed within
a second even while nothing is written, and is looked for again just before messages are
taken from the session: a request found gone ends the session (``c[1002,...]``), so the
client reconnects rather than carrying on with a hole in its stream.

What remains is inherent to SockJS polling: a client that drops a polling request after
that last look, while its answer is on the way, loses the answer and the server cannot
tell (the write into the socket succeeds).  sockjs-client only abandons a poll when it is
closing the session anyway.  Messages under STOMP ``client`` acks stay unacknowledged and
are redelivered once the session ends; with ``auto`` ack, as over TCP, a message written
out counts as delivered.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.typedefs import Handler

from waystation.gateway.admission import REFUSAL_DELAY
from waystation.gateway.http.sockjs import framing
from waystation.gateway.http.sockjs.headers import JAVASCRIPT, cors, forbidden, no_cache, requester
from waystation.gateway.http.sockjs.session import Sessions, SockJsSession
from waystation.gateway.websocket.streams import client_gone, peer_of

GONE_CHECK = 1.0  # seconds between looks at whether an idle request's client is still there
CALLBACK = re.compile(r"[A-Za-z0-9_.\-]+")
_HTMLFILE_HEAD = """<!doctype html>
<html><head>
  <meta http-equiv="X-UA-Compatible" content="IE=edge" />
  <meta http-equiv="Content-Type" content="text/html; charset=UTF-8" />
</head><body><h2>Don't panic!</h2>
  <script>
    document.domain = document.domain;
    var c = parent.%s;
    c.start();
    function p(d) {c.message(d);};
    window.onload = function() {c.stop();};
  </script>
"""


def _html_prelude(callback: str) -> str:
    head = _HTMLFILE_HEAD % callback
    return head + " " * max(0, 1024 - len(head)) + "\r\n\r\n"  # past IE's 1 KiB buffering


def _html_frame(frame: str, _callback: str) -> str:
    return "<script>\np(" + json.dumps(frame).replace("</", "<\\/") + ");\n</script>\r\n"


@dataclass(frozen=True, slots=True)
class Receiver:
    name: str
    method: str
    content_type: str
    streaming: bool
    wrap: Callable[[str, str], str]  # (frame, callback) -> what goes on the wire
    prelude: Callable[[str], str] = lambda _cb: ""
    needs_callback: bool = False


RECEIVERS = (
    Receiver("xhr", "POST", JAVASCRIPT, False, lambda f, _: f + "\n"),
    Receiver(
        "xhr_streaming",
        "POST",
        JAVASCRIPT,
        True,
        lambda f, _: f + "\n",
        lambda _: "h" * 2048 + "\n",
    ),
    Receiver(
        "eventsource",
        "GET",
        "text/event-stream; charset=UTF-8",
        True,
        lambda f, _: f"data: {f}\r\n\r\n",
        lambda _: "\r\n",
    ),
    Receiver("htmlfile", "GET", "text/html; charset=UTF-8", True, _html_frame, _html_prelude, True),
    Receiver(
        "jsonp",
        "GET",
        JAVASCRIPT,
        False,
        lambda f, cb: f"/**/{cb}({json.dumps(f)});\r\n",
        needs_callback=True,
    ),
)


async def next_frame(
    session: SockJsSession, request: web.Request, heartbeat: float | None, limit: int
) -> str | None:
    """What to send next; None when the client has gone."""
    link = session.link
    now = asyncio.get_running_loop().time
    deadline = now() + heartbeat if heartbeat else math.inf
    while True:
        if client_gone(request):  # before taking: what is taken must not go to a dead request
            return None
        if link.pending:
            return framing.messages([link.take(limit).decode()])
        if link.closing:
            return session.final_frame()
        left = deadline - now()
        if left <= 0:
            return framing.HEARTBEAT
        await link.wait(min(left, GONE_CHECK))


def handler(spec: Receiver, sessions: Sessions, heartbeat: float | None, limit: int) -> Handler:
    async def poll(session: SockJsSession, request: web.Request) -> str | None:
        refusal = session.attach()
        if refusal is not None:
            return refusal
        frame = None
        try:
            frame = await next_frame(session, request, heartbeat, limit)
        finally:
            session.detach(aborted=frame is None)
        return frame

    async def stream(
        session: SockJsSession, request: web.Request, resp: web.StreamResponse, cb: str
    ) -> None:
        refusal = session.attach()
        if refusal is not None:
            await resp.write(spec.wrap(refusal, cb).encode())
            return
        aborted, sent = True, 0
        try:
            while True:
                frame = await next_frame(session, request, heartbeat, limit)
                if frame is None:
                    return
                data = spec.wrap(frame, cb).encode()
                await resp.write(data)
                sent += len(data)
                if frame[0] == "c" or sent >= limit:
                    aborted = False
                    return
        finally:
            session.detach(aborted)

    async def handle(request: web.Request) -> web.StreamResponse:
        cb = ""
        if spec.needs_callback:
            cb = request.query.get("c", "")
            if not cb:
                raise web.HTTPInternalServerError(text='"callback" parameter required')
            if not CALLBACK.fullmatch(cb):
                raise web.HTTPInternalServerError(text='invalid "callback" parameter')
        sid = request.match_info["session"]
        session = sessions.get(sid)
        created = session is None
        host, cookie = requester(request)
        if session is None:
            refusal = sessions.refusal(host)
            if refusal is not None:
                if not sessions.full:  # per address: held a moment, to slow a flooding loop
                    await asyncio.sleep(REFUSAL_DELAY)
                return web.Response(status=503, text=refusal, headers=cors(request))
            session = sessions.create(sid, peer_of(request), host, cookie)
        elif not session.belongs_to(host, cookie):
            return forbidden(request, sid)
        else:
            sessions.logged_in(session)
        headers = no_cache(request, spec.content_type)
        if not spec.streaming:
            frame = framing.OPEN if created else await poll(session, request)
            body = spec.wrap(frame, cb).encode() if frame is not None else b""
            return web.Response(body=body, headers=headers)
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        try:
            opening = spec.prelude(cb) + (spec.wrap(framing.OPEN, cb) if created else "")
            await resp.write(opening.encode())
            await stream(session, request, resp, cb)
            await resp.write_eof()
        except ConnectionError:
            pass  # the client went away; the session has been told (detach)
        return resp

    return handle


__all__ = ["RECEIVERS", "Receiver", "handler", "next_frame"]
