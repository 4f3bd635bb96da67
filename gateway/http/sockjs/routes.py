"""The SockJS URL scheme under one prefix (default ``/sockjs/stomp``): greeting, ``/info``,
``/iframe*.html``, the raw ``/websocket`` and ``/{server}/{session}/{transport}``.

``server`` is the client's load-balancer hint and is ignored; neither part may be empty or
contain a dot.  ``/iframe.html`` (for browsers without CORS) is served only when
``client_url`` names where the page can load sockjs-client from.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
import weakref

from aiohttp import web
from aiohttp.typedefs import Handler

from waystation.gateway.http.context import HttpContext
from waystation.gateway.http.sockjs import receivers, senders, websocket
from waystation.gateway.http.sockjs.headers import TEXT, cached_for_a_year, no_cache, options
from waystation.gateway.http.sockjs.session import Sessions

_IFRAME = """<!DOCTYPE html>
<html>
<head>
  <meta http-equiv="X-UA-Compatible" content="IE=edge" />
  <meta http-equiv="Content-Type" content="text/html; charset=UTF-8" />
  <script>
    document.domain = document.domain;
    _sockjs_onload = function(){SockJS.bootstrap_iframe();};
  </script>
  <script src="%s"></script>
</head>
<body>
  <h2>Don't panic!</h2>
  <p>This is a SockJS hidden iframe. It's used for cross domain magic.</p>
</body>
</html>"""
SESSION = "/{server:[^/.]+}/{session:[^/.]+}"
SESSIONS = web.AppKey("sockjs_sessions", Sessions)


async def greeting(request: web.Request) -> web.Response:
    return web.Response(body=b"Welcome to SockJS!\n", headers={"Content-Type": TEXT})


async def info(request: web.Request) -> web.Response:
    data = {
        "websocket": True,
        "cookie_needed": False,
        "origins": ["*:*"],
        "entropy": secrets.randbits(32),
    }
    h = no_cache(request, "application/json; charset=UTF-8")
    return web.Response(body=json.dumps(data).encode(), headers=h)


def _iframe_handler(client_url: str) -> Handler:
    body = (_IFRAME % client_url.replace('"', "%22")).encode()
    etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'

    async def iframe(request: web.Request) -> web.Response:
        if not client_url:
            raise web.HTTPNotFound(text="no client_url configured for the SockJS iframe\n")
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304)
        h = {"Content-Type": "text/html; charset=UTF-8", "ETag": etag, **cached_for_a_year()}
        return web.Response(body=body, headers=h)

    return iframe


def _options(methods: str) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        return options(request, methods)

    return handle


def setup(app: web.Application, ctx: HttpContext) -> None:
    # SockJS carries text: binary-bodied messages go to the dead-letter address, not the client
    ctx = dataclasses.replace(ctx, stomp=dataclasses.replace(ctx.stomp, text_only=True))
    cfg = ctx.cfg.sockjs
    heartbeat = cfg.heartbeat.total_seconds() or None  # 0: no heart-beats
    delay = cfg.disconnect_delay.total_seconds()
    sessions = Sessions(
        ctx.engine, ctx.stomp, delay, cfg.max_sessions, cfg.max_sessions_per_address,
        cfg.connect_timeout.total_seconds(), cfg.max_unauthenticated_sessions,
    )  # fmt: skip
    app[SESSIONS] = sessions
    sockets: weakref.WeakSet[web.WebSocketResponse] = weakref.WeakSet()
    prefix = cfg.stomp_path.rstrip("/")
    r = app.router

    r.add_get(prefix, greeting)
    r.add_get(prefix + "/", greeting)
    r.add_get(prefix + "/info", info)
    r.add_options(prefix + "/info", _options("OPTIONS, GET"))
    r.add_get(prefix + r"/{iframe:iframe(-[^/]*)?\.html}", _iframe_handler(cfg.client_url))
    framed, raw = websocket.handlers(ctx, heartbeat, sockets)
    r.add_route("*", prefix + "/websocket", raw)
    r.add_route("*", prefix + SESSION + "/websocket", framed)
    for spec in receivers.RECEIVERS:
        handle = receivers.handler(spec, sessions, heartbeat, cfg.response_limit)
        r.add_route(spec.method, prefix + SESSION + "/" + spec.name, handle)
        if spec.method == "POST":
            r.add_options(prefix + SESSION + "/" + spec.name, _options("OPTIONS, POST"))
    limit = cfg.max_send_size
    r.add_post(prefix + SESSION + "/xhr_send", senders.handler(sessions, False, limit))
    r.add_options(prefix + SESSION + "/xhr_send", _options("OPTIONS, POST"))
    r.add_post(prefix + SESSION + "/jsonp_send", senders.handler(sessions, True, limit))

    async def close_all(app: web.Application) -> None:
        sessions.close_all()
        for ws in list(sockets):
            await ws.close(code=1001, message=b"server shutdown")

    app.on_shutdown.append(close_all)


__all__ = ["SESSIONS", "setup"]
