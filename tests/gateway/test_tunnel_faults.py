"""The real tunnel client through a proxy that fails at random (tests/httpfaults.py):
requests lost, answers lost, connections cut, delays; and a proxy with a small body limit.
Nothing is lost, doubled or reordered."""

from __future__ import annotations

import asyncio
import threading

import pytest
from httpfaults import HttpFaults
from nodekit import NodeProcess
from stompkit import connect, unique
from tunnelkit import AsyncStomp

N = 3000
HTTP = '[acceptors.http.tunnel]\nresponse_time = "1s"\n'


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("tunnel-faults"), http=HTTP).start()
    yield n
    n.stop()


def test_3000_messages_each_way_exactly_once_in_order_through_random_faults(node, run):
    q_up, q_down = unique("up"), unique("down")
    tcp, lst = connect(node.stomp_port)
    tcp.subscribe(f"/queue/{q_up}", id="up")

    def produce_tcp() -> None:
        for i in range(N):
            tcp.send(f"/queue/{q_down}", f"d{i}")
            if i % 10 == 9:
                threading.Event().wait(0.005)

    async def go() -> None:
        faults = {"fail_before": 0.08, "fail_after": 0.08, "cut": 0.08, "delay": 0.08}
        async with HttpFaults(node.http_url, seed=7, **faults) as proxy:
            c = await AsyncStomp.tunnel(proxy.url + "/tunnel", retry_for=20.0)
            c.frame("SUBSCRIBE", destination=f"/queue/{q_down}", id="s", receipt="sub")
            await c.receipt("sub")

            async def produce_tunnel() -> None:
                for i in range(N):
                    c.frame("SEND", f"u{i}".encode(), destination=f"/queue/{q_up}")
                    if i % 10 == 9:
                        await c.writer.drain()
                        await asyncio.sleep(0.005)

            async def consume() -> list[str]:
                got = []
                while len(got) < N:
                    f = await c.next(timeout=20)
                    assert f.command == "MESSAGE", f
                    got.append(f.body.decode())
                return got

            down, _, _ = await asyncio.gather(
                consume(), produce_tunnel(), asyncio.to_thread(produce_tcp)
            )
            assert down == [f"d{i}" for i in range(N)]
            await asyncio.to_thread(lst.wait_messages, N, 30)
            await asyncio.sleep(0.5)
            assert [m.body for m in lst.messages] == [f"u{i}" for i in range(N)]
            assert c.frames.empty()
            stats = c.writer.get_extra_info("tunnel_stats")
            await c.close()
        for fault in ("fail_before", "fail_after", "cut", "delay"):
            assert proxy.stats[fault] > 0, proxy.stats  # each kind of fault happened
        assert stats["failures"] >= 10, stats

    try:
        run(go(), 60)
    finally:
        tcp.disconnect()


def test_a_proxy_body_limit_below_the_clients_makes_it_send_smaller_posts(node, run):
    """A 413 (here from a proxy limited to 64 KiB) halves the client's upload size instead
    of ending the connection."""
    q = unique()

    async def go() -> None:
        async with HttpFaults(node.http_url, max_body=64 * 1024) as proxy:
            c = await AsyncStomp.tunnel(proxy.url + "/tunnel")
            c.frame("SUBSCRIBE", destination=f"/queue/{q}", id="s", receipt="sub")
            await c.receipt("sub")
            for i in range(300):
                c.frame("SEND", b"%03d" % i + b"." * 1000, destination=f"/queue/{q}")
            got = [(await c.next()).body[:3] for _ in range(300)]
            assert got == [b"%03d" % i for i in range(300)]
            assert proxy.stats["too_large"] >= 1
            await c.close()

    run(go(), 30)
