"""Bridge transports beyond tcp/tls: STOMP over WebSocket (``ws://.../stomp``) and the HTTP
tunnel (``http://.../tunnel``), directly and through a real squid that denies CONNECT and
WebSocket upgrades.  Two real nodes each time; the WebSocket streams are also checked alone
against an in-process aiohttp server."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import re
import signal
import ssl
import time
from pathlib import Path

import pytest
from aiohttp import WSMsgType, web
from nodekit import NodeProcess, free_port
from sitekit import (
    FAST_LINK,
    Drain,
    check_once_in_order,
    collect,
    send_all,
    toml_value,
    wait_log,
)
from squidkit import Squid

from waystation.bridges.dial import Target, dial
from waystation.client.websocket import WebSocketRefused, open_websocket_connection

pytestmark = pytest.mark.timeout(120)


def bridge_to(urls: list[str], **options: object) -> str:
    """site-a's ``[[bridges]]`` entry to site-b over ``urls``."""
    opts: dict[str, object] = {**FAST_LINK, **options}
    lines = [
        "[[bridges]]",
        'name = "to-b"',
        'remote_node = "site-b"',
        f"urls = {toml_value(urls)}",
        *(f"{k} = {toml_value(v)}" for k, v in opts.items()),
    ]
    return "\n" + "\n".join(lines) + "\n"


def start_pair(tmp: Path, url_of, **options: object) -> tuple[NodeProcess, NodeProcess]:  # noqa: ANN001
    """site-b with its HTTP listener, then site-a bridged to ``url_of(b)``."""
    b = NodeProcess(tmp / "site-b", name="site-b", http=True)
    a = NodeProcess(tmp / "site-a", name="site-a", extra_config=bridge_to([url_of(b)], **options))
    b.start()
    try:
        a.start()
    except BaseException:
        b.stop()
        raise
    return a, b


def stop_all(*things: NodeProcess | Squid) -> None:
    for t in things:
        if isinstance(t, NodeProcess):
            try:
                t.stop()
            except Exception:
                t.kill9()
        else:
            t.stop()


def connected_first(a: NodeProcess) -> None:
    """Wait for site-a's bridge to connect, so a fault injected by batch number hits a working
    link: under load the first dial (the remote's HTTP application is built on first need)
    can take seconds, and a restart before it is no restart of a link."""
    wait_log(a, r"bridge to-b: connected to ", 60)


def ws_url(b: NodeProcess) -> str:
    return f"ws://127.0.0.1:{b.http_port}/stomp"


def tunnel_url(b: NodeProcess) -> str:
    return f"http://127.0.0.1:{b.http_port}/tunnel"


# -- over WebSocket -----------------------------------------------------------------------------
def test_ws_bridge_once_in_order_across_a_remote_restart(tmp_path):
    a, b = start_pair(tmp_path, ws_url)
    try:
        connected_first(a)
        bodies = [f"m{i:05d}" for i in range(2000)]

        def restart_b(batch: int) -> None:
            if batch == 4:  # mid-flow: messages sent, receipts (and forwarding) under way
                b.restart()

        confirmed = send_all(a.stomp_port, "site-b::orders", bodies, between=restart_b)
        assert confirmed == bodies  # site-a took every message; site-b's restart is the bridge's
        received = collect(b.stomp_port, "orders", bodies, timeout=40)
        check_once_in_order(bodies, confirmed, received)
        assert len(received) == len(bodies)
        connected = re.findall(r"bridge to-b: connected to (\S+)", a.log())
        assert connected[0] == ws_url(b) and len(connected) >= 2, connected
        assert "link to ws://" in a.log()  # the restart was seen as a lost link
    finally:
        stop_all(a, b)


def test_ws_bridge_heartbeats_keep_an_idle_link_up(tmp_path):
    a, b = start_pair(tmp_path, ws_url, heartbeat="200ms", liveness_timeout="800ms")
    try:
        wait_log(a, r"bridge to-b: connected to ws://", 10)
        time.sleep(2)  # idle for several liveness periods: heart-beats must cross the WebSocket
        assert "lost" not in a.log(), a.log()[-2000:]
        assert send_all(a.stomp_port, "site-b::orders", ["late"]) == ["late"]
        assert collect(b.stomp_port, "orders", ["late"], timeout=10, settle=0.2) == ["late"]
    finally:
        stop_all(a, b)


def test_ws_bridge_through_squid_that_denies_upgrades_fails_clearly(tmp_path, make_squid):
    squid = make_squid().start()
    a, b = start_pair(tmp_path, ws_url, proxy=squid.url)
    try:
        m = wait_log(a, r"bridge to-b: retrying at \S+: (.*)", 10)
        error = m.group(1)
        assert "proxy http://127.0.0.1:" in error and "refused the WebSocket upgrade" in error
        assert "403 Forbidden" in error and "ERR_ACCESS_DENIED" in error, error
        assert f"GET http://127.0.0.1:{b.http_port}/stomp" in squid.access_log()
        assert "TCP_DENIED/403" in squid.access_log()
    finally:
        stop_all(a, b, squid)


def test_ws_bridge_through_squid_that_allows_upgrades(tmp_path, make_squid):
    squid = make_squid(deny_upgrade=False)
    squid.conf.write_text(
        squid.conf.read_text() + "http_upgrade_request_protocols websocket allow all\n"
    )
    squid.start()
    a, b = start_pair(tmp_path, ws_url, proxy=squid.url)
    try:
        bodies = [f"p{i}" for i in range(300)]
        assert send_all(a.stomp_port, "site-b::orders", bodies) == bodies
        received = collect(b.stomp_port, "orders", bodies, timeout=20, settle=0.2)
        check_once_in_order(bodies, bodies, received)
        assert len(received) == len(bodies)
        a.stop()  # squid logs a tunnelled request when it ends
        pattern = rf"TCP_TUNNEL/101 .* GET http://127.0.0.1:{b.http_port}/stomp"
        end = time.monotonic() + 10
        while not re.search(pattern, squid.access_log()) and time.monotonic() < end:
            time.sleep(0.1)
        assert re.search(pattern, squid.access_log()), squid.access_log()
    finally:
        stop_all(a, b, squid)


def test_ws_bridge_detects_a_frozen_remote_within_liveness(tmp_path):
    """A stopped (SIGSTOP) remote sends no RST: the liveness timeout ends the link, and the
    connect timeout ends the redials that hang in the WebSocket handshake."""
    a, b = start_pair(tmp_path, ws_url, heartbeat="500ms", liveness_timeout="2s")
    assert b.proc is not None
    try:
        assert send_all(a.stomp_port, "site-b::orders", ["before"]) == ["before"]
        wait_log(a, r"bridge to-b: connected to ws://", 10)
        mark = len(a.log())
        t0 = time.monotonic()
        b.proc.send_signal(signal.SIGSTOP)
        try:
            wait_log(a, r"bridge to-b: link to ws://\S+ lost: nothing received for", 8, mark)
            assert time.monotonic() - t0 < 2.0 * 2.5
            wait_log(a, r"bridge to-b: retrying at \S+: ws://\S+: timed out", 8, mark)
        finally:
            b.proc.send_signal(signal.SIGCONT)
        assert send_all(a.stomp_port, "site-b::orders", ["after"]) == ["after"]
        received = collect(b.stomp_port, "orders", ["before", "after"], timeout=20, settle=0.3)
        assert received == ["before", "after"]
    finally:
        stop_all(a, b)


@pytest.mark.parametrize(("scheme", "path"), [("wss", "/stomp"), ("https", "/tunnel")])
def test_bridge_over_tls_websocket_and_tunnel_verified_by_tls_ca(tmp_path, scheme, path):
    from test_stomp_tls import self_signed

    cert, key = self_signed(tmp_path)
    b = NodeProcess(
        tmp_path / "site-b", name="site-b", http=f'tls = {{ cert = "{cert}", key = "{key}" }}'
    )
    b.config_path.write_text(b.config_path.read_text().replace('"http://', '"https://'))
    url = f"{scheme}://127.0.0.1:{b.http_port}{path}"
    a = NodeProcess(
        tmp_path / "site-a", name="site-a", extra_config=bridge_to([url], tls_ca=str(cert))
    )
    b.start()
    try:
        a.start()
        bodies = [f"{scheme}{i}" for i in range(200)]
        assert send_all(a.stomp_port, "site-b::orders", bodies) == bodies
        received = collect(b.stomp_port, "orders", bodies, timeout=20, settle=0.2)
        check_once_in_order(bodies, bodies, received)
        assert len(received) == len(bodies)
        wait_log(a, rf"bridge to-b: connected to {re.escape(url)}", 1)
    finally:
        stop_all(a, b)


# -- over the HTTP tunnel -----------------------------------------------------------------------
def test_tunnel_bridge_once_in_order_across_a_remote_restart(tmp_path):
    a, b = start_pair(tmp_path, tunnel_url)
    try:
        connected_first(a)
        bodies = [f"t{i:05d}" for i in range(1000)]
        confirmed = send_all(
            a.stomp_port, "site-b::orders", bodies, between=lambda n: n == 2 and b.restart()
        )
        assert confirmed == bodies
        received = collect(b.stomp_port, "orders", bodies, timeout=40)
        check_once_in_order(bodies, confirmed, received)
        assert len(received) == len(bodies)
        connected = re.findall(r"bridge to-b: connected to (\S+)", a.log())
        assert connected[0] == tunnel_url(b) and len(connected) >= 2, connected
    finally:
        stop_all(a, b)


def test_tunnel_bridge_through_squid_10000_messages_while_squid_restarts(tmp_path, make_squid):
    """The issue's acceptance run: squid denies CONNECT and upgrades; the tunnel's plain
    requests pass, and a squid restart mid-flow loses and duplicates nothing."""
    squid = make_squid().start()
    a, b = start_pair(
        tmp_path,
        tunnel_url,
        proxy=squid.url,
        heartbeat="1s",
        liveness_timeout="10s",  # also how long the tunnel retries through the restart
        confirmation_window=500,
    )
    connected_first(a)
    drain = Drain(b.stomp_port, "orders")
    arrived_at_restart: list[int] = []

    def restart_squid(batch: int) -> None:
        if batch == 25:
            arrived_at_restart.append(len(drain.messages))
            squid.restart()

    try:
        bodies = [f"s{i:05d}" for i in range(10_000)]
        t0 = time.monotonic()
        confirmed = send_all(a.stomp_port, "site-b::orders", bodies, between=restart_squid)
        assert confirmed == bodies
        drain.wait_all(bodies, 60)
        elapsed = time.monotonic() - t0
        time.sleep(0.5)
        received = drain.bodies()
        check_once_in_order(bodies, confirmed, received)
        assert len(received) == len(bodies)
        assert 0 < arrived_at_restart[0] < len(bodies)  # the restart came mid-flow
        log = squid.access_log()
        tunnel = rf"http://127.0.0.1:{b.http_port}/tunnel/"
        assert re.search(rf"POST {tunnel}open", log), log[-2000:]
        assert len(re.findall(rf"POST {tunnel}\S+/up", log)) > 10
        assert len(re.findall(rf"GET {tunnel}\S+/down", log)) > 10
        assert "CONNECT" not in log
        # the tunnel rode out the restart: one STOMP session from start to end
        assert len(re.findall(r"bridge to-b: connected to", a.log())) == 1
        assert "lost" not in a.log()
        print(f"tunnel via squid: 10000 messages in {elapsed:.1f}s, squid restarted once")
    finally:
        drain.close()
        stop_all(a, b, squid)


def test_tunnel_outage_longer_than_liveness_ends_the_link_in_time(tmp_path, make_squid):
    """The tunnel retries for the link's liveness timeout (2 s here), no longer: a proxy
    that stays away ends the link within it, and the bridge redials once the proxy is back."""
    squid = make_squid().start()
    a, b = start_pair(tmp_path, tunnel_url, proxy=squid.url)
    try:
        first = [f"f{i}" for i in range(100)]
        assert send_all(a.stomp_port, "site-b::orders", first) == first
        drain = Drain(b.stomp_port, "orders")
        try:
            drain.wait_all(first, 20)
            mark = len(a.log())
            t0 = time.monotonic()
            squid.stop()
            wait_log(a, r"bridge to-b: link to http://\S+ via proxy \S+ lost: ", 8, mark)
            detected = time.monotonic() - t0
            assert detected < 2.0 * 2.5, f"outage noticed after {detected:.1f}s"
            second = [f"s{i}" for i in range(100)]
            assert send_all(a.stomp_port, "site-b::orders", second) == second
            squid.start()
            drain.wait_all(first + second, 30)
            time.sleep(0.3)
            check_once_in_order(first + second, first + second, drain.bodies())
            assert len(re.findall(r"bridge to-b: connected to", a.log())) >= 2
        finally:
            drain.close()
    finally:
        stop_all(a, b, squid)


# -- the WebSocket streams alone ------------------------------------------------------------------
class EchoServer:
    """An aiohttp WebSocket endpoint that records what arrives and echoes it back."""

    def __init__(self) -> None:
        self.received: list[tuple[WSMsgType, bytes]] = []
        self.protocols: list[str | None] = []
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(protocols=("v12.stomp",), max_msg_size=0)
        await ws.prepare(request)
        self.protocols.append(ws.ws_protocol)
        async for msg in ws:
            data = msg.data.encode() if msg.type is WSMsgType.TEXT else msg.data
            self.received.append((msg.type, data))
            if data == b"bye":
                await ws.close()
                break
            await ws.send_bytes(data)
        return ws

    async def plain(self, request: web.Request) -> web.Response:
        return web.Response(status=404, text="no WebSocket here")

    async def start(self) -> EchoServer:
        app = web.Application()
        app.router.add_get("/ws", self.handle)
        app.router.add_get("/plain", self.plain)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def read_exactly(reader: asyncio.StreamReader, n: int) -> bytes:
    return await asyncio.wait_for(reader.readexactly(n), 5)


def test_ws_streams_messages_types_split_and_eof(run):
    async def main() -> None:
        srv = await EchoServer().start()
        try:
            url = f"ws://127.0.0.1:{srv.port}/ws"
            reader, writer = await open_websocket_connection(url, max_message_size=1000)
            assert writer.get_extra_info("subprotocol") == "v12.stomp"
            assert writer.get_extra_info("peername")[0] == "127.0.0.1"
            writer.write(b"CONNECT\n\n\x00")
            writer.write(b"SEND\n\n")  # same loop turn: one message
            await writer.drain()
            assert await read_exactly(reader, 16) == b"CONNECT\n\n\x00SEND\n\n"
            writer.write(b"\xff\x00bin")
            assert await read_exactly(reader, 5) == b"\xff\x00bin"
            writer.write(b"x" * 2500)  # past max_message_size: split, nothing lost
            assert await read_exactly(reader, 2500) == b"x" * 2500
            await asyncio.sleep(0.1)
            kinds = [(t, len(d)) for t, d in srv.received]
            assert kinds == [
                (WSMsgType.TEXT, 16),
                (WSMsgType.BINARY, 5),
                (WSMsgType.TEXT, 1000),
                (WSMsgType.TEXT, 1000),
                (WSMsgType.TEXT, 500),
            ]
            writer.write(b"bye")  # the server closes: EOF, then the transport is done
            assert await asyncio.wait_for(reader.read(), 5) == b""
            await asyncio.wait_for(writer.wait_closed(), 5)
            assert writer.transport.is_closing()
        finally:
            await srv.stop()

    run(main())


def test_ws_streams_flow_control_and_close(run):
    async def main() -> None:
        srv = await EchoServer().start()
        try:
            reader, writer = await open_websocket_connection(f"ws://127.0.0.1:{srv.port}/ws")
            writer.transport.set_write_buffer_limits(high=4096)
            for _ in range(50):
                writer.write(b"y" * 1024)
            assert writer.transport.get_write_buffer_size() > 4096
            await asyncio.wait_for(writer.drain(), 10)  # waits for the buffer to go down
            assert writer.transport.get_write_buffer_size() <= 1024
            assert await read_exactly(reader, 50 * 1024) == b"y" * 50 * 1024
            writer.close()
            await asyncio.wait_for(writer.wait_closed(), 5)
            assert await reader.read() == b""
        finally:
            await srv.stop()

    run(main())


def test_ws_abort_releases_the_websocket(run):
    """abort() drops the connection without waiting for the closing handshake but still
    closes aiohttp's WebSocket (else its response is left unclosed: a ResourceWarning)."""

    async def main() -> None:
        srv = await EchoServer().start()
        try:
            reader, writer = await open_websocket_connection(f"ws://127.0.0.1:{srv.port}/ws")
            ws = writer.get_extra_info("websocket")
            writer.write(b"ping")
            assert await read_exactly(reader, 4) == b"ping"
            t0 = time.monotonic()
            writer.transport.abort()
            await asyncio.wait_for(writer.wait_closed(), 5)
            assert ws.closed and time.monotonic() - t0 < 1.0
        finally:
            await srv.stop()

    run(main())


def test_tls_through_a_proxy_that_fails_leaves_no_socket_behind(run):
    """dial() over CONNECT with TLS inside: when the handshake fails (the remote is not TLS)
    or is cancelled (a silent remote), the proxy connection is closed, not leaked."""

    async def main() -> None:
        async def remote(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            first = await r.read(100)  # a TLS ClientHello
            if w.get_extra_info("sockname")[1] == plain_port:
                w.write(b"HTTP/1.0 400 not TLS\r\n\r\n")
            with contextlib.suppress(ConnectionError):
                await r.read()  # held open until the client lets go
            w.close()
            assert first

        async def proxy(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            host, port = (await r.readuntil(b"\r\n\r\n")).split()[1].decode().rsplit(":", 1)
            ur, uw = await asyncio.open_connection(host, int(port))
            w.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

            async def pipe(a: asyncio.StreamReader, b: asyncio.StreamWriter) -> None:
                with contextlib.suppress(ConnectionError):
                    while data := await a.read(65536):
                        b.write(data)
                b.close()

            await asyncio.gather(pipe(r, uw), pipe(ur, w))

        servers = [await asyncio.start_server(f, "127.0.0.1", 0) for f in (remote, remote, proxy)]
        plain_port, silent_port, proxy_port = (s.sockets[0].getsockname()[1] for s in servers)
        before = len(os.listdir("/proc/self/fd"))
        try:
            for port in (plain_port, silent_port) * 5:
                t = Target("127.0.0.1", port, "127.0.0.1", proxy_port, scheme="tls")
                with pytest.raises((ssl.SSLError, TimeoutError)):
                    await asyncio.wait_for(dial(t), 0.3)
            await asyncio.sleep(0.5)
            gc.collect()
            assert len(os.listdir("/proc/self/fd")) <= before + 2
        finally:
            for s in servers:
                s.close()

    run(main())


def test_ws_refusals_are_os_errors_with_the_status(run):
    async def main() -> None:
        srv = await EchoServer().start()
        try:
            with pytest.raises(WebSocketRefused, match=r"server refused .* 404 Not Found") as e:
                await open_websocket_connection(f"ws://127.0.0.1:{srv.port}/plain")
            assert e.value.status == 404 and isinstance(e.value, OSError)
            with pytest.raises(OSError, match="Cannot connect"):
                await open_websocket_connection(f"ws://127.0.0.1:{free_port()}/stomp")
        finally:
            await srv.stop()

    run(main())


@pytest.mark.parametrize("transport", ["tunnel", "tcp-connect", "ws"])
def test_bridge_through_a_proxy_that_wants_credentials(tmp_path, make_squid, transport):
    """The bridge's ``proxy = "http://user:pass@host:port"`` reaches an authenticating proxy:
    Basic credentials on the tunnel's plain requests, on CONNECT for tcp://, and on the
    upgrade request for ws://."""
    squid = make_squid(
        auth=("alice", "s3cret"),
        deny_connect=transport != "tcp-connect",
        deny_upgrade=transport != "ws",
    )
    if transport == "ws":
        squid.conf.write_text(
            squid.conf.read_text() + "http_upgrade_request_protocols websocket allow all\n"
        )
    squid.start()
    proxy = f"http://alice:s3cret@127.0.0.1:{squid.port}"

    def tcp_url(b: NodeProcess) -> str:
        return f"tcp://127.0.0.1:{b.stomp_port}"

    url_of = {"tunnel": tunnel_url, "tcp-connect": tcp_url, "ws": ws_url}[transport]
    a, b = start_pair(tmp_path, url_of, proxy=proxy)
    try:
        bodies = [f"auth{i}" for i in range(200)]
        assert send_all(a.stomp_port, "site-b::orders", bodies) == bodies
        received = collect(b.stomp_port, "orders", bodies, timeout=20, settle=0.2)
        check_once_in_order(bodies, bodies, received)
        assert len(received) == len(bodies)
        a.stop()  # squid logs a tunnelled (CONNECT, upgraded) request when it ends
    finally:
        stop_all(a, b, squid)
    log = squid.access_log()
    assert " alice " in log, log[-2000:]
    assert ("CONNECT 127.0.0.1:" in log) == (transport == "tcp-connect")
