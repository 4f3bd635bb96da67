"""STOMP <-> HTTP: a message posted over REST is read over STOMP and the reverse, with its
Content-Type, exact body bytes (binary too) and properties as headers."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from nodekit import NodeProcess
from restkit import consume, post
from stompkit import connect, unique

BINARY = bytes(range(256)) + b"\x00\xff\xfe not utf-8 \x80"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("rest-interop"), http=True).start()
    yield n
    n.stop()


def test_http_to_stomp_keeps_content_type_body_and_headers(node, run):
    q = unique()
    conn, lst = connect(node.stomp_port, auto_decode=False)
    conn.subscribe(f"/queue/{q}", id="s")

    async def go():
        base = f"{node.http_url}/queues/{q}"
        async with aiohttp.ClientSession() as s:
            await post(
                s,
                f"{base}/create",
                b'{"n": 1}',
                headers={"Content-Type": "application/json", "X-Order": "42"},
            )
            await post(
                s, f"{base}/create", BINARY, headers={"Content-Type": "application/octet-stream"}
            )
        return await asyncio.to_thread(lst.wait_messages, 2)

    try:
        first, second = run(go())
    finally:
        conn.disconnect()
    assert first.body == b'{"n": 1}'
    h = first.headers
    assert h["content-type"] == "application/json"
    assert h["http_content$type"] == "application/json"
    assert h["http_x$order"] == "42"
    for transport in (
        "http_host",
        "http_user$agent",
        "http_content$length",
        "http_accept$encoding",
    ):
        assert transport not in h
    assert second.body == BINARY
    assert second.headers["content-type"] == "application/octet-stream"


def test_stomp_to_http_keeps_content_type_body_and_headers(node, run):
    q = unique()
    conn, lst = connect(node.stomp_port, auto_decode=False)
    conn.send(
        f"/queue/{q}", BINARY, content_type="image/png", headers={"order-id": "99", "receipt": "r1"}
    )
    conn.send(f"/queue/{q}", "text", headers={"http_x$trace": "abc", "receipt": "r2"})
    lst.wait_receipt("r2")
    conn.disconnect()

    async def go():
        base = f"{node.http_url}/queues/{q}"
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{base}/pull-consumers") as r:
                nxt = r.headers["msg-consume-next"]
            img = await consume(s, nxt)
            txt = await consume(s, img.next)
        return img, txt

    img, txt = run(go())
    assert img.status == 200 and img.body == BINARY
    assert img.headers["Content-Type"] == "image/png"
    assert img.headers["order-id"] == "99"
    assert txt.body == b"text"
    assert txt.headers["Content-Type"] == "application/octet-stream"  # none was given
    assert txt.headers["x-trace"] == "abc"  # http_x$trace comes back as the header x-trace


def test_headers_round_trip_http_stomp_http(node, run):
    """REST -> STOMP consumer that forwards what it got -> REST: the HTTP headers survive."""
    a, b = unique(), unique()
    conn, lst = connect(node.stomp_port, auto_decode=False)
    conn.subscribe(f"/queue/{a}", id="s")

    async def go():
        async with aiohttp.ClientSession() as s:
            await post(
                s, f"{node.http_url}/queues/{a}/create", "é".encode(),
                headers={"Content-Type": "text/plain; charset=utf-8", "X-Customer": "acme"},
            )  # fmt: skip
            (msg,) = await asyncio.to_thread(lst.wait_messages, 1)
            forward = {
                k: v for k, v in msg.headers.items() if k.startswith("http_") or k == "content-type"
            }
            await asyncio.to_thread(conn.send, f"/queue/{b}", msg.body, headers=forward)
            async with s.post(f"{node.http_url}/queues/{b}/pull-consumers") as r:
                nxt = r.headers["msg-consume-next"]
            return await consume(s, nxt, wait=5)

    try:
        got = run(go())
    finally:
        conn.disconnect()
    assert got.body == "é".encode()
    assert got.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert got.headers["x-customer"] == "acme"


def test_topics_across_protocols(node, run):
    t = unique("t")
    conn, lst = connect(node.stomp_port, auto_decode=False)
    conn.subscribe(f"/topic/{t}", id="s", headers={"receipt": "sub"})
    lst.wait_receipt("sub")

    async def go():
        base = f"{node.http_url}/topics/{t}"
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{base}/pull-subscriptions") as r:
                nxt = r.headers["msg-consume-next"]
            await post(s, f"{base}/create", b"from http", headers={"Content-Type": "text/plain"})
            await asyncio.to_thread(
                conn.send, f"/topic/{t}", b"from stomp", content_type="text/csv"
            )
            one = await consume(s, nxt, wait=5)
            two = await consume(s, one.next, wait=5)
            stomp_got = await asyncio.to_thread(lst.wait_messages, 2)
        return one, two, stomp_got

    try:
        one, two, stomp_got = run(go())
    finally:
        conn.disconnect()
    assert [(one.body, one.headers["Content-Type"]), (two.body, two.headers["Content-Type"])] == [
        (b"from http", "text/plain"),
        (b"from stomp", "text/csv"),
    ]
    assert [(m.body, m.headers["content-type"]) for m in stomp_got] == [
        (b"from http", "text/plain"),
        (b"from stomp", "text/csv"),
    ]
