"""A TCP tunnel through an HTTP proxy: ``CONNECT host:port`` with optional Basic credentials."""

from __future__ import annotations

import asyncio

from waystation.client.proxyauth import basic_proxy_authorization

MAX_RESPONSE_HEAD = 16 * 1024


class ProxyError(OSError):
    """The proxy refused the tunnel or answered something that is not HTTP."""


def connect_request(
    host: str, port: int, user: str | None = None, password: str | None = None
) -> bytes:
    """The CONNECT request for ``host:port`` (Proxy-Authorization when a user is given)."""
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"CONNECT {target} HTTP/1.1", f"Host: {target}"]
    if user is not None:
        lines.append(f"Proxy-Authorization: {basic_proxy_authorization(user, password)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def parse_status(head: bytes) -> tuple[int, str]:
    """(status code, reason) of an HTTP response head; ProxyError if it is not one."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    parts = line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ProxyError(f"proxy answered something that is not HTTP: {line[:100]!r}")
    return int(parts[1]), parts[2] if len(parts) > 2 else ""


async def open_tunnel(
    proxy_host: str,
    proxy_port: int,
    host: str,
    port: int,
    user: str | None = None,
    password: str | None = None,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to the proxy and ask it for a tunnel to ``host:port``; the streams returned
    carry the tunnelled bytes.  The caller applies its own timeout."""
    reader, writer = await asyncio.open_connection(proxy_host, proxy_port)
    try:
        writer.write(connect_request(host, port, user, password))
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise ProxyError("proxy response head too long") from None
        except asyncio.IncompleteReadError:
            raise ProxyError("proxy closed the connection during CONNECT") from None
        if len(head) > MAX_RESPONSE_HEAD:
            raise ProxyError("proxy response head too long")
        status, reason = parse_status(head)
        if status == 407:
            raise ProxyError(f"proxy authentication required (407 {reason})".strip())
        if not 200 <= status < 300:
            raise ProxyError(f"proxy refused CONNECT {host}:{port}: {status} {reason}".strip())
    except BaseException:
        writer.close()
        raise
    return reader, writer
