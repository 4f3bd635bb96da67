"""HTTP Basic credentials -> the engine's Principal, and permission checks on it.

The same ``SecurityManager`` as STOMP's CONNECT decides, so a user has the same rights over
HTTP as over STOMP.  With security off everybody passes (the engine's embedded default).
Missing or wrong credentials -> 401 with ``WWW-Authenticate``; a missing permission -> 403.
"""

from __future__ import annotations

import base64
import binascii

from aiohttp import hdrs, web

from waystation.core.engine import Engine
from waystation.core.security import AuthenticationError, NotAuthorized, Permission, Principal
from waystation.gateway.http.rest.errors import fail, unauthorized


def principal(request: web.Request, engine: Engine) -> Principal:
    """Who sent ``request`` (raises 401 when security is on and credentials are bad)."""
    security = engine.security
    header = request.headers.get(hdrs.AUTHORIZATION)
    login: str | None = None
    password: str | None = None
    if header:
        try:
            login, password = decode_basic(header)
        except ValueError as e:
            if security.enabled:
                raise unauthorized(f"unusable Authorization header: {e}") from None
    try:
        return security.authenticate(login, password)
    except AuthenticationError as e:
        raise unauthorized(f"authentication failed: {e}") from None


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


def check(engine: Engine, who: Principal, permission: Permission, address: str) -> None:
    try:
        engine.security.check(who, permission, address)
    except NotAuthorized as e:
        raise fail(web.HTTPForbidden, f"not authorized: {e}") from None


def check_any(
    engine: Engine, who: Principal, permissions: tuple[Permission, ...], address: str
) -> None:
    """403 unless ``who`` holds at least one of ``permissions`` on ``address``."""
    security = engine.security
    if any(security.allowed(who, p, address) for p in permissions):
        return
    names = " or ".join(p.value.replace("_", " ") for p in permissions)
    raise fail(
        web.HTTPForbidden, f"not authorized: user {who.name!r} may not {names} on {address!r}"
    )


__all__ = ["check", "check_any", "decode_basic", "principal"]
