"""SockJS under backpressure and abuse: a WebSocket dropped while its session is blocked,
send bodies over the limit, large sends of tiny frames, too many sessions."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import aiohttp
import pytest
from nodekit import BLOCKING, NodeProcess
from stompkit import connect, unique
from test_sockjs import Xhr, stomp
from websockets.asyncio.client import connect as ws_connect


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """Default limits, and a BLOCK address."""
    n = NodeProcess(tmp_path_factory.mktemp("sockjs-limits"), http=True, extra_config=BLOCKING)
    yield n.start()
    n.stop()


@pytest.fixture(scope="module")
def small_node(tmp_path_factory):
    """Large sends allowed, few sessions."""
    http = '[acceptors.http.sockjs]\nmax_send_size = "8MiB"\nmax_sessions = 3\n'
    n = NodeProcess(tmp_path_factory.mktemp("sockjs-few"), http=http)
    yield n.start()
    n.stop()


def prefix(node: NodeProcess) -> str:
    return node.http_url + "/sockjs/stomp"


def test_a_websocket_dropped_while_its_session_is_blocked_ends_the_session(node, run):
    q = unique()
    tcp, lst = connect(node.stomp_port)

    async def go():
        url = prefix(node).replace("http", "ws", 1) + "/websocket"
        ws = await ws_connect(url, subprotocols=["v12.stomp"])  # type: ignore[list-item]
        await ws.send(stomp("CONNECT", **{"accept-version": "1.2", "host": "/"}))
        await ws.recv()
        sub = stomp("SUBSCRIBE", id="1", destination=f"/queue/{q}", ack="client-individual")
        await ws.send(sub)
        tcp.send(f"/queue/{q}", "keep me")
        assert "keep me" in str(await asyncio.wait_for(ws.recv(), 5))
        await ws.send(stomp("SEND", "x" * 2000, destination=f"/queue/blk.{unique()}"))  # held
        await asyncio.sleep(0.3)
        ws.transport.abort()  # no close handshake

    run(go())
    tcp.subscribe(f"/queue/{q}", id="t")
    msg = lst.wait_messages(1, timeout=8)[0]
    assert msg.body == "keep me" and msg.headers.get("redelivered") == "true"
    tcp.disconnect()


def test_a_send_over_max_send_size_is_refused_with_413(node, run):
    """Default 1 MiB, by Content-Length and for a chunked body alike; the session is
    unharmed."""

    async def go():
        async with aiohttp.ClientSession() as http:
            c = await Xhr(http, node).open()
            big = json.dumps(["\n" * (1 << 20)])
            async with http.post(c.url + "/xhr_send", data=big) as r:
                assert r.status == 413
                assert await r.text() == "Payload too large: over max_send_size (1048576 bytes)."

            async def chunks():
                yield b'["'
                for _ in range(3):
                    yield b"\\n" * (1 << 19)
                yield b'"]'

            async with http.post(c.url + "/xhr_send", data=chunks()) as r:
                assert r.status == 413
            assert (await c.connect())["version"] == "1.2"

    run(go())


def test_a_large_send_of_tiny_frames_does_not_stall_the_server(small_node, run):
    """8 MiB of tiny SEND frames in one xhr_send is fed in slices: other requests are served
    meanwhile (fed in one go it stalls the server for seconds)."""
    frame = stomp("SEND", destination="/topic/nobody")
    payload = json.dumps([frame] * ((8 << 20) // (len(frame) + 12)))

    async def go():
        async with aiohttp.ClientSession() as http:
            c = await Xhr(http, small_node).open()
            await c.connect()
            send = asyncio.ensure_future(http.post(c.url + "/xhr_send", data=payload))
            worst = 0.0
            while not send.done():
                t0 = time.monotonic()
                async with http.get(prefix(small_node) + "/info") as r:
                    await r.read()
                worst = max(worst, time.monotonic() - t0)
                await asyncio.sleep(0.01)
            resp = await send
            assert resp.status == 204, await resp.text()
            resp.release()
            assert worst < 1.0, f"the server stalled for {worst:.2f}s"
            await c.send(stomp("DISCONNECT"))

    run(go(), 60)


def test_max_sessions_refuses_new_sessions_with_503(small_node, run):
    async def go():
        async with aiohttp.ClientSession() as http:
            made = 0
            while True:
                url = f"{prefix(small_node)}/000/{uuid.uuid4().hex}/xhr"
                async with http.post(url) as r:
                    if r.status == 503:
                        text = await r.text()
                        break
                    assert (r.status, await r.text()) == (200, "o\n") and made < 3
                    made += 1
            assert text == "too many SockJS sessions (max_sessions = 3)"
            assert r.headers["Access-Control-Allow-Credentials"] == "true"

    run(go())
