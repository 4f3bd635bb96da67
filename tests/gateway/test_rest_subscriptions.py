"""Pull subscriptions on topics: temporary ones, durable ones that survive a restart and are
re-created by name (keeping their selector), selectors, deletion, idle timeouts, and the
durable queues they must never reach (push registrations', STOMP clients')."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from nodekit import NodeProcess
from restkit import PUSH_LOOPBACK, Sink, consume, post, register, registration
from stompkit import connect, unique


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(
        tmp_path_factory.mktemp("rest-subs"),
        http=f'[acceptors.http.rest]\nsession_timeout_task_interval = "100ms"\n{PUSH_LOOPBACK}',
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


def test_recreating_a_durable_subscription_keeps_its_selector_and_messages(node, run):
    """Re-created by name without a selector, it is the same subscription (before, the
    engine saw a changed selector and recreated the queue, dropping what it kept); another
    selector is 409, not a silent reset."""
    t, name = unique("t"), unique("sub")

    async def go():
        base = f"{node.http_url}/topics/{t}"
        async with aiohttp.ClientSession() as s:

            async def refused(selector: str) -> None:
                form = {"durable": "true", "name": name, "selector": selector}
                async with s.post(f"{base}/pull-subscriptions", data=form) as r:
                    text = await r.text()
                    assert r.status == 409, text
                    assert "exists with selector \"http_k = 'a'\"" in text, text
                    assert "DELETE it first" in text

            form = {"durable": "true", "name": name, "idle-timeout": "300"}
            await _subscribe(s, base, selector="http_k = 'a'", **form)
            for k in ("a", "b", "a"):
                await post(s, f"{base}/create", f"kept-{k}", headers={"k": k})
            await asyncio.sleep(1.0)  # the consumer is reaped; the subscription stays
            await refused("http_k = 'b'")
            loc, nxt = await _subscribe(s, base, durable="true", name=name)
            got, nxt = await _all(s, nxt)
            assert got == [b"kept-a", b"kept-a"]
            await post(s, f"{base}/create", b"b again", headers={"k": "b"})
            assert (await consume(s, nxt)).status == 503  # the selector still applies
            await refused("http_k = 'b'")  # live now
            await _subscribe(s, base, 200, durable="true", name=name, selector="http_k = 'a'")
            async with s.delete(loc) as r:
                assert r.status == 204
            # deleted: a new subscription may take the name with any selector
            await _subscribe(s, base, durable="true", name=name, selector="http_k = 'b'")

    run(go())


def test_pull_subscription_urls_reach_only_subscriptions_rest_made(node, run):
    """A push registration's queue ({topic}.push-{id}, the id is in its Location) and a
    STOMP durable subscription are not pull subscriptions: their URLs are 404 and their names
    409, so nobody deletes or drains them through REST.  A push registration whose queue is
    deleted anyway (here by a STOMP client) says it is disabled."""
    t = unique("t")
    stomp_name = unique("stomp")
    conn, lst = connect(node.stomp_port, **{"client-id": "c1"})
    plain, plain_lst = connect(node.stomp_port)  # no client-id: durable names as given

    async def go():
        sink = await Sink().start()
        base = f"{node.http_url}/topics/{t}"
        try:
            async with aiohttp.ClientSession() as s:
                doc = registration(f"{sink.url}/p", root="push-topic-registration", durable="true")
                loc = await register(s, f"{base}/push-subscriptions", doc)
                push_queue = f"{t}.push-{loc.rsplit('/', 1)[1]}"
                await asyncio.to_thread(
                    conn.subscribe, f"/topic/{t}", id="d",
                    headers={"durable-subscription-name": stomp_name, "receipt": "r1"},
                )  # fmt: skip
                await asyncio.to_thread(lst.wait_receipt, "r1")
                for queue in (push_queue, f"c1.{stomp_name}"):
                    for mode in ("auto-ack", "acknowledged"):
                        url = f"{base}/pull-subscriptions/{mode}/{queue}"
                        async with s.delete(url) as r:
                            assert r.status == 404, (url, await r.text())
                        async with s.get(url) as r:
                            assert r.status == 404
                    next_url = f"{base}/pull-subscriptions/auto-ack/{queue}/consume-next-1"
                    async with s.post(next_url) as r:
                        assert r.status == 404
                    async with s.post(
                        f"{base}/pull-subscriptions", data={"durable": "true", "name": queue}
                    ) as r:
                        assert r.status == 409, await r.text()
                    async with s.head(f"{node.http_url}/queues/{queue}") as r:
                        assert r.status == 404  # a subscription queue is not a queue
                await post(s, f"{base}/create", b"for both", params={"durable": "true"})
                assert (await sink.wait_hits(1))[0].body == b"for both"
                got = await asyncio.to_thread(lst.wait_messages, 1)
                assert got[0].body == "for both"
                async with s.get(loc) as r:
                    assert "<enabled>true</enabled>" in await r.text()
                # the push queue deleted under the registration: it is disabled, and says so
                await asyncio.to_thread(
                    plain.subscribe, f"/topic/{t}", id="p",
                    headers={"durable-subscription-name": push_queue, "receipt": "r2"},
                )  # fmt: skip
                await asyncio.to_thread(plain_lst.wait_receipt, "r2")
                await asyncio.to_thread(
                    plain.unsubscribe, "p",
                    headers={"durable-subscription-name": push_queue, "receipt": "r3"},
                )  # fmt: skip
                await asyncio.to_thread(plain_lst.wait_receipt, "r3")
                async with s.get(loc) as r:
                    assert "<enabled>false</enabled>" in await r.text()
                async with s.delete(loc) as r:
                    assert r.status == 204
        finally:
            await sink.stop()

    try:
        run(go())
    finally:
        conn.disconnect()
        plain.disconnect()
