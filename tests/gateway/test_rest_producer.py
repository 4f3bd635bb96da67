"""Posting messages over REST: create-next chaining, duplicate-safe posting, message
attributes (durable, ttl, expiration, priority), full addresses and bad input."""

from __future__ import annotations

import asyncio
import time
import uuid

import aiohttp
import pytest
from nodekit import NodeProcess
from restkit import consume, drain, link, post, raw_request
from stompkit import unique

CONFIG = """
[address_settings."exp.#"]
expiry_address = "ExpiryQueue"

[address_settings."blk.#"]
max_size_bytes = "1KiB"
full_policy = "BLOCK"

[address_settings."fail.#"]
max_size_bytes = "1KiB"
full_policy = "FAIL"
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(
        tmp_path_factory.mktemp("rest-producer"),
        extra_config=CONFIG,
        http='[acceptors.http.rest]\nmax_body_size = "64KiB"',
    ).start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def strict(tmp_path_factory):
    """dups_ok = false: duplicate-safe posting through 307 redirects."""
    n = NodeProcess(
        tmp_path_factory.mktemp("rest-strict"), http="[acceptors.http.rest]\ndups_ok = false"
    ).start()
    yield n
    n.stop()


def test_post_answers_201_with_create_next_chain(node, run):
    q = unique()

    async def go():
        async with aiohttp.ClientSession() as s:
            create = f"{node.http_url}/queues/{q}/create"
            nxt = await post(s, create, b"one")
            assert nxt == create  # dups_ok: the next URL is the create URL again
            for body in (b"two", b"three"):
                nxt = await post(s, nxt, body)
            assert await drain(s, f"{node.http_url}/queues/{q}") == [b"one", b"two", b"three"]

    run(go())


def test_dups_ok_false_redirects_and_a_repeat_is_harmless(strict, run):
    q = unique()

    async def go():
        async with aiohttp.ClientSession() as s:
            create = f"{strict.http_url}/queues/{q}/create"
            async with s.post(create, data=b"first", allow_redirects=False) as r:
                assert r.status == 307
                unique_url = r.headers["Location"]
                assert unique_url.startswith(create + "/")
            async with s.post(unique_url, data=b"first") as r:
                assert r.status == 201
                nxt = link(r, "create-next")
            assert nxt.startswith(create + "/") and nxt != unique_url
            # the answer was "lost": the client posts the same URL again
            async with s.post(unique_url, data=b"first") as r:
                assert r.status == 201
                assert link(r, "create-next") == nxt  # the same next link
            nxt2 = await post(s, nxt, b"second")
            assert await post(s, nxt, b"second") == nxt2  # repeat of the second
            # a client that follows redirects gets there in one call
            async with s.post(create, data=b"third") as r:
                assert r.status == 201
                assert len(r.history) == 1 and r.history[0].status == 307
            assert await drain(s, f"{strict.http_url}/queues/{q}") == [
                b"first",
                b"second",
                b"third",
            ]
            # the protocol is the same on a topic
            async with s.post(f"{strict.http_url}/topics/{q}.t/create", allow_redirects=False) as r:
                assert r.status == 307
                assert "/topics/" in r.headers["Location"]

    run(go())


def test_create_with_id_deduplicates_by_the_clients_id(node, run):
    q = unique()

    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.head(f"{node.http_url}/queues/{q}") as r:
                template = r.headers["msg-create-with-id"]
            mid = uuid.uuid4().hex
            url = template.replace("{id}", mid)
            nxt = await post(s, url, b"once", params={"durable": "true"})
            assert await post(s, url, b"once", params={"durable": "true"}) == nxt
            assert await post(s, url, b"once again?") == nxt
            await post(s, template.replace("{id}", uuid.uuid4().hex), b"other")
            await post(s, nxt, b"next")
            assert await drain(s, f"{node.http_url}/queues/{q}") == [b"once", b"other", b"next"]

    run(go())


def test_priority_orders_delivery(node, run):
    q = unique()

    async def go():
        async with aiohttp.ClientSession() as s:
            create = f"{node.http_url}/queues/{q}/create"
            for p in (1, 9, 4, 7):
                await post(s, create, f"p{p}", params={"priority": str(p)})
            await post(s, create, b"default")  # priority 4
            assert await drain(s, f"{node.http_url}/queues/{q}") == [
                b"p9",
                b"p7",
                b"p4",
                b"default",
                b"p1",
            ]

    run(go())


def test_ttl_and_expiration_send_messages_to_the_expiry_queue(node, run):
    q = f"exp.{unique()}"

    async def go():
        async with aiohttp.ClientSession() as s:
            create = f"{node.http_url}/queues/{q}/create"
            await post(s, create, b"ttl", params={"ttl": "150"})
            past = int(time.time() * 1000) + 150
            await post(s, create, b"expiration", params={"expiration": str(past)})
            await post(s, create, b"stays", params={"ttl": "60000"})
            await asyncio.sleep(0.4)  # expired messages leave when the queue is read
            assert await drain(s, f"{node.http_url}/queues/{q}") == [b"stays"]
            expired = await drain(s, f"{node.http_url}/queues/ExpiryQueue")
            assert sorted(expired) == [b"expiration", b"ttl"]

    run(go())


def test_block_policy_holds_the_answer_until_there_is_room(node, run):
    q = f"blk.{unique()}"

    async def go():
        async with aiohttp.ClientSession() as s:
            create = f"{node.http_url}/queues/{q}/create"
            await post(s, create, b"x" * 2048)  # fills the 1 KiB address
            held = asyncio.ensure_future(post(s, create, b"second"))
            await asyncio.sleep(0.5)
            assert not held.done()
            got = await drain(s, f"{node.http_url}/queues/{q}")  # makes room
            await asyncio.wait_for(held, 5)
            if len(got) == 1:  # the drain may have ended before "second" arrived
                got += await drain(s, f"{node.http_url}/queues/{q}")
            assert got == [b"x" * 2048, b"second"]

    run(go())


def test_fail_policy_answers_503_naming_the_address(node, run):
    q = f"fail.{unique()}"

    async def go():
        async with aiohttp.ClientSession() as s:
            create = f"{node.http_url}/queues/{q}/create"
            await post(s, create, b"x" * 2048)
            async with s.post(create, data=b"refused") as r:
                assert r.status == 503
                assert f"address full: address {q!r} is full" in await r.text()
            assert await drain(s, f"{node.http_url}/queues/{q}") == [b"x" * 2048]
            await post(s, create, b"room again")

    run(go())


def test_bad_parameters_get_400_and_big_bodies_413(node, run):
    q = unique()

    async def go():
        async with aiohttp.ClientSession() as s:
            create = f"{node.http_url}/queues/{q}/create"
            for params, why in [
                ({"priority": "10"}, "invalid priority 10: expected 0..9"),
                ({"priority": "high"}, "invalid priority 'high': expected an integer"),
                ({"ttl": "soon"}, "invalid ttl 'soon': expected an integer"),
                ({"ttl": "-1"}, "invalid ttl -1"),
                ({"expiration": "1.5"}, "invalid expiration '1.5'"),
                ({"durable": "maybe"}, "invalid durable 'maybe': expected true or false"),
            ]:
                async with s.post(create, data=b"x", params=params) as r:
                    assert r.status == 400, params
                    assert r.content_type == "text/plain"
                    assert why in await r.text()
            async with s.post(create, data=b"x" * (64 * 1024 + 1)) as r:
                assert r.status == 413
                assert "max_body_size" in await r.text()

            async def chunks():
                for _ in range(70):
                    yield b"y" * 1024

            async with s.post(create, data=chunks()) as r:  # chunked, no Content-Length
                assert r.status == 413
            await post(s, create, b"z" * (64 * 1024))  # exactly the limit is fine
            assert await drain(s, f"{node.http_url}/queues/{q}") == [b"z" * (64 * 1024)]

    run(go())


def test_a_refused_post_leaves_no_trace(node, run):
    """An expiry beyond the store's 64-bit milliseconds and a header that is not UTF-8 are
    400, and the refused message left nothing behind: its duplicate id is free for the
    corrected resend, and no subscriber got it (before, some queues had it already)."""
    q, t = unique(), unique("t")

    async def go():
        async with aiohttp.ClientSession() as s:
            url = f"{node.http_url}/queues/{q}/create/abc"
            for params, why in [
                ({"expiration": str(10**23)}, "invalid expiration 100000000000000000000000"),
                ({"ttl": str(2**63 - 1)}, "invalid ttl"),
            ]:
                async with s.post(url, data=b"x", params={"durable": "true", **params}) as r:
                    assert r.status == 400, (r.status, await r.text())
                    assert why in await r.text()
            await post(s, url, b"x", params={"durable": "true", "ttl": "60000"})
            assert await drain(s, f"{node.http_url}/queues/{q}") == [b"x"]

            base = f"{node.http_url}/topics/{t}"
            nexts = []
            for form in ({}, {"durable": "true", "name": unique("keep")}):
                async with s.post(f"{base}/pull-subscriptions", data=form) as r:
                    assert r.status == 201
                    nexts.append(r.headers["msg-consume-next"])
            head = (
                f"POST /topics/{t}/create/id1?durable=true HTTP/1.1\r\n"
                f"Host: 127.0.0.1\r\nX-Foo: caf"
            ).encode() + b"\xff"
            status, text = await raw_request(node.http_port, head, b"refused")
            assert status == 400
            assert "X-Foo" in text and "not valid UTF-8" in text
            for nxt in nexts:
                assert (await consume(s, nxt)).status == 503  # nobody got it
            await post(s, f"{base}/create/id1", b"good", params={"durable": "true"})
            for nxt in nexts:
                assert (await consume(s, nxt, wait=2)).body == b"good"

    run(go())


def test_durable_messages_survive_a_restart(tmp_path, run):
    node = NodeProcess(tmp_path, http="[acceptors.http.rest]\ndefault_durable_send = true").start()
    q = unique()
    try:

        async def send():
            async with aiohttp.ClientSession() as s:
                create = f"{node.http_url}/queues/{q}/create"
                await post(s, create, b"durable by default")
                await post(s, create, b"not durable", params={"durable": "false"})
                await post(s, create, b"durable", params={"durable": "true"})

        run(send())
        node.kill9()  # nothing answered 201 durably may be lost (the wait: test_rest_fsync)
        node.start()

        async def check():
            async with aiohttp.ClientSession() as s:
                got = await drain(s, f"{node.http_url}/queues/{q}")
                assert got == [b"durable by default", b"durable"]

        run(check())
    finally:
        node.stop()


def test_producer_time_to_live_is_the_default_ttl(tmp_path, run):
    node = NodeProcess(
        tmp_path, http='[acceptors.http.rest]\nproducer_time_to_live = "300ms"'
    ).start()
    q = unique()
    try:

        async def go():
            async with aiohttp.ClientSession() as s:
                create = f"{node.http_url}/queues/{q}/create"
                await post(s, create, b"default ttl")
                await post(s, create, b"ttl=0 means none", params={"ttl": "0"})
                await asyncio.sleep(0.6)
                assert await drain(s, f"{node.http_url}/queues/{q}") == [b"ttl=0 means none"]
                assert await drain(s, f"{node.http_url}/queues/ExpiryQueue") == [b"default ttl"]

        run(go())
    finally:
        node.stop()
