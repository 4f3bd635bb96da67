"""A closed connection's memory is freed when it closes, not at the next run of the cyclic
garbage collector, which a serving node runs rarely (gateway/gc_policy.py).

Each case is 100 clients, one after another, that each send all but the last byte of a
1 MiB frame and go: the node's RSS must not keep what they sent.  A session and its link
refer to each other, so the link drops the session when the connection is lost
(gateway/stream.py, gateway/websocket/streams.py); an MQTT session's parser error, the
packets held during a login and its subscriptions' consumers make no cycles either
(gateway/mqtt).  Before those fixes each case kept about 100 MiB.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from nodekit import SECURITY_USERS, NodeProcess

from waystation.wire.mqtt import (
    MQTT_5,
    MQTT_311,
    Connect,
    Subscribe,
    SubscriptionRequest,
    encode,
)
from waystation.wire.mqtt_properties import encode_vbi
from waystation.wire.stomp import encode_frame

PIECE = 1 << 20  # the frame each client sends all but the last byte of
CLIENTS = 100
# What the node may keep after the 100 MiB went through: a few pieces the allocator holds
# for reuse, and what the first connections of a listener allocate once.
BOUND_KIB = 8 * 1024
USER, PASSWORD = "app", "secret"
STOMP_LOGIN = {"accept-version": "1.2", "host": "h", "login": USER, "passcode": PASSWORD}


def _rss_kib(node: NodeProcess) -> int:
    assert node.proc is not None
    for line in Path(f"/proc/{node.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def _gone(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Half-close and wait for the node to close (so it has read everything)."""
    writer.write_eof()
    while await asyncio.wait_for(reader.read(65536), 10):
        pass
    writer.close()


async def _mqtt_before_login(node: NodeProcess, n: int) -> None:
    """A CONNECT cut short: the parser holds the piece, no session exists yet."""
    r, w = await asyncio.open_connection("127.0.0.1", node.mqtt_port)
    w.write(b"\x10" + encode_vbi(PIECE) + bytes(PIECE - 1))
    await _gone(r, w)


async def _mqtt_subscribed(node: NodeProcess, n: int) -> None:
    """Logged in (v5), subscribed, then a PUBLISH cut short."""
    r, w = await asyncio.open_connection("127.0.0.1", node.mqtt_port)
    w.write(encode(Connect(f"mem-{n}", MQTT_5, True, 30, USER, PASSWORD.encode()), MQTT_5))
    w.write(encode(Subscribe(1, [SubscriptionRequest("mem/#", 1)]), MQTT_5))
    await r.readexactly(2)  # CONNACK's first bytes: the login went through
    w.write(b"\x30" + encode_vbi(PIECE) + bytes(PIECE - 1))
    await _gone(r, w)


async def _stomp_send(node: NodeProcess, n: int) -> None:
    """Logged in, then a SEND whose body is cut short."""
    r, w = await asyncio.open_connection("127.0.0.1", node.stomp_port)
    w.write(encode_frame("CONNECT", STOMP_LOGIN))
    w.write(b"SEND\ndestination:/queue/mem\ncontent-length:%d\n\n" % PIECE + bytes(PIECE - 1))
    await _gone(r, w)


async def _websocket_mqtt(node: NodeProcess, n: int) -> None:
    """MQTT over WebSocket: logged in, then a PUBLISH cut short (whole WebSocket messages)."""
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(f"{node.http_url}/mqtt", protocols=["mqtt"]) as ws,
    ):
        await ws.send_bytes(encode(Connect(f"ws-{n}", MQTT_311, True, 30, USER,
                                           PASSWORD.encode()), MQTT_311))  # fmt: skip
        await ws.receive()  # CONNACK
        await ws.send_bytes(b"\x30" + encode_vbi(PIECE) + bytes(PIECE - 1))


Case = Callable[[NodeProcess, int], Awaitable[None]]


@pytest.mark.parametrize(
    "case",
    [_mqtt_before_login, _mqtt_subscribed, _stomp_send, _websocket_mqtt],
    ids=["mqtt-before-login", "mqtt-subscribed", "stomp", "websocket-mqtt"],
)
def test_closed_connections_free_their_partial_frames(tmp_path, run, case: Case) -> None:
    node = NodeProcess(tmp_path / "n", SECURITY_USERS, mqtt=True, http=True).start()
    try:

        async def go() -> int:
            for i in range(3):  # the listener's first connections allocate once
                await case(node, i)
            await asyncio.sleep(0.3)
            before = _rss_kib(node)
            for i in range(3, 3 + CLIENTS):  # one at a time: what is freed is used again
                await case(node, i)
            await asyncio.sleep(0.5)
            return _rss_kib(node) - before

        grown = run(go())
        assert grown < BOUND_KIB, (
            f"RSS grew by {grown // 1024} MiB after {CLIENTS} clients each sent "
            f"{PIECE >> 20} MiB of a frame and left (bound {BOUND_KIB >> 10} MiB)"
        )
    finally:
        node.stop()
