"""What a browser may send the admin API and console: the cross-site and DNS-rebinding door.

Why: a web page the operator's browser opens can send requests to the node (a form, a
``no-cors`` fetch) without the page reading the answer, and with security off, or once the
browser holds credentials for the node, such a request acts as the operator.  A page whose
name is made to resolve to the node (DNS rebinding) can even read the answers.  So every
request to ``/admin/api/v1`` and ``/console`` must:

- name this listener in ``Host`` (its own address and port; on loopback also ``localhost``,
  ``127.0.0.1`` and ``[::1]``; on every address also the machine's host name; plus
  ``[acceptors.http.admin] allowed_hosts``), else ``421``: a rebinding page's ``Host`` is
  its own name;
- when it carries ``Origin``, come from such a name on this port or from
  ``allowed_origins``, else ``403`` (browsers send ``Origin`` with every cross-origin
  request that can change anything, and with no ``Origin`` the caller is not a page);
- when it changes something (not GET, HEAD, OPTIONS): not be marked ``cross-site`` or
  ``same-site`` by ``Sec-Fetch-Site`` (unless its origin is allowed), and carry a body only
  as ``application/json`` (``415`` otherwise: forms and ``no-cors`` fetches cannot send that
  type).  An empty body may come with no type or another one (tools send
  ``application/octet-stream``), except the three a form or a ``no-cors`` fetch sends
  (``application/x-www-form-urlencoded``, ``multipart/form-data``, ``text/plain``): a form
  sends its type even with no field.

Tools (curl, the admin CLI, Prometheus) send the ``Host`` of the URL they were given and no
``Origin``, so they pass as long as that name is the listener's or allowed.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
from urllib.parse import urlsplit

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from waystation.config.listeners import ANY_HOST, HttpAcceptor
from waystation.gateway.http.admin.guard import audit, remote_of

SAFE_METHODS = frozenset(("GET", "HEAD", "OPTIONS"))
LOOPBACK_NAMES = frozenset(("localhost", "localhost.", "127.0.0.1", "::1"))
JSON = "application/json"
# what a form or a no-cors fetch can send without asking the node first: refused even empty
FORMS = frozenset(("application/x-www-form-urlencoded", "multipart/form-data", "text/plain"))


def _bare(host: str) -> str:
    return host.strip().strip("[]").lower()


def _split(text: str) -> tuple[str, int | None] | None:
    """``host[:port]`` (``[v6]:port`` too) as (host, port); None when it is not one."""
    try:
        parts = urlsplit("//" + text.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host or parts.path or parts.query or parts.username is not None:
        return None
    return host.lower(), port


def _is_loopback(ip: str) -> bool:
    try:
        addr = ipaddress.ip_address(ip.split("%")[0])
    except ValueError:
        return False
    mapped = getattr(addr, "ipv4_mapped", None)
    return bool(addr.is_loopback or (mapped is not None and mapped.is_loopback))


def _refusal(cls: type[web.HTTPException], message: str) -> web.HTTPException:
    return cls(text=json.dumps({"error": message}), content_type=JSON)


class Misdirected(web.HTTPClientError):
    """421: this listener is not the server the request's ``Host`` names."""

    status_code = 421


class ListenerNames:
    """The names a request to this listener may use, from the config and its socket."""

    def __init__(self, cfg: HttpAcceptor) -> None:
        names: set[str] = set()
        everywhere = False
        for endpoint, _tls in cfg.listeners():
            host = _bare(endpoint.host)
            if host in ANY_HOST or not host:
                everywhere = True
            else:
                names.add(host)
        if everywhere:  # reached by this machine's name too (no DNS lookup here)
            names.add(socket.gethostname().lower())
        self.names = frozenset(names)
        self.any_port: set[str] = set()
        self.with_port: set[tuple[str, int]] = set()
        for entry in cfg.admin.allowed_hosts:
            found = _split(entry)
            if found is None:
                continue
            host, port = found
            if port is None:
                self.any_port.add(host)
            else:
                self.with_port.add((host, port))
        self.origins = frozenset(o.rstrip("/").lower() for o in cfg.admin.allowed_origins)

    def accepts(self, host: str, port: int, local: tuple[str, int] | None) -> bool:
        """Whether ``host:port`` names this listener (``local``: the socket's own address;
        None for a Unix socket, which has no port to compare)."""
        host = _bare(host)
        if host in self.any_port or (host, port) in self.with_port:
            return True
        if local is None:
            return host in self.names or host in LOOPBACK_NAMES
        ip, local_port = local
        if port != local_port:
            return False
        ip = _bare(ip.split("%")[0])
        if host == ip or host in self.names:
            return True
        return _is_loopback(ip) and host in LOOPBACK_NAMES

    def refusal(self, request: web.Request) -> web.HTTPException | None:
        """Why this request must not be served (an HTTP error to raise), or None."""
        if request.transport is None:
            return _refusal(web.HTTPForbidden, "connection closed")
        local = _local(request.transport)
        default = 443 if request.secure else 80
        hosts = request.headers.getall(hdrs.HOST, [])
        found = _split(hosts[0]) if len(hosts) == 1 else None
        if found is None or not self.accepts(found[0], found[1] or default, local):
            shown = hosts[0] if hosts else "(none)"
            return _refusal(
                Misdirected,
                f"Host {shown[:100]!r} does not name this listener: use its address, or add "
                "the name to [acceptors.http.admin] allowed_hosts",
            )
        origin = request.headers.get(hdrs.ORIGIN)
        allowed_origin = origin is not None and origin.rstrip("/").lower() in self.origins
        if origin is not None and not allowed_origin and not self._own_origin(origin, local):
            return _refusal(
                web.HTTPForbidden,
                f"Origin {origin[:100]!r} may not call the admin API (allowed_origins)",
            )
        if request.method in SAFE_METHODS:
            return None
        site = request.headers.get("Sec-Fetch-Site", "").lower()
        if site in ("cross-site", "same-site") and not allowed_origin:
            return _refusal(web.HTTPForbidden, f"a {site} browser request may not change state")
        has_body = bool(request.content_length) or hdrs.TRANSFER_ENCODING in request.headers
        if request.content_type != JSON and (
            has_body or (hdrs.CONTENT_TYPE in request.headers and request.content_type in FORMS)
        ):
            return _refusal(
                web.HTTPUnsupportedMediaType,
                f"a request body must be {JSON} (Content-Type: {JSON})",
            )
        return None

    def _own_origin(self, origin: str, local: tuple[str, int] | None) -> bool:
        try:
            parts = urlsplit(origin.strip())
            host, port = parts.hostname, parts.port
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not host or parts.path not in ("", "/"):
            return False
        port = port or (443 if parts.scheme == "https" else 80)
        return self.accepts(host, port, local)


def _local(transport: asyncio.BaseTransport) -> tuple[str, int] | None:
    """The socket's own (address, port); None for a Unix socket."""
    sock = transport.get_extra_info("sockname")
    if isinstance(sock, tuple) and len(sock) >= 2:
        return str(sock[0]), int(sock[1])
    return None


def middleware(cfg: HttpAcceptor, prefixes: tuple[str, ...]) -> Middleware:
    """Refuse, before any login, what a browser must not send to routes under ``prefixes``
    (matched on the route found, so no spelling of the path slips past)."""
    names = ListenerNames(cfg)

    @web.middleware
    async def browser_door(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        path = resource.canonical if resource is not None else ""
        if path.startswith(prefixes):
            refused = names.refusal(request)
            if refused is not None:
                audit.warning(
                    "refused %s %s from %s: %s",
                    request.method,
                    request.path,
                    remote_of(request),
                    refused.text,
                    extra={
                        "remote": remote_of(request),
                        "method": request.method,
                        "path": request.path,
                        "outcome": f"refused-{refused.status}",
                    },
                )
                raise refused
        return await handler(request)

    return browser_door


__all__ = ["ListenerNames", "Misdirected", "middleware"]
