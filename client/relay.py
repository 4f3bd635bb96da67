"""``waystation relay``: a local TCP listener that carries any client's bytes to a remote node.

A legacy client (stomp.py, paho-mqtt, proton...) behind a proxy that allows neither CONNECT
nor WebSocket cannot reach a node; pointed at the relay instead, it works unchanged.  The
relay does not parse the protocol: each accepted connection gets one upstream of its own,

- ``tunnel``: the node's HTTP tunnel (``/tunnel?protocol=<name>``), plain HTTP requests that
  a strict proxy passes; a proxy restart is ridden out (the tunnel retries, from the same
  offsets, for ``retry_for`` seconds), so the client never notices;
- ``ws``: a WebSocket to ``/<protocol>`` (the node's path for that adapter);
- ``connect``: a TCP (or TLS) socket to the protocol's own port, via the proxy's CONNECT;

and the bytes are copied both ways until either side ends, which ends the other: over ws or
connect a lost upstream (a proxy restart) closes that client, who reconnects as it would to
a node that went away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from waystation.client.websocket import STOMP_SUBPROTOCOLS

log = logging.getLogger("waystation.relay")

VIAS = ("tunnel", "ws", "connect")
PROTOCOLS = ("stomp", "mqtt", "amqp")
# what the node's WebSocket path for each protocol offers (gateway/<protocol>/__init__.py)
SUBPROTOCOLS = {"stomp": STOMP_SUBPROTOCOLS, "mqtt": ("mqtt",), "amqp": ("amqp",)}
CHUNK = 64 * 1024
OPEN_TIMEOUT = 30.0


class RelayError(ValueError):
    """A relay that cannot be set up as asked (a bad address, URL or combination)."""


def host_port(text: str, what: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) as a pair; RelayError naming ``what`` otherwise."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise RelayError(f"{what}: expected host:port, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


@dataclass(frozen=True, slots=True)
class RelaySpec:
    """One relay: where it listens and how each client's upstream is opened."""

    listen_host: str
    listen_port: int
    to: str  # the remote node: http(s)://host:port for tunnel/ws, tcp(tls)://host:port for connect
    protocol: str = "stomp"
    via: str = "tunnel"
    proxy: str | None = None  # http://[user:password@]host:port
    tls_ca: str | None = None  # PEM bundle to verify an https/wss/tls remote
    retry_for: float = 30.0  # tunnel only: how long a proxy may be away

    @classmethod
    def parse(
        cls,
        listen: str,
        to: str,
        protocol: str = "stomp",
        via: str | None = None,
        proxy: str | None = None,
        tls_ca: str | None = None,
        retry_for: float = 30.0,
    ) -> RelaySpec:
        """Checked: ``via`` defaults from the scheme of ``to`` (http(s): tunnel, ws(s): ws,
        tcp/tls: connect)."""
        host, port = host_port(listen, "listen")
        if protocol not in PROTOCOLS:
            raise RelayError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
        scheme = urlsplit(to).scheme.lower()
        default = {"http": "tunnel", "https": "tunnel", "ws": "ws", "wss": "ws"}
        via = via or default.get(scheme, "connect")
        if via not in VIAS:
            raise RelayError(f"via must be one of {', '.join(VIAS)}, got {via!r}")
        allowed = {
            "tunnel": ("http", "https"),
            "ws": ("http", "https", "ws", "wss"),
            "connect": ("tcp", "tls"),
        }[via]
        parts = urlsplit(to)
        if scheme not in allowed or not parts.hostname or parts.port is None:
            raise RelayError(
                f"to: --via {via} needs a {'/'.join(allowed)}://host:port url, got {to!r}"
                + (" (connect goes to the protocol's own port)" if via == "connect" else "")
            )
        if proxy is not None:
            p = urlsplit(proxy)
            if p.scheme != "http" or not p.hostname or p.port is None:
                raise RelayError(f"proxy must be http://[user:password@]host:port, got {proxy!r}")
        return cls(host, port, to, protocol, via, proxy, tls_ca, retry_for)

    @property
    def proxy_url(self) -> str | None:
        """The proxy without its credentials (those go in ``proxy_auth``)."""
        if self.proxy is None:
            return None
        p = urlsplit(self.proxy)
        host = f"[{p.hostname}]" if ":" in (p.hostname or "") else p.hostname
        return f"http://{host}:{p.port}"

    @property
    def proxy_auth(self) -> tuple[str, str] | None:
        p = urlsplit(self.proxy) if self.proxy else None
        if p is None or p.username is None:
            return None
        return unquote(p.username), unquote(p.password or "")

    def upstream_url(self) -> str:
        """The URL the upstream opens: ``/tunnel`` or ``/<protocol>`` unless ``to`` has a
        path of its own; ws over an http(s) url switches to ws(s)."""
        p = urlsplit(self.to)
        scheme = p.scheme.lower()
        if self.via == "connect":
            return f"{scheme}://{p.netloc}"
        if self.via == "ws":
            scheme = {"http": "ws", "https": "wss"}.get(scheme, scheme)
        default = "/tunnel" if self.via == "tunnel" else f"/{self.protocol}"
        path = p.path if p.path not in ("", "/") else default
        return f"{scheme}://{p.netloc}{path}"

    def __str__(self) -> str:
        via = f" via proxy {self.proxy_url}" if self.proxy else ""
        return (
            f"{self.protocol} relay {self.listen_host}:{self.listen_port} -> "
            f"{self.upstream_url()} ({self.via}){via}"
        )


async def open_upstream(spec: RelaySpec) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """One upstream byte stream to the remote node, as ``spec.via`` says: the bridges' own
    dialling (tunnel, WebSocket, or a socket through CONNECT), carrying ``spec.protocol``."""
    from waystation.bridges.dial import Target, dial  # bridges import client, not the reverse

    up = urlsplit(spec.upstream_url())
    proxy = urlsplit(spec.proxy) if spec.proxy else None
    user, password = spec.proxy_auth or (None, None)
    target = Target(
        up.hostname or "",
        up.port or 0,
        proxy.hostname if proxy else None,
        (proxy.port or 0) if proxy else 0,
        user,
        password,
        scheme=up.scheme,
        tls_ca=spec.tls_ca,
        path=up.path,
    )
    return await dial(target, spec.retry_for, spec.protocol, SUBPROTOCOLS[spec.protocol])


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until EOF (or an error) on ``reader``; a full ``writer`` stalls the reading."""
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(writer.wait_closed(), 5.0)


class Relay:
    """A running relay: ``start``, ``bound_port``, ``stop``; ``stats`` counts connections."""

    def __init__(self, spec: RelaySpec) -> None:
        self.spec = spec
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.stats = {"accepted": 0, "open": 0, "upstream_failed": 0}
        self.tunnel_stats: list[dict[str, int]] = []  # live counters of open tunnel upstreams

    async def start(self) -> Relay:
        self.server = await asyncio.start_server(
            self._serve, self.spec.listen_host, self.spec.listen_port, reuse_address=True
        )
        log.info("%s", self.spec)
        return self

    def bound_port(self) -> int:
        assert self.server is not None and self.server.sockets
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.stats["accepted"] += 1
        with contextlib.suppress(asyncio.CancelledError):  # stop(): asyncio would log it
            await self._relay(client_r, client_w)
        self.tasks.discard(task)

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        peer = client_w.get_extra_info("peername")
        try:
            up_r, up_w = await asyncio.wait_for(open_upstream(self.spec), OPEN_TIMEOUT)
        except Exception as e:  # TunnelError, WebSocketRefused, ProxyError, a timeout...
            self.stats["upstream_failed"] += 1
            log.warning("relay: no upstream for %s: %s", peer, e or type(e).__name__)
            await _close(client_w)
            return
        self.stats["open"] += 1
        counters = up_w.get_extra_info("tunnel_stats")
        if counters is not None:
            self.tunnel_stats.append(counters)
        log.debug("relay: %s connected upstream", peer)
        try:
            up = asyncio.ensure_future(_copy(client_r, up_w))
            down = asyncio.ensure_future(_copy(up_r, client_w))
            await asyncio.wait((up, down), return_when=asyncio.FIRST_COMPLETED)
            # either side ended: the other goes too (the upstream flushes what it holds)
            for t in (up, down):
                t.cancel()
        finally:
            self.stats["open"] -= 1
            if counters is not None:
                self.tunnel_stats.remove(counters)
            await asyncio.gather(_close(up_w), _close(client_w))

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for t in list(self.tasks):
            t.cancel()
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()


async def serve(specs: list[RelaySpec], stop: asyncio.Event) -> None:
    """Run ``specs`` until ``stop`` is set (the CLI's loop)."""
    relays = [await Relay(s).start() for s in specs]
    try:
        await stop.wait()
    finally:
        for r in relays:
            await r.stop()


__all__ = ["PROTOCOLS", "VIAS", "Relay", "RelayError", "RelaySpec", "open_upstream", "serve"]
