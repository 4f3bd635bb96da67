"""Where a bridge connects and how the byte stream is opened, by URL scheme.

tcp/tls and amqp/amqps are sockets (through an HTTP proxy with ``CONNECT``), ws/wss
WebSockets, http/https the HTTP tunnel; all come back as asyncio streams, so the link above
them (STOMP, or AMQP for amqp/amqps) is the same.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Sequence
from dataclasses import dataclass

from waystation.bridges.proxy import open_tunnel
from waystation.client.tunnel import open_tunnel_connection
from waystation.client.websocket import STOMP_SUBPROTOCOLS, open_websocket_connection

READ_CHUNK = 256 * 1024
TLS_SCHEMES = ("tls", "wss", "https", "amqps")
DEFAULT_PATHS = {"ws": "/stomp", "wss": "/stomp", "http": "/tunnel", "https": "/tunnel"}


@dataclass(frozen=True, slots=True)
class Target:
    """Where to connect: the remote node (``scheme``: tcp, tls, ws, wss, http or https; ``path``
    for the HTTP ones), and optionally the HTTP proxy in between."""

    host: str
    port: int
    proxy_host: str | None = None
    proxy_port: int = 0
    proxy_user: str | None = None
    proxy_password: str | None = None
    scheme: str = "tcp"
    tls_ca: str | None = None  # PEM bundle to verify the remote; None: the system's CAs
    path: str = ""
    tls_cert: str | None = None  # PEM client certificate presented on TLS links
    tls_key: str | None = None  # its private key (None: in tls_cert)

    @property
    def tls(self) -> bool:
        return self.scheme in TLS_SCHEMES

    @property
    def url(self) -> str:
        """The remote's URL (an HTTP one gets its default path when none was given)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        path = self.path if self.path not in ("", "/") else DEFAULT_PATHS.get(self.scheme, "")
        return f"{self.scheme}://{host}:{self.port}{path}"

    @property
    def proxy_url(self) -> str | None:
        """The proxy as ``http://host:port`` (credentials apart, in ``proxy_auth``)."""
        if not self.proxy_host:
            return None
        host = f"[{self.proxy_host}]" if ":" in self.proxy_host else self.proxy_host
        return f"http://{host}:{self.proxy_port}"

    @property
    def proxy_auth(self) -> tuple[str, str] | None:
        return None if self.proxy_user is None else (self.proxy_user, self.proxy_password or "")

    def __str__(self) -> str:
        via = f" via proxy {self.proxy_host}:{self.proxy_port}" if self.proxy_host else ""
        return f"{self.url}{via}"

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=self.tls_ca)
        if self.tls_cert is not None:
            ctx.load_cert_chain(self.tls_cert, self.tls_key)
        return ctx


async def dial(
    target: Target,
    retry_for: float = 30.0,
    protocol: str = "stomp",
    subprotocols: Sequence[str] = STOMP_SUBPROTOCOLS,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open the byte stream to ``target`` by its scheme; the caller applies the timeout.

    tcp/tls (and amqp/amqps): a socket, or a ``CONNECT`` tunnel through the proxy with TLS inside it.
    ws/wss: a WebSocket (through the proxy when there is one).  http/https: the HTTP tunnel,
    whose requests pass proxies that allow nothing but plain requests; it rides out a proxy
    restart by retrying for up to ``retry_for`` seconds (a link passes its liveness timeout:
    past that it would be declared dead and redialled anyway).  ``protocol`` (the tunnel's)
    and ``subprotocols`` (the WebSocket's) name what the stream carries (the relay: any)."""
    ctx = target.ssl_context()
    if target.scheme in ("ws", "wss"):
        return await open_websocket_connection(
            target.url,
            subprotocols=subprotocols,
            proxy=target.proxy_url,
            proxy_auth=target.proxy_auth,
            ssl=ctx,
        )
    if target.scheme in ("http", "https"):
        return await open_tunnel_connection(
            target.url,
            proxy=target.proxy_url,
            proxy_auth=target.proxy_auth,
            ssl=ctx,
            protocol=protocol,
            retry_for=retry_for,
        )
    if target.proxy_host:
        reader, writer = await open_tunnel(
            target.proxy_host,
            target.proxy_port,
            target.host,
            target.port,
            target.proxy_user,
            target.proxy_password,
        )
        if ctx is not None:  # TLS end to end, inside the proxy's tunnel
            try:
                await writer.start_tls(ctx, server_hostname=target.host)
            except BaseException:  # a failed or cancelled handshake must not leak the socket
                writer.close()
                raise
        return reader, writer
    return await asyncio.open_connection(
        target.host,
        target.port,
        limit=READ_CHUNK,
        ssl=ctx,
        server_hostname=target.host if ctx else None,
    )


__all__ = ["DEFAULT_PATHS", "READ_CHUNK", "TLS_SCHEMES", "Target", "dial"]
