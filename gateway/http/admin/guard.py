"""Who may use the admin API: HTTP Basic against the node's users, then ``manage``.

The login goes through the engine's :func:`~waystation.core.authentication.authenticator`,
so the admin API shares the throttle and the slow-hash worker pool of every other protocol
(guessing passwords here costs the same as over STOMP).  Each action names the address it
touches and the principal must hold ``manage`` there; node-wide views (connections, bridges)
need it on ``#``.  With security off (the embedded default) every caller on the node's own
host may, as everywhere else; callers from other hosts are refused, since an open admin API
on ``0.0.0.0`` would let anyone purge queues.

A refusal never carries a ``WWW-Authenticate: Basic`` challenge: a browser answers one with
its own login box and then keeps sending those credentials to the node, so any page could
act with them.  Tools send their credentials unasked (curl ``-u``, the admin CLI,
Prometheus); the console sends its own on each call.  What a browser may send at all is
checked before this, by :mod:`.origin`.

Every refused login and every action is written to the ``waystation.audit`` logger: who,
from where, what, and the outcome, so a log shipper can keep it apart from the node's log.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import logging

from aiohttp import web

from waystation.core.authentication import authenticator
from waystation.core.security import AuthenticationError, Permission, Principal
from waystation.gateway.http.context import HttpContext

audit = logging.getLogger("waystation.audit")

NODE_WIDE = "#"  # the address a node-wide action is checked on


def _error(cls: type[web.HTTPException], message: str) -> web.HTTPException:
    return cls(text=json.dumps({"error": message}), content_type="application/json")


def remote_of(request: web.Request) -> str:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return request.remote or "?"


def is_loopback(request: web.Request) -> bool:
    """Whether the caller is on this host (with security off, only it may administer)."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    host = peer[0] if isinstance(peer, tuple) and peer else request.remote
    if not host:
        return False
    if isinstance(host, str) and host.startswith("/"):  # a Unix socket
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def credentials(request: web.Request) -> tuple[str, str] | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or not value:
        return None
    try:
        login, sep, password = (
            base64.b64decode(value.strip(), validate=True).decode().partition(":")
        )
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return (login, password) if sep else None


def _fields(request: web.Request, user: str | None, outcome: str) -> dict[str, object]:
    """An audit record's fields of its own (keys of their own in JSON logs)."""
    return {
        "user": user,
        "remote": remote_of(request),
        "method": request.method,
        "path": request.path,
        "outcome": outcome,
    }


async def login(request: web.Request, ctx: HttpContext) -> Principal:
    """The caller's principal; 401 (no challenge: see above) when it cannot be established."""
    engine = ctx.engine
    creds = credentials(request)
    remote = remote_of(request)
    if not engine.security.enabled:
        if not is_loopback(request):
            audit.warning(
                "refused %s %s from %s: security is off, admin from this host only",
                request.method,
                request.path,
                remote,
            )
            raise _error(
                web.HTTPForbidden,
                "security is off: the admin API answers this host only (turn security on)",
            )
        return Principal(creds[0] if creds else "anonymous")
    if creds is None:
        audit.info(
            "refused %s %s from %s: no credentials",
            request.method,
            request.path,
            remote,
            extra=_fields(request, None, "no-credentials"),
        )
        raise _error(web.HTTPUnauthorized, "credentials required (HTTP Basic)")
    try:
        return await authenticator(engine).authenticate(creds[0], creds[1], remote)
    except AuthenticationError as e:
        audit.warning(
            "failed login %r from %s on %s %s: %s",
            creds[0],
            remote,
            request.method,
            request.path,
            e,
            extra=_fields(request, creds[0], "failed-login"),
        )
        raise _error(web.HTTPUnauthorized, str(e)) from None


def may_manage(ctx: HttpContext, principal: Principal, address: str) -> bool:
    return ctx.engine.security.allowed(principal, Permission.MANAGE, address)


def require(request: web.Request, ctx: HttpContext, principal: Principal, address: str) -> None:
    """403 unless ``principal`` may manage ``address``."""
    if may_manage(ctx, principal, address):
        return
    audit.warning(
        "denied %s %s to %r from %s: no manage permission on %r",
        request.method,
        request.path,
        principal.name,
        remote_of(request),
        address,
    )
    raise _error(web.HTTPForbidden, f"user {principal.name!r} may not manage {address!r}")


def target_addresses(ctx: HttpContext, target: str) -> list[str]:
    """Every address a message sent to ``target`` lands on, each of which the caller must
    manage: the text as written, where routing really takes it
    (:meth:`~waystation.core.postoffice.PostOffice.permission_targets`: for ``node::x``,
    ``x`` and, for another node, the store-and-forward queue it waits in), and for a name
    that is a queue, that queue's address."""
    engine = ctx.engine
    out = [target]
    for address in engine.post.permission_targets(target):
        out.append(address)
        q = engine.queue(address)
        if q is not None:
            out.append(q.address)
    return list(dict.fromkeys(out))


def require_target(
    request: web.Request, ctx: HttpContext, principal: Principal, target: str
) -> None:
    """403 unless ``principal`` may manage every address a message sent to ``target``
    reaches (:func:`target_addresses`), not only the text as written."""
    for address in target_addresses(ctx, target):
        require(request, ctx, principal, address)


def done(request: web.Request, principal: Principal, what: str, level: int = 0) -> None:
    """Record an action: changes at info, listings at debug (a console polls them)."""
    level = level or (logging.DEBUG if request.method == "GET" else logging.INFO)
    audit.log(
        level,
        "%s by %r from %s: %s",
        request.method,
        principal.name,
        remote_of(request),
        what,
        extra=_fields(request, principal.name, "done"),
    )


def error(cls: type[web.HTTPException], message: str) -> web.HTTPException:
    return _error(cls, message)


__all__ = [
    "NODE_WIDE",
    "audit",
    "credentials",
    "done",
    "error",
    "login",
    "may_manage",
    "remote_of",
    "require",
    "require_target",
    "target_addresses",
]
