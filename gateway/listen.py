"""Listening sockets bound here for numeric addresses (every listener of the node)."""

from __future__ import annotations

import ipaddress
import socket


def bound_socket(host: str, port: int, backlog: int = 1024) -> socket.socket | None:
    """A listening socket for a numeric ``host``, bound here; None for a name or a wildcard
    (then the loop resolves it).  Why: the loop's own resolution runs ``getaddrinfo`` in
    libuv's thread pool, which starts four threads and loads the IDNA codec (about 0.4 MB
    resident together) for an address that needs no resolving."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if address.is_unspecified:
        return None  # every interface: the loop binds each family as it always has
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            sock.bind((host, port))
        except OSError as e:  # worded as the loop words it
            why = (e.strerror or str(e)).lower()
            raise OSError(
                e.errno, f"error while attempting to bind on address {(host, port)!r}: {why}"
            ) from None
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


__all__ = ["bound_socket"]
