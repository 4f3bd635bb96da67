"""The caching and CORS headers every SockJS answer carries.

sockjs-client reaches the server cross-origin with credentials (XHR ``withCredentials``),
so the caller's Origin is echoed (``*`` when absent or ``null``, as for pages opened from
``file://``) with ``Access-Control-Allow-Credentials: true``.
"""

from __future__ import annotations

from email.utils import formatdate
from time import time

from aiohttp import web

NO_CACHE = "no-store, no-cache, must-revalidate, max-age=0"
YEAR = 31536000
TEXT = "text/plain; charset=UTF-8"
JAVASCRIPT = "application/javascript; charset=UTF-8"


def cors(request: web.Request) -> dict[str, str]:
    origin = request.headers.get("Origin", "null")
    h = {
        "Access-Control-Allow-Origin": "*" if origin == "null" else origin,
        "Access-Control-Allow-Credentials": "true",
    }
    asked = request.headers.get("Access-Control-Request-Headers")
    if asked:
        h["Access-Control-Allow-Headers"] = asked
    if origin != "null":
        h["Vary"] = "Origin"
    return h


def requester(request: web.Request) -> tuple[str, str | None]:
    """What binds a session to its creator: the source address and the JSESSIONID cookie
    (None when the request carries none)."""
    return request.remote or "?", request.cookies.get("JSESSIONID")


def forbidden(request: web.Request, sid: str) -> web.Response:
    """The answer to a request for a session another client created."""
    text = (
        f"SockJS session {sid[:40]!r} belongs to another client (sessions are bound to the "
        "address and JSESSIONID cookie of the request that created them)"
    )
    return web.Response(status=403, text=text, headers=cors(request))


def no_cache(request: web.Request, content_type: str) -> dict[str, str]:
    return {"Content-Type": content_type, "Cache-Control": NO_CACHE, **cors(request)}


def cached_for_a_year() -> dict[str, str]:
    return {
        "Cache-Control": f"public, max-age={YEAR}",
        "Expires": formatdate(time() + YEAR, usegmt=True),
    }


def options(request: web.Request, methods: str) -> web.Response:
    """The answer to a CORS preflight: cacheable for a year."""
    h = {
        **cached_for_a_year(),
        **cors(request),
        "Access-Control-Allow-Methods": methods,
        "Access-Control-Max-Age": str(YEAR),
    }
    return web.Response(status=204, headers=h)


__all__ = [
    "JAVASCRIPT",
    "NO_CACHE",
    "TEXT",
    "cached_for_a_year",
    "cors",
    "forbidden",
    "no_cache",
    "options",
    "requester",
]
