"""Many outcomes in one read: accepts mixed with a release, or followed by the connection's
close, settle in the core as the client sent them (the accepts of a read may be settled
together, never after what came behind them)."""

from __future__ import annotations

from amqpkit import Client, in_engine
from proton import Delivery, Message


async def _five_delivered(engine):
    c = Client(engine)
    c.open()
    snd = c.sender("/queue/q")
    await c.pump()
    for i in range(5):
        c.send(snd, Message(body=f"m{i}"), tag=f"t{i}")
    await c.pump()
    rcv = c.receiver("/queue/q")
    rcv.flow(5)
    await c.pump()
    got = c.received(rcv)
    assert [m.body for _, m in got] == [f"m{i}" for i in range(5)]
    return c, rcv, [d for d, _ in got]


def test_accepts_and_a_release_in_one_read_keep_their_meaning(run):
    async def go(engine):
        c, rcv, ds = await _five_delivered(engine)
        for i, d in enumerate(ds):  # all five outcomes and new credit go in one read
            d.update(Delivery.RELEASED if i == 2 else Delivery.ACCEPTED)
            d.settle()
        rcv.flow(5)
        await c.pump()
        again = c.received(rcv)
        assert [m.body for _, m in again] == ["m2"]  # the released one, and only it
        q = engine.queue("q")
        assert q is not None and q.messages_acked == 4 and q.depth == 0

    in_engine(run, go)


def test_accepts_sent_just_before_the_close_are_not_redelivered(run):
    async def go(engine):
        c, _rcv, ds = await _five_delivered(engine)
        for d in ds[:3]:
            d.update(Delivery.ACCEPTED)
            d.settle()
        c.conn.close()  # in the same read as the accepts
        await c.pump()
        assert c.server.closed or c.link.closed
        q = engine.queue("q")
        assert q is not None and q.messages_acked == 3 and q.depth == 2
        c2 = Client(engine, container="client-2")
        c2.open()
        rcv2 = c2.receiver("/queue/q")
        rcv2.flow(10)
        await c2.pump()
        assert [m.body for _, m in c2.received(rcv2)] == ["m3", "m4"]

    in_engine(run, go)
