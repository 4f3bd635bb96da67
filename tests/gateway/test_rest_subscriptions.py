"""Pull subscriptions on topics: temporary ones, durable ones that survive a restart and are
re-created by name, selectors, deletion and idle timeouts."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from nodekit import NodeProcess
from restkit import consume, post
from stompkit import connect, unique


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(
        tmp_path_factory.mktemp("rest-subs"),
        http='[acceptors.http.rest]\nsession_timeout_task_interval = "100ms"',
    ).start()
    yield n
    n.stop()


async def _subscribe(s: aiohttp.ClientSession, topic_url: str, status: int = 201, **form: str):
    async with s.post(f"{topic_url}/pull-subscriptions", data=form) as r:
        assert r.status == status, (r.status, await r.text())
        nxt = r.headers.get("msg-consume-next") or r.headers.get("msg-acknowledge-next")
        return r.headers["Location"], nxt


async def _all(s: aiohttp.ClientSession, nxt: str) -> tuple[list[bytes], str]:
    out: list[bytes] = []
    while True:
        got = await consume(s, nxt)
        assert got.next is not None
        if got.status == 503:
            return out, got.next
        assert got.status == 200, got
        out.append(got.body)
        nxt = got.next


def test_temporary_subscriptions_each_get_every_message(node, run):
    t = unique("t")

    async def go():
        base = f"{node.http_url}/topics/{t}"
        async with aiohttp.ClientSession() as s:
            a, na = await _subscribe(s, base)
            b, nb = await _subscribe(s, base, selector="http_n NOT IN ('0', '1')")
            assert "/pull-subscriptions/auto-ack/" in a
            for i in range(3):
                await post(s, f"{base}/create", f"m{i}", headers={"n": str(i)})
            got_a, na = await _all(s, na)
            got_b, nb = await _all(s, nb)
            assert got_a == [b"m0", b"m1", b"m2"]
            assert got_b == [b"m2"]
            async with s.delete(a) as r:
                assert r.status == 204
            await post(s, f"{base}/create", b"m3", headers={"n": "3"})
            assert (await _all(s, nb))[0] == [b"m3"]
            async with s.post(na) as r:
                assert r.status == 404

    run(go())


def test_durable_subscription_survives_restart_and_is_recreated_by_name(node, run):
    t = unique("t")
    name = unique("sub")
    state: dict[str, str] = {}

    async def before():
        base = f"{node.http_url}/topics/{t}"
        async with aiohttp.ClientSession() as s:
            loc, n1 = await _subscribe(s, base, durable="true", name=name)
            assert loc == f"{base}/pull-subscriptions/auto-ack/{name}"
            # the same name again while it is live: the same subscription, 200 like GET
            loc2, again = await _subscribe(s, base, 200, durable="true", name=name)
            assert (loc2, again) == (loc, n1)
            for i in range(3):
                await post(s, f"{base}/create", f"m{i}", params={"durable": "true"})
            got = await consume(s, n1)
            assert got.body == b"m0"
            state["next"] = got.next

    run(before())
    node.restart()
    conn, _ = connect(node.stomp_port)
    conn.send(f"/topic/{t}", "while nobody listened", headers={"persistent": "true"})
    conn.disconnect()

    async def after():
        async with aiohttp.ClientSession() as s:
            # the old link: the subscription is re-attached, 412 with a fresh link
            got = await consume(s, state["next"])
            assert got.status == 412
            assert got.next is not None and got.next.endswith(f"/{name}/consume-next-1")
            rest, _ = await _all(s, got.next)
            assert rest == [b"m1", b"m2", b"while nobody listened"]

    run(after())


def test_manual_ack_durable_subscription_and_delete(node, run):
    t = unique("t")
    name = unique("sub")

    async def go():
        base = f"{node.http_url}/topics/{t}"
        async with aiohttp.ClientSession() as s:
            loc, n1 = await _subscribe(s, base, durable="true", name=name, autoAck="false")
            assert loc.endswith(f"/pull-subscriptions/acknowledged/{name}")
            await post(s, f"{base}/create", b"x")
            got = await consume(s, n1)
            assert got.body == b"x"
            async with s.post(
                got.headers["msg-acknowledgement"], data={"acknowledge": "true"}
            ) as r:
                assert r.status == 200
            # DELETE unsubscribes for good: later messages are not kept for the name
            async with s.delete(loc) as r:
                assert r.status == 204
            await post(s, f"{base}/create", b"after delete")
            _, n1 = await _subscribe(s, base, durable="true", name=name)
            assert (await consume(s, n1)).status == 503
            # a name taken by an ordinary queue is refused
            q = unique()
            await post(s, f"{node.http_url}/queues/{q}/create", b"q")
            async with s.post(
                f"{base}/pull-subscriptions", data={"durable": "true", "name": q}
            ) as r:
                assert r.status == 409
            async with s.post(
                f"{base}/pull-subscriptions", data={"durable": "true", "name": "a/b"}
            ) as r:
                assert r.status == 400

    run(go())


def test_idle_timeout_and_delete_when_idle(node, run):
    t = unique("t")
    kept, dropped = unique("kept"), unique("dropped")

    async def go():
        base = f"{node.http_url}/topics/{t}"
        async with aiohttp.ClientSession() as s:
            k, _ = await _subscribe(s, base, durable="true", name=kept, **{"idle-timeout": "300"})
            d, _ = await _subscribe(
                s, base, durable="true", name=dropped,
                **{"idle-timeout": "300", "delete-when-idle": "true"},
            )  # fmt: skip
            tmp, _ = await _subscribe(s, base, **{"idle-timeout": "300"})
            await asyncio.sleep(1.0)  # 300 ms idle, the reaper looks every 100 ms
            for url in (d, tmp):  # (a GET is activity: it would have kept them)
                async with s.get(url) as r:
                    assert r.status == 404, url
            await post(s, f"{base}/create", b"kept for the durable one")
            # the reaped durable consumer comes back by name with what it kept meanwhile
            k2, n = await _subscribe(s, base, durable="true", name=kept)
            assert k2 == k
            assert (await consume(s, n)).body == b"kept for the durable one"
            _, n = await _subscribe(s, base, durable="true", name=dropped)
            assert (await consume(s, n)).status == 503
            async with s.post(f"{base}/pull-subscriptions", data={"idle-timeout": "x"}) as r:
                assert r.status == 400

    run(go())
