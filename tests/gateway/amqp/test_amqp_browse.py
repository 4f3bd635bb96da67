"""Browsing receivers, pre-settled receivers under credit and the modified outcome's
undeliverable-here, in process (a proton engine client, a fake link, an engine)."""

from __future__ import annotations

import asyncio

from amqpkit import Client, in_engine
from proton import Delivery, Endpoint, Message, Terminus


async def _fill(c, address, n, **props):
    snd = c.sender(address, name=f"fill-{address}")
    await c.pump()
    sent = [
        c.send(snd, Message(body=f"m{i}", properties={"n": i, **props}), tag=str(i))
        for i in range(n)
    ]
    await c.pump()
    assert [d.remote_state for d in sent] == [Delivery.ACCEPTED] * n, snd.remote_condition
    snd.close()
    await c.pump()


def _browser(c, address, name="b", selector=None):
    from proton import Described, symbol

    rcv = c.ssn.receiver(name)
    rcv.source.address = address
    rcv.source.distribution_mode = Terminus.DIST_MODE_COPY
    if selector is not None:
        f = {symbol("sel"): Described(symbol("apache.org:selector-filter:string"), selector)}
        rcv.source.filter.put_dict(f)
    rcv.target.address = name
    rcv.open()
    return rcv


async def _take_all(c, address, name="taker"):
    rcv = c.receiver(address, name=name)
    rcv.flow(100)
    await c.pump()
    got = c.received(rcv)
    for d, _ in got:
        d.update(Delivery.ACCEPTED)
        d.settle()
    await c.pump()
    return [m.body for _, m in got]


def test_browsing_copies_within_credit_drains_then_stays_quiet(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        await _fill(c, "/queue/br", 5)
        rcv = _browser(c, "/queue/br")
        rcv.flow(2)
        await c.pump()
        assert rcv.state & Endpoint.REMOTE_ACTIVE
        assert rcv.remote_source.distribution_mode == Terminus.DIST_MODE_COPY
        got = c.received(rcv)
        assert [m.body for _, m in got] == ["m0", "m1"]
        assert all(d.settled for d, _ in got)  # pre-settled copies
        assert [m.delivery_count for _, m in got] == [0, 0]
        rcv.drain(10)
        await c.pump()
        assert [m.body for _, m in c.received(rcv)] == ["m2", "m3", "m4"]
        assert rcv.credit == 0 and not rcv.draining()  # the end: drain echoed, credit back
        await _fill(c, "/queue/br", 1)  # arrives after the snapshot
        rcv.flow(5)
        await c.pump()
        assert c.received(rcv) == [] and rcv.state & Endpoint.REMOTE_ACTIVE
        assert await _take_all(c, "/queue/br") == ["m0", "m1", "m2", "m3", "m4", "m0"]

    in_engine(run, go)


def test_a_large_browse_goes_out_in_batches_and_waits_while_writing_is_paused(run):
    async def go(engine):
        from waystation.gateway.amqp.browser import BATCH

        c = Client(engine)
        c.open()
        await _fill(c, "/queue/big", BATCH * 2 + 10)
        c.server.pause_writing()
        rcv = _browser(c, "/queue/big")
        rcv.flow(10_000)
        await c.pump()
        assert rcv.state & Endpoint.REMOTE_ACTIVE and c.received(rcv) == []
        c.server.resume_writing()
        await c.pump(rounds=60)
        got = [m.properties["n"] for _, m in c.received(rcv)]
        assert got == list(range(BATCH * 2 + 10))

    in_engine(run, go)


def test_browsing_with_a_selector_and_refusals(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        await _fill(c, "/queue/bs", 4)
        sel = _browser(c, "/queue/bs", name="sel", selector="n >= 2")
        missing = _browser(c, "/queue/no-such-queue", name="missing")
        topic = _browser(c, "/topic/bt", name="topic")
        sel.flow(10)
        await c.pump()
        assert [m.body for _, m in c.received(sel)] == ["m2", "m3"]
        assert missing.remote_condition.name == "amqp:not-found"
        assert topic.remote_condition.name == "amqp:not-found"
        assert c.conn.state & Endpoint.REMOTE_ACTIVE

    in_engine(run, go)


def test_browsing_needs_browse_permission(run):
    async def go(engine):
        from waystation.core.security import Permission, SecurityManager, User

        engine.security = SecurityManager(
            enabled=True,
            users={
                "app": User("app", lambda p: p == "a", frozenset({"rw"})),
                "peek": User("peek", lambda p: p == "p", frozenset({"peek"})),
            },
            permissions={
                "#": {
                    Permission.SEND: frozenset({"rw"}),
                    Permission.CREATE_DURABLE_QUEUE: frozenset({"rw"}),
                    Permission.BROWSE: frozenset({"peek"}),
                }
            },
        )
        app = Client(engine, user="app", password="a")
        app.open()
        await _fill(app, "/queue/bp", 2)
        no = _browser(app, "/queue/bp", name="no")
        await app.pump()
        assert no.remote_condition.name == "amqp:unauthorized-access"
        peek = Client(engine, user="peek", password="p", container="peek")
        peek.open()
        yes = _browser(peek, "/queue/bp", name="yes")
        yes.flow(5)
        for _ in range(100):  # the login check runs off the loop: slow on a busy machine
            await peek.pump()
            if yes.queued >= 2:
                break
        assert [m.body for _, m in peek.received(yes)] == ["m0", "m1"]

    in_engine(run, go)


def test_presettled_receiver_uses_credit_and_a_drop_redelivers_nothing(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        await _fill(c, "/queue/ps", 5)
        rcv = c.receiver("/queue/ps", presettled=True)
        rcv.flow(2)
        await c.pump()
        got = c.received(rcv)
        assert [m.body for _, m in got] == ["m0", "m1"]
        assert all(d.settled for d, _ in got) and rcv.credit == 0
        rcv.drain(10)
        await c.pump()
        assert [m.body for _, m in c.received(rcv)] == ["m2", "m3", "m4"]
        assert not rcv.draining()
        rcv.flow(1)
        await c.pump()
        p = Client(engine, container="producer")
        p.open()
        snd = p.sender("/queue/ps", name="late")
        await p.pump()
        p.send(snd, Message(body="late"), settle=True)
        p.send(snd, Message(body="later"), settle=True)
        n = p.transport.pending()
        p.server.data_received(p.transport.peek(n))
        q = engine.queue("ps")
        for _ in range(10):  # loop turns until "late" is delivered, checked at that turn
            if q.depth < 2:
                break
            await asyncio.sleep(0)
        assert (q.depth, q.in_flight) == (1, 0)  # "late" is settled in the core as it goes
        c.server.connection_lost()  # dropped in the same turn: nothing comes back
        c2 = Client(engine, container="client-2")
        c2.open()
        assert await _take_all(c2, "/queue/ps") == ["later"]

    in_engine(run, go)


def test_modified_undeliverable_here_counts_an_attempt(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        await _fill(c, "/queue/uh", 3)
        rcv = c.receiver("/queue/uh")
        rcv.flow(3)
        await c.pump()
        (d0, _), (d1, _), (d2, _) = c.received(rcv)
        d0.local.undeliverable = True  # not here, not failed: still a counted attempt
        d0.update(Delivery.MODIFIED)
        d0.settle()
        d1.update(Delivery.MODIFIED)  # neither flag: released
        d1.settle()
        d2.local.failed = True
        d2.local.undeliverable = True
        d2.update(Delivery.MODIFIED)
        d2.settle()
        await c.pump()
        rcv.flow(10)
        await c.pump()
        again = {m.body: m.delivery_count for _, m in c.received(rcv)}
        assert again == {"m0": 1, "m1": 0, "m2": 1}

    in_engine(run, go)
