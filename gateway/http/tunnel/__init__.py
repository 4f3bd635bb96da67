"""HTTP tunnel: a stream protocol (STOMP; later AMQP, MQTT) over plain HTTP/1.1 requests,
for clients behind proxies that allow neither ``CONNECT`` nor WebSocket upgrades.

Protocol (``{path}`` is ``[acceptors.http.tunnel] path``, default ``/tunnel``; names in
:mod:`wire.tunnel`).  Every answer has ``Cache-Control: no-store``; bodies are
``application/octet-stream``; errors are ``text/plain`` saying what was wrong.

- ``POST {path}/open?protocol=stomp`` -> 201 ``{"session", "token", "response_time",
  "session_timeout"}``; the session id is 128 random bits chosen by the server, the token
  256, and every later request must carry ``X-Tunnel-Token: {token}`` (else 403).  Unknown
  protocol -> 400 naming the known ones; ``max_sessions`` open already, or
  ``max_sessions_per_address`` from the client's address, or ``max_unauthenticated_sessions``
  not logged in yet with none to push out (see :mod:`.registry`) -> 503 naming the limit.
- ``POST {path}/{sid}/up?offset=N``: the body is upstream bytes from stream offset N (at
  most ``max_request_size``, else 413).  Only bytes beyond what the server has are fed to
  the protocol, so a repeated POST is harmless.  200 with ``X-Tunnel-Received`` = upstream
  bytes taken.  N beyond that -> 409 with the same header.  While the protocol holds its
  input back (backpressure: a full BLOCK address) the rest of the body waits, at most
  ``response_time``; then the answer says how far the server got (possibly short of the
  body's end) and the client sends the remainder again.  An empty body is a keep-alive
  (the client sends one while its reader is full and it cannot poll).
- ``GET {path}/{sid}/down?ack=M``: M = downstream bytes the client has.  The server forgets
  bytes before M and answers the bytes from M (``X-Tunnel-Offset``: M), at most 256 KiB,
  holding the poll up to ``response_time`` while there is nothing, then 200 empty.  A lost
  answer is asked again with the same M.  One poll per session: a newer poll makes a held
  one answer empty.  M beyond what was sent -> 409 with ``X-Tunnel-Sent``.
- When the protocol closes the session (an ERROR frame, DISCONNECT), the remaining bytes are
  still delivered; the answer carrying the last of them has ``X-Tunnel-Closed: 1``.  A poll
  that acknowledges everything then ends the session.
- ``DELETE {path}/{sid}`` -> 204 and the session ends.  A session with no request for
  ``session_timeout`` ends (a request in progress counts for ``response_time`` at most), as
  does one that sent no upstream byte within ``session_timeout`` of opening.  On server shutdown every session ends.  An ended session's
  protocol session gets ``connection_lost()``; a held poll answers ``X-Tunnel-Closed: 1``;
  later requests get 410 (for one ``session_timeout``), unknown ids 404.

Server side only; the client is :mod:`client.tunnel`.
"""

from __future__ import annotations

from aiohttp import web

from waystation.gateway.http.context import HttpContext
from waystation.gateway.http.tunnel.registry import Registry
from waystation.gateway.http.tunnel.routes import Routes

REGISTRY = web.AppKey("tunnel_registry", Registry)


def setup(app: web.Application, ctx: HttpContext) -> None:
    registry = Registry(ctx)
    app[REGISTRY] = registry
    path = ctx.cfg.tunnel.path.rstrip("/")
    Routes(registry).add(app, path)

    async def no_store(request: web.Request, response: web.StreamResponse) -> None:
        if request.path.startswith(path + "/"):
            response.headers["Cache-Control"] = "no-store"

    async def start(app: web.Application) -> None:
        await registry.start()

    async def stop(app: web.Application) -> None:
        await registry.stop()

    app.on_response_prepare.append(no_store)
    app.on_startup.append(start)
    app.on_shutdown.append(stop)


__all__ = ["REGISTRY", "setup"]
