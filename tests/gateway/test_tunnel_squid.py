"""The tunnel through a real squid that refuses CONNECT and WebSocket upgrades: 10,000 STOMP
messages move exactly once, in order, while squid restarts in the middle."""

from __future__ import annotations

import asyncio
import base64
import os
import socket

import pytest
from nodekit import NodeProcess
from squidkit import Squid
from stompkit import unique
from tunnelkit import AsyncStomp

from waystation.bridges.proxy import ProxyError, open_tunnel
from waystation.client.tunnel import TunnelError, open_tunnel_connection

N = 10_000


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(
        tmp_path_factory.mktemp("tunnel-squid-node"),
        http='[acceptors.http.tunnel]\nresponse_time = "2s"\n',
    ).start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def squid():
    with Squid(deny_connect=True, deny_upgrade=True) as s:
        yield s


def _upgrade_status(port: int, target: str, host: str) -> int:
    """Status of a WebSocket upgrade for ``target`` sent to 127.0.0.1:``port``."""
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET {target} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Protocol: v12.stomp\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request.encode())
        return int(s.recv(4096).split(b" ", 2)[1])


def test_squid_refuses_websocket_and_connect(node, squid, run):
    host = f"127.0.0.1:{node.http_port}"
    assert _upgrade_status(node.http_port, "/stomp", host) == 101  # direct: the node upgrades
    assert _upgrade_status(squid.port, f"http://{host}/stomp", host) == 403  # squid refuses

    async def connect_through_squid() -> None:
        with pytest.raises(ProxyError, match="403"):
            await open_tunnel("127.0.0.1", squid.port, "127.0.0.1", node.stomp_port)

    run(connect_through_squid(), 20)
    log = squid.access_log_with("CONNECT 127.0.0.1:", "/stomp")
    assert "CONNECT 127.0.0.1:" in log and "/stomp" in log


def test_10k_messages_exactly_once_in_order_across_a_squid_restart(node, squid, run):
    url = f"{node.http_url}/tunnel"
    q = unique("squid")

    async def go() -> None:
        consumer = await AsyncStomp.tunnel(url, proxy=squid.url)
        consumer.frame("SUBSCRIBE", destination=f"/queue/{q}", id="s", ack="auto", receipt="sub")
        await consumer.receipt("sub")
        producer = await AsyncStomp.tunnel(url, proxy=squid.url)
        got: list[bytes] = []

        async def consume() -> None:
            while len(got) < N:
                f = await consumer.next(timeout=30)
                assert f.command == "MESSAGE", f
                got.append(f.body)

        consuming = asyncio.ensure_future(consume())
        for i in range(N // 2):
            producer.frame("SEND", f"{i:05d}".encode().ljust(100, b"."), destination=f"/queue/{q}")
            if i % 500 == 499:
                await producer.writer.drain()
        producer.frame("SEND", b"", destination="/queue/" + unique("mark"), receipt="half")
        await producer.receipt("half")
        restart = asyncio.ensure_future(asyncio.to_thread(squid.restart, 0.5))
        sent_during = 0
        for i in range(N // 2, N):  # paced so squid goes down and comes back meanwhile
            producer.frame("SEND", f"{i:05d}".encode().ljust(100, b"."), destination=f"/queue/{q}")
            if i % 100 == 99:
                await producer.writer.drain()
                await asyncio.sleep(0.02)
                sent_during += not restart.done()
        producer.frame("SEND", b"", destination="/queue/" + unique("mark"), receipt="all")
        await restart
        received_at_restart = len(got)
        await producer.receipt("all", timeout=30)
        await asyncio.wait_for(consuming, 60)
        assert [b[:5] for b in got] == [f"{i:05d}".encode() for i in range(N)]
        assert sent_during >= 5 and received_at_restart < N  # the restart was mid-stream
        await asyncio.sleep(0.3)
        assert consumer.frames.empty()  # nothing beyond the N messages
        failed = [c.writer.get_extra_info("tunnel_stats")["failures"] for c in (producer, consumer)]
        assert all(f >= 1 for f in failed), failed  # the restart did cut both tunnels
        await producer.close()
        await consumer.close()

    run(go(), 120)
    log = squid.access_log()
    tunnel = f" {url}/"
    ups = [ln for ln in log.splitlines() if f" POST{tunnel}" in ln and "/up" in ln]
    downs = [ln for ln in log.splitlines() if f" GET{tunnel}" in ln and "/down" in ln]
    assert len(ups) >= 2 and len(downs) >= 2, log[-2000:]
    assert sum(f" POST{tunnel}open" in ln for ln in log.splitlines()) >= 2


def test_a_proxy_that_wants_credentials_gets_them_and_refuses_without(node, run):
    """Corporate proxies authenticate: the tunnel sends Proxy-Authorization (Basic) on every
    request; without it the proxy's 407 is reported at once, not retried."""
    url = f"{node.http_url}/tunnel"
    q = unique("auth")
    with Squid(auth=("alice", "s3cret")) as squid:

        async def go() -> None:
            c = await AsyncStomp.tunnel(url, proxy=squid.url, proxy_auth=("alice", "s3cret"))
            c.frame("SUBSCRIBE", destination=f"/queue/{q}", id="s", receipt="sub")
            await c.receipt("sub")
            c.frame("SEND", b"through an authenticating proxy", destination=f"/queue/{q}")
            assert (await c.next()).body == b"through an authenticating proxy"
            await c.close()
            for auth in (None, ("alice", "wrong")):
                t0 = asyncio.get_running_loop().time()
                with pytest.raises(TunnelError, match="407"):
                    await open_tunnel_connection(url, proxy=squid.url, proxy_auth=auth)
                assert asyncio.get_running_loop().time() - t0 < 5

        run(go(), 60)
        log = squid.access_log()
    assert " alice " in log and "TCP_DENIED/407" in log, log[-2000:]
