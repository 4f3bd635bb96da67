"""Pull consumers on queues: auto-ack and manual-ack state machines, Accept-Wait long
polling, idempotent re-POSTs, stale links, DELETE and the idle reaper."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from nodekit import NodeProcess
from restkit import consume, drain, link, post
from stompkit import connect, unique


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("rest-pull"), http=True).start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """Consumers idle for 1 s are reaped; Accept-Wait is capped at 3 s."""
    n = NodeProcess(
        tmp_path_factory.mktemp("rest-reap"),
        http='[acceptors.http.rest]\nconsumer_session_timeout = "1s"\n'
        'session_timeout_task_interval = "100ms"\nmax_accept_wait = "3s"\nretry_after = "2s"',
    ).start()
    yield n
    n.stop()


async def _consumer(s: aiohttp.ClientSession, queue_url: str, **form: str) -> tuple[str, str]:
    """-> (consumer URL, its first next link)."""
    async with s.post(f"{queue_url}/pull-consumers", data=form) as r:
        assert r.status == 201, (r.status, await r.text())
        nxt = r.headers.get("msg-consume-next") or r.headers["msg-acknowledge-next"]
        assert r.headers["msg-consumer"] == r.headers["Location"]
        return r.headers["Location"], nxt


async def _ack(s: aiohttp.ClientSession, url: str, value: str) -> tuple[int, str | None]:
    async with s.post(url, data={"acknowledge": value}) as r:
        return r.status, r.headers.get("msg-acknowledge-next")


def test_auto_ack_consume_next_protocol(node, run):
    q = unique()

    async def go():
        base = f"{node.http_url}/queues/{q}"
        async with aiohttp.ClientSession() as s:
            consumer, n1 = await _consumer(s, base)
            assert "/pull-consumers/auto-ack/" in consumer
            assert n1 == f"{consumer}/consume-next-1"
            empty = await consume(s, n1)
            assert empty.status == 503
            assert empty.headers["Retry-After"] == "5"
            assert empty.next == n1
            await post(s, f"{base}/create", b"m1", headers={"Content-Type": "text/plain"})
            await post(s, f"{base}/create", b"m2")
            got = await consume(s, n1)
            assert (got.status, got.body) == (200, b"m1")
            assert got.headers["Content-Type"] == "text/plain"
            assert got.headers["msg-consumer"] == consumer
            assert got.headers["msg-delivery-count"] == "1"
            n2 = got.next
            assert n2 == f"{consumer}/consume-next-2"
            again = await consume(s, n1)  # the answer was lost: the same message again
            assert (again.status, again.body, again.next) == (200, b"m1", n2)
            got = await consume(s, n2)
            assert got.body == b"m2"
            n3 = got.next
            for stale in (n1, f"{consumer}/consume-next-9"):
                st = await consume(s, stale)
                assert st.status == 412, stale
                assert st.next == n3
            async with s.get(consumer) as r:
                assert r.status == 200 and r.headers["msg-consume-next"] == n3
            async with s.head(consumer) as r:
                assert r.status == 200 and r.headers["msg-consume-next"] == n3
            async with s.delete(consumer) as r:
                assert r.status == 204
            async with s.post(n3) as r:
                assert r.status == 404
                assert link(r, "pull-consumers") == f"{base}/pull-consumers"
            async with s.delete(consumer) as r:
                assert r.status == 404
            async with s.get(f"{consumer}/consume-next-3") as r:
                assert r.status == 405
            assert await drain(s, base) == []  # both were acknowledged

    run(go())


def test_accept_wait_is_woken_by_a_stomp_producer(node, run):
    q = unique()
    conn, lst = connect(node.stomp_port)

    async def go():
        base = f"{node.http_url}/queues/{q}"
        async with aiohttp.ClientSession() as s:
            _, n1 = await _consumer(s, base)
            t0 = time.monotonic()
            waiting = asyncio.ensure_future(consume(s, n1, wait=10))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            await asyncio.to_thread(conn.send, f"/queue/{q}", "from stomp")
            got = await asyncio.wait_for(waiting, 5)
            assert (got.status, got.body) == (200, b"from stomp")
            assert time.monotonic() - t0 < 5
            # nothing comes: 503 after about the wait asked for
            t0 = time.monotonic()
            got = await consume(s, got.next, wait=0.5)
            assert got.status == 503
            assert 0.4 <= time.monotonic() - t0 < 3
            async with s.post(got.next, headers={"Accept-Wait": "soon"}) as r:
                assert r.status == 400
                assert "invalid Accept-Wait header 'soon'" in await r.text()

    try:
        run(go())
    finally:
        conn.disconnect()


def test_a_waiting_rest_consumer_holds_no_message(node, run):
    q = unique()
    conn, lst = connect(node.stomp_port)
    conn.subscribe(f"/queue/{q}", id="s", ack="client-individual")

    async def go():
        base = f"{node.http_url}/queues/{q}"
        async with aiohttp.ClientSession() as s:
            await _consumer(s, base)  # created, never pulls
            await _consumer(s, base, autoAck="false")
            for i in range(4):
                await post(s, f"{base}/create", f"m{i}")
            msgs = await asyncio.to_thread(lst.wait_messages, 4)
            assert sorted(m.body for m in msgs) == ["m0", "m1", "m2", "m3"]

    try:
        run(go())
    finally:
        conn.disconnect()


def test_manual_ack_protocol_and_redelivery(node, run):
    q = unique()

    async def go():
        base = f"{node.http_url}/queues/{q}"
        async with aiohttp.ClientSession() as s:
            consumer, n1 = await _consumer(s, base, autoAck="false")
            assert "/pull-consumers/acknowledged/" in consumer
            assert n1 == f"{consumer}/acknowledge-next-1"
            assert (await consume(s, n1)).status == 503
            await post(s, f"{base}/create", b"m1")
            await post(s, f"{base}/create", b"m2")
            got = await consume(s, n1)
            assert (got.status, got.body, got.headers["msg-delivery-count"]) == (200, b"m1", "1")
            ack1 = got.headers["msg-acknowledgement"]
            assert ack1 == f"{consumer}/acknowledgement/1"
            again = await consume(s, n1)  # re-POST: the same message, the same ack link
            assert (again.body, again.headers["msg-acknowledgement"]) == (b"m1", ack1)
            async with s.get(consumer) as r:  # a restarted client asks where it was
                assert r.headers["msg-acknowledgement"] == ack1
                assert "msg-acknowledge-next" not in r.headers
            st = await consume(s, f"{consumer}/acknowledge-next-2")
            assert st.status == 412 and st.headers["msg-acknowledgement"] == ack1
            for bad, why in [
                ({}, "missing form parameter acknowledge"),
                ({"acknowledge": "perhaps"}, "true or false"),
            ]:
                async with s.post(ack1, data=bad) as r:
                    assert r.status == 400 and why in await r.text()
            # acknowledge=false: the message goes back and comes again
            status, n2 = await _ack(s, ack1, "false")
            assert (status, n2) == (200, f"{consumer}/acknowledge-next-2")
            assert await _ack(s, ack1, "false") == (200, n2)  # a repeat changes nothing
            got = await consume(s, n2)
            assert (got.body, got.headers["msg-delivery-count"]) == (b"m1", "2")
            ack2 = got.headers["msg-acknowledgement"]
            status, n3 = await _ack(s, ack2, "true")
            assert status == 200
            assert await _ack(s, ack2, "true") == (200, n3)
            got = await consume(s, n3)
            assert got.body == b"m2"
            status, n4 = await _ack(s, got.headers["msg-acknowledgement"], "true")
            assert status == 200
            async with s.get(consumer) as r:
                assert r.headers["msg-acknowledge-next"] == n4
            assert (await consume(s, n4)).status == 503
            assert (await _ack(s, f"{consumer}/acknowledgement/9", "true"))[0] == 412
            # DELETE with a message awaiting its acknowledgement gives it back at once
            await post(s, f"{base}/create", b"m3")
            assert (await consume(s, n4)).body == b"m3"
            async with s.delete(consumer) as r:
                assert r.status == 204
            assert await drain(s, base) == [b"m3"]

    run(go())


def test_lost_acknowledgement_is_redelivered_after_the_consumer_times_out(quick, run):
    q = unique()

    async def go():
        base = f"{quick.http_url}/queues/{q}"
        async with aiohttp.ClientSession() as s:
            consumer, n1 = await _consumer(s, base, autoAck="false")
            await post(s, f"{base}/create", b"precious")
            got = await consume(s, n1)
            assert got.body == b"precious"
            ack = got.headers["msg-acknowledgement"]
            # the client crashes before acknowledging; a second consumer waits
            _, m1 = await _consumer(s, base, autoAck="false")
            t0 = time.monotonic()
            got2 = await consume(s, m1, wait=0.5)
            assert got2.status == 503 and got2.headers["Retry-After"] == "2"
            assert time.monotonic() - t0 < 1.5
            got2 = await consume(s, m1, wait=1)
            while got2.status == 503:  # the reaper returns it within about 1 s
                assert time.monotonic() - t0 < 6, "not redelivered"
                got2 = await consume(s, m1, wait=1)
            assert (got2.body, got2.headers["msg-delivery-count"]) == (b"precious", "2")
            async with s.post(ack, data={"acknowledge": "true"}) as r:
                assert r.status == 404  # the old consumer is gone
            async with s.get(consumer) as r:
                assert r.status == 404
            assert await _ack(s, got2.headers["msg-acknowledgement"], "true") == (
                200,
                m1.removesuffix("acknowledge-next-1") + "acknowledge-next-2",
            )

    run(go())


def test_reaper_spares_consumers_in_use(quick, run):
    q = unique()

    async def go():
        base = f"{quick.http_url}/queues/{q}"
        async with aiohttp.ClientSession() as s:
            consumer, n1 = await _consumer(s, base)
            idle, _ = await _consumer(s, base)
            for _ in range(6):  # 1.8 s of activity, each gap under the 1 s timeout
                await asyncio.sleep(0.3)
                async with s.get(consumer) as r:
                    assert r.status == 200
            async with s.get(idle) as r:
                assert r.status == 404
            # a long poll is activity too: a consumer waiting in Accept-Wait (10 s, capped at
            # max_accept_wait = 3 s) longer than its 1 s timeout stays
            t0 = time.monotonic()
            got = await consume(s, n1, wait=10)
            assert got.status == 503, got
            assert 2.8 < time.monotonic() - t0 < 4.5
            await post(s, f"{base}/create", b"still here")
            assert (await consume(s, n1)).body == b"still here"

    run(go())


def test_selectors_on_queue_consumers(node, run):
    q = unique()

    async def go():
        base = f"{node.http_url}/queues/{q}"
        async with aiohttp.ClientSession() as s:
            _, n1 = await _consumer(s, base, selector="http_color = 'red'")
            await post(s, f"{base}/create", b"blue", headers={"color": "blue"})
            await post(s, f"{base}/create", b"red", headers={"color": "red"})
            got = await consume(s, n1)
            assert got.body == b"red"
            assert (await consume(s, got.next)).status == 503
            async with s.post(f"{base}/pull-consumers", data={"selector": "color = = 'x'"}) as r:
                assert r.status == 400
                assert (await r.text()).startswith("invalid selector: ")
            async with s.post(f"{base}/pull-consumers", data={"autoAck": "sometimes"}) as r:
                assert r.status == 400
            assert await drain(s, base) == [b"blue"]

    run(go())


def test_accept_wait_counts_from_arrival_for_polls_queued_on_one_consumer(node, run):
    """Three polls on one link with Accept-Wait 1: each answers after about its own second
    (before, they were served one after the other: after 1, 2 and 3 s)."""
    q = unique()

    async def go():
        base = f"{node.http_url}/queues/{q}"
        async with aiohttp.ClientSession() as s:
            _, n1 = await _consumer(s, base)
            t0 = time.monotonic()

            async def poll() -> tuple[int, float]:
                got = await consume(s, n1, wait=1)
                return got.status, time.monotonic() - t0

            answers = await asyncio.gather(poll(), poll(), poll())
            assert [status for status, _ in answers] == [503, 503, 503]
            assert all(0.8 < took < 1.7 for _, took in answers), answers

    run(go())


def test_stopping_answers_held_and_queued_polls_at_once(tmp_path, run):
    """SIGTERM with two polls held on one consumer (Accept-Wait 30): both answer 503 (or the
    connection closes) right away and the node stops quickly; the queued poll does not start
    a wait of its own."""
    node = NodeProcess(tmp_path, http=True).start()

    async def go() -> float:
        base = f"{node.http_url}/queues/{unique()}"
        async with aiohttp.ClientSession() as s:
            _, n1 = await _consumer(s, base)

            async def poll() -> int:
                try:
                    return (await consume(s, n1, wait=30)).status
                except aiohttp.ClientError:
                    return 0  # closed by the stopping server: fine too

            polls = [asyncio.ensure_future(poll()) for _ in range(2)]
            await asyncio.sleep(0.5)
            t0 = time.monotonic()
            rc = await asyncio.to_thread(node.stop, 10)
            took = time.monotonic() - t0
            statuses = await asyncio.wait_for(asyncio.gather(*polls), 5)
            assert rc == 0
            assert all(st in (503, 0) for st in statuses), statuses
            return took

    try:
        took = run(go())
        assert took < 2.0, f"stopping took {took:.1f}s"
    finally:
        node.stop()
