"""The tunnel under backpressure and abuse: sends to a full BLOCK-policy address, clients
that vanish meanwhile, requests that never end, large bodies, too many sessions."""

from __future__ import annotations

import asyncio
import socket
import time

import aiohttp
import pytest
from httpfaults import HttpFaults
from nodekit import BLOCKING, NodeProcess
from stompkit import connect, unique
from tunnelkit import (
    CONNECT,
    HTTP,
    RESPONSE_TIME,
    SESSION_TIMEOUT,
    AsyncStomp,
    RawTunnel,
    stomp_bytes,
)

SLICE = 64 * 1024  # what the server feeds per loop turn


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("tunnel-bp"), http=HTTP, extra_config=BLOCKING)
    n.start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def big_node(tmp_path_factory):
    """Large upstream bodies allowed, few sessions; a POST may take its time being fed on a
    loaded machine (a held POST answers after response_time with the offset reached)."""
    tunnel = '[acceptors.http.tunnel]\nresponse_time = "10s"\nsession_timeout = "20s"\n'
    extra = 'max_request_size = "8MiB"\nmax_sessions = 4\n'
    n = NodeProcess(tmp_path_factory.mktemp("tunnel-big"), http=tunnel + extra).start()
    yield n
    n.stop()


def blocked() -> str:
    return f"blk.{unique()}"


async def _read_frames(raw: RawTunnel, ack: int, want: int) -> tuple[int, bytes]:
    data = b""
    while data.count(b"\0") < want:
        status, _, body = await raw.down(ack)
        assert status == 200
        data += body
        ack += len(body)
    return ack, data


def test_a_post_held_by_a_blocked_address_answers_at_response_time_with_the_offset_reached(
    node, run
):
    """The body is fed in slices until the protocol holds its input; the POST is answered
    200 after response_time with the bytes taken, short of the body's end, so no proxy or
    client times out.  The rest, sent again once a consumer drains the address, arrives
    once and in order."""
    q = blocked()

    async def go():
        async with aiohttp.ClientSession() as http:
            raw = RawTunnel(http, node.http_url + "/tunnel")
            await raw.open()
            await raw.up(0, CONNECT)
            body = b"".join(
                stomp_bytes("SEND", b"%04d" % i + b"." * 1000, destination=f"/queue/{q}")
                for i in range(200)
            )
            end = len(CONNECT) + len(body)
            t0 = time.monotonic()
            status, headers, _ = await asyncio.wait_for(
                raw.up(len(CONNECT), body), RESPONSE_TIME * 4
            )
            took = time.monotonic() - t0
            got = int(headers["X-Tunnel-Received"])
            assert status == 200 and got == len(CONNECT) + SLICE  # one slice, then held
            assert RESPONSE_TIME * 0.9 <= took < RESPONSE_TIME * 3, took
            tcp, lst = connect(node.stomp_port)
            tcp.subscribe(f"/queue/{q}", id="d")
            while got < end:
                status, headers, _ = await raw.up(got, body[got - len(CONNECT) :])
                assert status == 200
                got = int(headers["X-Tunnel-Received"])
            msgs = await asyncio.to_thread(lst.wait_messages, 200, 20)
            await asyncio.sleep(0.3)
            assert [m.body[:4] for m in lst.messages] == [f"{i:04d}" for i in range(200)]
            assert len(msgs) == 200
            tcp.disconnect()

    run(go(), 40)


def test_a_client_that_vanishes_while_blocked_is_timed_out_and_its_messages_return(node, run):
    """The client sends to a full BLOCK address, then goes away without a word: the session
    still times out, so its unacknowledged message goes back to the queue."""
    q = unique()
    tcp, lst = connect(node.stomp_port)

    async def go():
        http = aiohttp.ClientSession()
        raw = RawTunnel(http, node.http_url + "/tunnel")
        await raw.open()
        sub = stomp_bytes("SUBSCRIBE", destination=f"/queue/{q}", id="s", ack="client")
        await raw.up(0, CONNECT + sub)
        tcp.send(f"/queue/{q}", "keep me")
        _, data = await _read_frames(raw, 0, 2)  # CONNECTED, MESSAGE (not acknowledged)
        assert b"keep me" in data
        send = stomp_bytes("SEND", b"x" * 2000, destination=f"/queue/{blocked()}")
        post = asyncio.ensure_future(raw.up(len(CONNECT + sub), send * 2))
        await asyncio.sleep(0.3)
        post.cancel()
        await http.close()  # gone: no DELETE, no more requests

    run(go(), 20)
    tcp.subscribe(f"/queue/{q}", id="t")
    msg = lst.wait_messages(1, timeout=SESSION_TIMEOUT + RESPONSE_TIME + 6)[0]
    assert msg.body == "keep me" and msg.headers.get("redelivered") == "true"
    tcp.disconnect()


def test_a_request_that_never_ends_does_not_keep_its_session_alive(node, run):
    """A POST whose body never comes counts as activity for response_time only."""

    async def go():
        async with aiohttp.ClientSession() as http:
            raw = RawTunnel(http, node.http_url + "/tunnel")
            await raw.open()
            await raw.up(0, CONNECT)
            with socket.create_connection(("127.0.0.1", node.http_port)) as s:
                s.sendall(
                    f"POST /tunnel/{raw.sid}/up?offset={len(CONNECT)} HTTP/1.1\r\n"
                    f"Host: x\r\nX-Tunnel-Token: {http.headers['X-Tunnel-Token']}\r\n"
                    "Content-Length: 100\r\n\r\n\n".encode()
                )
                await asyncio.sleep(RESPONSE_TIME + SESSION_TIMEOUT + 1.5)
                status, _, text = await raw.up(len(CONNECT), b"")
                assert status == 410 and "closed" in text

    run(go(), 20)


def test_backpressure_stalls_the_producer_but_keeps_the_connection(node, run):
    """Through a proxy that gives up on answers slower than 3 s, a producer blocked for
    longer than that just stalls (held POSTs are answered within response_time); once the
    address drains everything arrives, once and in order, on the same tunnel session."""
    q = blocked()

    async def go():
        async with HttpFaults(node.http_url, timeout=RESPONSE_TIME * 3) as proxy:
            c = await AsyncStomp.tunnel(proxy.url + "/tunnel", retry_for=2.0)
            c.frame("SEND", b"00" + b"." * 2000, destination=f"/queue/{q}")  # fills it
            await asyncio.sleep(0.3)
            for i in range(1, 20):
                c.frame("SEND", b"%02d" % i + b"." * 2000, destination=f"/queue/{q}")
            c.frame("SEND", b"", destination=f"/queue/{unique()}", receipt="all")
            await asyncio.sleep(RESPONSE_TIME * 5)  # blocked for longer than the proxy waits
            stats = c.writer.get_extra_info("tunnel_stats")
            assert proxy.stats["timeout"] == 0 and stats["failures"] == 0, (proxy.stats, stats)
            assert c.frames.empty()  # no RECEIPT yet: the producer is held back
            tcp, lst = connect(node.stomp_port)
            tcp.subscribe(f"/queue/{q}", id="d")
            await c.receipt("all", timeout=15)
            msgs = await asyncio.to_thread(lst.wait_messages, 20, 15)
            assert [m.body[:2] for m in msgs] == [f"{i:02d}" for i in range(20)]
            await c.close()
            tcp.disconnect()

    run(go(), 40)


def test_upstream_bodies_over_max_request_size_get_413(node, run):
    """The default max_request_size is 1 MiB (the client's largest POST), by Content-Length
    and for a chunked body alike; the session carries on."""

    async def go():
        async with aiohttp.ClientSession() as http:
            raw = RawTunnel(http, node.http_url + "/tunnel")
            await raw.open()
            status, _, text = await raw.up(0, b"\n" * ((1 << 20) + 1))
            assert status == 413 and "max_request_size (1048576 bytes)" in text

            async def chunks():
                for _ in range(3):
                    yield b"\n" * (1 << 19)

            url = f"{raw.base}/{raw.sid}/up"
            async with http.post(url, params={"offset": "0"}, data=chunks()) as r:
                assert r.status == 413 and "max_request_size" in await r.text()
            status, headers, _ = await raw.up(0, CONNECT)
            assert status == 200 and headers["X-Tunnel-Received"] == str(len(CONNECT))

    run(go(), 20)


async def _worst_delay(url: str, until: asyncio.Future[object]) -> float:
    """The longest round trip of small requests made one after another until ``until``."""
    worst = 0.0
    async with aiohttp.ClientSession() as http:
        while not until.done():
            t0 = time.monotonic()
            async with http.get(url) as r:
                await r.read()
            worst = max(worst, time.monotonic() - t0)
            await asyncio.sleep(0.01)
    return worst


def test_a_large_body_of_tiny_frames_does_not_stall_the_server(big_node, run):
    """8 MiB of tiny SENDs in one POST is fed a slice per loop turn: other requests are
    served meanwhile (fed in one go it stalls the server for seconds)."""
    frame = stomp_bytes("SEND", destination="/topic/nobody")
    body = CONNECT + frame * ((8 << 20) // len(frame) - 10)

    async def go():
        async with aiohttp.ClientSession() as http:
            raw = RawTunnel(http, big_node.http_url + "/tunnel")
            await raw.open()
            post = asyncio.ensure_future(raw.up(0, body))
            probe = big_node.http_url + "/tunnel/" + "A" * 22 + "/down?ack=0"  # a quick 404
            worst = await _worst_delay(probe, post)
            status, headers, _ = await post
            assert status == 200 and headers["X-Tunnel-Received"] == str(len(body))
            assert worst < 1.0, f"the server stalled for {worst:.2f}s"
            async with http.delete(f"{raw.base}/{raw.sid}") as r:
                assert r.status == 204

    run(go(), 60)


def test_max_sessions_refuses_more_with_503(big_node, run):
    async def go():
        base = big_node.http_url + "/tunnel"
        async with aiohttp.ClientSession() as http:
            opened: list[str] = []
            tokens: dict[str, dict[str, str]] = {}  # session -> its X-Tunnel-Token header
            while True:
                async with http.post(base + "/open", params={"protocol": "stomp"}) as r:
                    if r.status == 503:
                        text = await r.text()
                        break
                    assert r.status == 201 and len(opened) < 4
                    info = await r.json()
                    opened.append(info["session"])
                    tokens[info["session"]] = {"X-Tunnel-Token": info["token"]}
            assert "too many tunnel sessions (max_sessions = 4)" in text
            sid = opened.pop()
            async with http.delete(f"{base}/{sid}", headers=tokens[sid]) as r:
                assert r.status == 204
            async with http.post(base + "/open", params={"protocol": "stomp"}) as r:
                assert r.status == 201  # a place came free
                info = await r.json()
                opened.append(info["session"])
                tokens[info["session"]] = {"X-Tunnel-Token": info["token"]}
            for sid in opened:
                async with http.delete(f"{base}/{sid}", headers=tokens[sid]) as r:
                    assert r.status == 204

    run(go(), 20)
