"""Push registrations when things go wrong: a store that cannot be written, a registration
disabled and re-enabled, a dead endpoint with no retry wait, and REST-to-REST forwarding
through a link that refuses and cuts connections."""

from __future__ import annotations

import asyncio
import shutil
import time

import aiohttp
import psutil
import pytest
from nodekit import NodeProcess, free_port
from restkit import HTTP_PUSH_LOOPBACK, Sink, consume, drain, post, register, registration
from stompkit import unique
from wanproxy import WanProxy


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("rest-push-faults"), http=HTTP_PUSH_LOOPBACK).start()
    yield n
    n.stop()


async def _wait_log(node: NodeProcess, text: str, timeout: float = 5.0) -> str:
    end = time.monotonic() + timeout
    while text not in node.log():
        assert time.monotonic() < end, f"{text!r} not logged"
        await asyncio.sleep(0.05)
    return node.log()


async def _get(s: aiohttp.ClientSession, url: str) -> str:
    async with s.get(url) as r:
        assert r.status == 200, (r.status, await r.text())
        return await r.text()


def test_a_registration_that_cannot_be_stored_touches_nothing(tmp_path, run):
    """507, and the queue and its durable messages are left alone (the failed registration
    used to delete the queue it was made for); a registration that disables itself while
    the store is broken logs that its state was not saved; a durable pull subscription
    that cannot be recorded is 507 and leaves no queue."""
    node = NodeProcess(tmp_path, http=HTTP_PUSH_LOOPBACK).start()
    q, t = unique("victim"), unique("t")
    store = tmp_path / "data" / "rest-push"

    async def go():
        sink = await Sink(default=503).start()
        try:
            async with aiohttp.ClientSession() as s:
                base = f"{node.http_url}/queues/{q}"
                for i in range(3):
                    await post(s, f"{base}/create", f"m{i}", params={"durable": "true"})
                doc = registration(
                    f"{sink.url}/t", root="push-topic-registration", durable="true",
                    disableOnFailure="true", maxRetries="2", retryWaitMillis="100",
                )  # fmt: skip
                loc = await register(s, f"{node.http_url}/topics/{t}/push-subscriptions", doc)
                shutil.rmtree(store)
                store.write_text("a file where the push store should be")
                doc = registration(f"{sink.url}/victim", durable="true")
                async with s.post(f"{base}/push-consumers", data=doc) as r:
                    assert r.status == 507
                    assert "registration not stored" in await r.text()
                await post(s, f"{node.http_url}/topics/{t}/create", b"undeliverable")
                await sink.wait_hits(2)
                rid = loc.rsplit("/", 1)[1]
                await _wait_log(node, f"registration {rid} (enabled=False) not saved")
                assert "<enabled>false</enabled>" in await _get(s, loc)
                assert [h.path for h in sink.hits] == ["/t", "/t"]  # nothing for /victim
                assert await drain(s, base) == [b"m0", b"m1", b"m2"]
                # a durable pull subscription that cannot be recorded is not made either
                subs = tmp_path / "data" / "rest-subscriptions"
                subs.write_text("a file where the folder should be")
                form = {"durable": "true", "name": unique("sub")}
                for status in (507, 507):  # the second time too: nothing was left behind
                    async with s.post(f"{node.http_url}/topics/{t}/pull-subscriptions",
                                      data=form) as r:  # fmt: skip
                        assert r.status == status, await r.text()
                        assert "subscription not stored" in await r.text()
                subs.unlink()
                async with s.post(f"{node.http_url}/topics/{t}/pull-subscriptions", data=form) as r:
                    assert r.status == 201
        finally:
            await sink.stop()

    try:
        run(go())
    finally:
        node.stop()


def test_a_disabled_durable_topic_registration_keeps_its_queue_and_is_re_enabled(node, run):
    """Disabled, its subscription keeps what is published; POSTing its document again (with
    its id, as GET shows it) enables it: same Location, 200, the kept messages are pushed."""
    t = unique("t")

    async def go():
        sink = await Sink(default=503).start()
        try:
            async with aiohttp.ClientSession() as s:
                factory = f"{node.http_url}/topics/{t}/push-subscriptions"
                doc = registration(
                    f"{sink.url}/hook", root="push-topic-registration", durable="true",
                    disableOnFailure="true", maxRetries="2", retryWaitMillis="100",
                    authentication="<basic-auth><username>u</username><password>pw</password></basic-auth>",
                )  # fmt: skip
                loc = await register(s, factory, doc)
                rid = loc.rsplit("/", 1)[1]
                stored = node.workdir / "data" / "rest-push" / f"{rid}.xml"
                await post(
                    s, f"{node.http_url}/topics/{t}/create", b"m1", params={"durable": "true"}
                )
                await sink.wait_hits(2)
                end = time.monotonic() + 5
                while b"<enabled>false</enabled>" not in stored.read_bytes():
                    assert time.monotonic() < end, stored.read_bytes()
                    await asyncio.sleep(0.05)
                shown = await _get(s, loc)
                assert "<enabled>false</enabled>" in shown and "pw" not in shown
                await post(s, f"{node.http_url}/topics/{t}/create", b"m2")
                await asyncio.sleep(0.3)
                assert len(sink.hits) == 2  # disabled: kept, not pushed
                sink.default = 200
                assert await register(s, factory, shown, status=200) == loc
                hits = await sink.wait_hits(4)
                assert [h.body for h in hits[2:]] == [b"m1", b"m2"]
                assert hits[3].headers["Authorization"] == aiohttp.encode_basic_auth("u", "pw")
                assert "<enabled>true</enabled>" in await _get(s, loc)
                assert b"<enabled>true</enabled>" in stored.read_bytes()
                # an id of another destination's registration does not replace it
                other = await register(
                    s, f"{node.http_url}/topics/{unique('t')}/push-subscriptions", shown
                )
                assert other.rsplit("/", 1)[1] != rid
                for url in (loc, other):
                    async with s.delete(url) as r:
                        assert r.status == 204
                assert not stored.exists()
        finally:
            await sink.stop()

    run(go())


def test_retry_wait_zero_neither_spins_nor_floods_the_log(node, run):
    """retryWaitMillis="0" waits 100 ms between attempts and backs off between rounds;
    the log says when a registration starts failing, not each attempt."""
    q1, q2 = unique(), unique()
    proc = psutil.Process(node.proc.pid)

    async def go():
        sink = await Sink(default=503).start()
        try:
            async with aiohttp.ClientSession() as s:
                fast = registration(f"{sink.url}/x", maxRetries="2", retryWaitMillis="0")
                loc1 = await register(s, f"{node.http_url}/queues/{q1}/push-consumers", fast)
                dead = registration(
                    f"http://127.0.0.1:{free_port()}/x", maxRetries="2", retryWaitMillis="0"
                )
                loc2 = await register(s, f"{node.http_url}/queues/{q2}/push-consumers", dead)
                cpu0 = sum(proc.cpu_times()[:2])
                await post(s, f"{node.http_url}/queues/{q1}/create", b"a")
                await post(s, f"{node.http_url}/queues/{q2}/create", b"b")
                await asyncio.sleep(2.0)
                cpu = sum(proc.cpu_times()[:2]) - cpu0
                hits = list(sink.hits)
                gaps = [b.at - a.at for a, b in zip(hits, hits[1:], strict=False)]
                assert 4 <= len(hits) <= 10, len(hits)
                assert min(gaps) >= 0.09, gaps
                assert max(gaps) >= 0.35, gaps  # the pause between rounds grows
                assert cpu < 0.6, f"{cpu:.2f}s of CPU in 2s"
                log = node.log()
                for loc in (loc1, loc2):
                    rid = loc.rsplit("/", 1)[1]
                    lines = [line for line in log.splitlines() if rid in line]
                    assert len(lines) == 1 and "retrying" in lines[0], lines
                sink.default = 200
                await sink.wait_hits(len(sink.hits) + 1)
                await _wait_log(node, f"push {loc1.rsplit('/', 1)[1]}: delivering again")
                for loc in (loc1, loc2):
                    async with s.delete(loc) as r:
                        assert r.status == 204
        finally:
            await sink.stop()

    run(go())


def test_rel_destination_is_exactly_once_through_refusals_and_cuts(node, tmp_path, run):
    """The remote REST server is reached through a link that first refuses connections,
    then has latency and is cut again and again while messages flow: each message arrives
    exactly once, in order.  Each cut comes just after a message reached the remote, so it
    mostly kills that message's 201 on its way back: the resend carries the same duplicate id
    and the remote drops it."""
    other = NodeProcess(tmp_path / "other", http=HTTP_PUSH_LOOPBACK).start()
    q, inbox = unique(), unique("inbox")
    n = 20

    async def go(wan: WanProxy):
        async with aiohttp.ClientSession() as s:
            target = f"http://127.0.0.1:{wan.port}/queues/{inbox}"
            doc = registration(target, rel="destination", retryWaitMillis="50", maxRetries="1000")
            await asyncio.to_thread(wan.refuse)
            await register(s, f"{node.http_url}/queues/{q}/push-consumers", doc)
            for i in range(n // 2):
                await post(s, f"{node.http_url}/queues/{q}/create", f"m{i}")
            await asyncio.sleep(0.5)
            await asyncio.to_thread(wan.refuse, False)
            await asyncio.to_thread(wan.set_latency, 0.02, 0.02)
            for i in range(n // 2, n):
                await post(s, f"{node.http_url}/queues/{q}/create", f"m{i}")

            got: list[bytes] = []
            async with s.post(f"{other.http_url}/queues/{inbox}/pull-consumers") as r:
                nxt = r.headers["msg-consume-next"]
            t0 = time.monotonic()
            while len(got) < n:
                assert time.monotonic() - t0 < 30, got
                m = await consume(s, nxt, wait=1)
                if m.status == 200:
                    got.append(m.body)
                    await asyncio.to_thread(wan.cut)
                nxt = m.next
            assert (await consume(s, nxt, wait=1.0)).status == 503  # no duplicate follows
            return got

    try:
        with WanProxy(target_port=other.http_port) as wan:
            got = run(go(wan))
            stats = wan.stats()
        assert got == [f"m{i}".encode() for i in range(n)]
        assert stats["refused"] > 0 and stats["connections_cut"] >= n // 2, stats
    finally:
        other.stop()


def test_dead_letter_reasons_are_engine_vocabulary():
    """One definition: waystation.core.reasons; bridges and REST use it, and REST imports no bridge."""
    import ast
    from pathlib import Path

    import waystation.bridges.reasons
    import waystation.core.postoffice
    import waystation.core.reasons
    import waystation.gateway.http.rest.push

    assert waystation.core.postoffice.NO_ROUTE is waystation.core.reasons.NO_ROUTE
    assert waystation.bridges.reasons.REMOTE_REJECTED is waystation.core.reasons.REMOTE_REJECTED
    assert (
        waystation.gateway.http.rest.push.REMOTE_REJECTED is waystation.core.reasons.REMOTE_REJECTED
    )
    rest = Path(waystation.gateway.http.rest.push.__file__).parent
    for path in rest.glob("*.py"):
        for stmt in ast.walk(ast.parse(path.read_text())):
            if isinstance(stmt, ast.ImportFrom | ast.Import):
                names = [stmt.module or ""] if isinstance(stmt, ast.ImportFrom) else []
                names += [a.name for a in stmt.names] if isinstance(stmt, ast.Import) else []
                assert not any(n.split(".")[:2] == ["waystation", "bridges"] for n in names), (
                    path,
                    names,
                )
