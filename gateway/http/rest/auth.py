"""HTTP Basic credentials -> the engine's Principal, and permission checks on it.

The engine's :class:`~waystation.core.authentication.Authenticator` decides, as for STOMP's
CONNECT, so a user has the same rights (and the same login throttle) over HTTP as over
STOMP; the password hash runs in its worker threads.  With security off everybody passes
(the engine's embedded default).  Missing or wrong credentials -> 401 with
``WWW-Authenticate`` and the one text ``authentication failed`` (a throttled source or
login adds when to retry); a missing permission -> 403.
"""

from __future__ import annotations

import base64
import binascii

from aiohttp import hdrs, web

from waystation.core.authentication import authenticator
from waystation.core.engine import Engine
from waystation.core.security import AuthenticationError, NotAuthorized, Permission, Principal
from waystation.core.session import Session
from waystation.gateway.http.rest.errors import fail, unauthorized


def _credentials(request: web.Request, engine: Engine) -> tuple[str | None, str | None]:
    header = request.headers.get(hdrs.AUTHORIZATION)
    if not header:
        return None, None
    try:
        return decode_basic(header)
    except ValueError as e:
        if engine.secured:
            raise unauthorized(f"unusable Authorization header: {e}") from None
        return None, None


def source_of(request: web.Request) -> str:
    """The peer's address as the socket says (never a forwarded-for header: a client
    could name any address there and so dodge the per-source throttle)."""
    return request.remote or "?"


async def who(request: web.Request, engine: Engine) -> Principal:
    """Who sent ``request`` (401 when security is on and credentials are bad); the hash
    runs off the event loop."""
    login, password = _credentials(request, engine)
    try:
        return await authenticator(engine).authenticate(login, password, source_of(request))
    except AuthenticationError as e:
        raise unauthorized(str(e)) from None


def principal(request: web.Request, engine: Engine) -> Principal:
    """Synchronous :func:`who` for callers not yet async: same throttle and answers, but
    the hash runs on the loop.  Prefer ``await who(...)``."""
    login, password = _credentials(request, engine)
    try:
        return authenticator(engine).authenticate_blocking(login, password, source_of(request))
    except AuthenticationError as e:
        raise unauthorized(str(e)) from None


def decode_basic(header: str) -> tuple[str, str]:
    """(login, password) of an ``Authorization: Basic ...`` header (RFC 7617, UTF-8)."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        raise ValueError(f"expected the Basic scheme, got {scheme!r}")
    try:
        text = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise ValueError("credentials are not base64 of UTF-8 user:password") from None
    login, sep, password = text.partition(":")
    if not sep:
        raise ValueError("credentials have no ':' between user and password")
    return login, password


def check(session: Session, permission: Permission, address: str) -> None:
    """403 unless the session's user holds ``permission`` on ``address``."""
    try:
        session.check(permission, address)
    except NotAuthorized as e:
        raise fail(web.HTTPForbidden, f"not authorized: {e}") from None


def check_any(session: Session, permissions: tuple[Permission, ...], address: str) -> None:
    """403 unless the session's user holds at least one of ``permissions`` on ``address``."""
    if any(session.allowed(p, address) for p in permissions):
        return
    names = " or ".join(p.value.replace("_", " ") for p in permissions)
    who = session.principal.name
    raise fail(web.HTTPForbidden, f"not authorized: user {who!r} may not {names} on {address!r}")


__all__ = ["check", "check_any", "decode_basic", "principal", "source_of", "who"]
