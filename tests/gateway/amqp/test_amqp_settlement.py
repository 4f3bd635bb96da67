"""Unsettled durable transfers are answered from the store's futures, not before: a journal
whose writes the test finishes by hand stands in for the disk."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

from amqpkit import Client
from proton import Delivery, Message

from waystation.core.engine import Engine
from waystation.core.store.api import Op, Recovered, RecoveryReport, StoreError

N = 40


class HeldJournal:
    """A journal that persists nothing and finishes each sync write when the test says."""

    def __init__(self) -> None:
        self.held: list[asyncio.Future[None]] = []
        self.ops: list[Sequence[Op]] = []  # what each held write carries

    def open(self) -> Recovered:
        return Recovered({}, RecoveryReport())

    def write(self, ops: Sequence[Op], sync: bool) -> asyncio.Future[None] | None:
        if not sync:
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.held.append(fut)
        self.ops.append(ops)
        return fut

    def write_of(self, body: bytes) -> asyncio.Future[None]:
        """The held write that stores the message with this (unique) body."""
        (fut,) = [
            f for f, ops in zip(self.held, self.ops, strict=True) for op in ops if body in op.data
        ]
        return fut

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        for f in self.held:
            if not f.done():
                f.cancel()

    def stats(self) -> dict[str, int]:
        return {}


def held_engine(run, test) -> None:
    async def go() -> None:
        journal = HeldJournal()
        eng = Engine(journal=journal, bindings=HeldJournal())
        await eng.start()
        try:
            await test(eng, journal)
        finally:
            await eng.stop()

    run(go())


def _body(i: int) -> bytes:
    return b"<m%d>" % i


def _burst(c: Client, snd, n: int) -> list[Delivery]:
    return [c.send(snd, Message(body=_body(i), durable=True), tag=str(i)) for i in range(n)]


def test_accepted_only_once_each_write_is_done_in_any_order(run):
    async def go(engine, journal):
        c = Client(engine)
        c.open()
        snd = c.sender("/queue/q")
        await c.pump()
        sent = _burst(c, snd, N)
        await c.pump()
        writes = [journal.write_of(_body(i)) for i in range(N)]
        assert all(d.remote_state == 0 for d in sent)  # nothing answered before the disk
        order = list(range(len(journal.held)))
        random.Random(7).shuffle(order)
        for k, i in enumerate(order):
            journal.held[i].set_result(None)
            if k % 7 == 0 or k == len(order) - 1:
                await c.pump()
                for d, f in zip(sent, writes, strict=True):
                    if d.remote_state == Delivery.ACCEPTED:
                        assert f.done()  # accepted implies on disk
        assert [d.remote_state for d in sent] == [Delivery.ACCEPTED] * N
        assert engine.queue("q").depth == N

    held_engine(run, go)


def test_a_store_failure_rejects_what_it_failed_and_accepts_the_rest(run):
    # one write per message here, unless the node gathers a burst into one batch; either
    # way a delivery is rejected exactly when its own write failed
    async def go(engine, journal):
        c = Client(engine)
        c.open()
        snd = c.sender("/queue/q")
        await c.pump()
        sent = _burst(c, snd, 10)
        await c.pump()
        writes = [journal.write_of(_body(i)) for i in range(10)]
        held = journal.held
        for i, f in enumerate(held):
            if i % 2 or len(held) == 1:
                f.set_exception(StoreError("disk full"))
            else:
                f.set_result(None)
        await c.pump()
        for d, f in zip(sent, writes, strict=True):
            if f.exception() is not None:
                assert d.remote_state == Delivery.REJECTED
                assert d.remote.condition.name == "amqp:internal-error"
                assert "disk full" in d.remote.condition.description
            else:
                assert d.remote_state == Delivery.ACCEPTED

    held_engine(run, go)


def test_writes_finishing_after_the_link_is_gone_are_dropped_quietly(run):
    async def go(engine, journal):
        c = Client(engine)
        c.open()
        snd = c.sender("/queue/q")
        await c.pump()
        _burst(c, snd, 5)
        await c.pump()
        snd.close()
        await c.pump()
        for f in journal.held:
            f.set_result(None)
        await c.pump()
        # the connection carries on: a new link sends and is answered
        snd2 = c.sender("/queue/q", name="s2")
        await c.pump()
        d = c.send(snd2, Message(body="after", durable=True), tag="a")
        await c.pump()
        journal.held[-1].set_result(None)
        await c.pump()
        assert d.remote_state == Delivery.ACCEPTED
        assert not c.link.closed

    held_engine(run, go)


def test_bursts_are_accepted_in_order_each_once_its_own_write_is_done(run):
    async def go(engine, journal):
        c = Client(engine)
        c.open()
        snd = c.sender("/queue/q")
        await c.pump()
        bursts = []
        for b in range(4):  # one read each: one journal batch each
            bursts.append(
                [
                    c.send(snd, Message(body=_body(10 * b + i), durable=True), tag=f"{b}.{i}")
                    for i in range(5)
                ]
            )
            await c.pump()
        writes = [journal.write_of(_body(10 * b)) for b in range(4)]
        assert len(set(map(id, writes))) == 4
        states = lambda: [{d.remote_state for d in ds} for ds in bursts]  # noqa: E731
        writes[2].set_result(None)
        await c.pump()
        assert states() == [{0}] * 4  # the oldest is not on disk yet: nothing answered
        writes[0].set_result(None)
        await c.pump()
        assert states() == [{Delivery.ACCEPTED}, {0}, {0}, {0}]
        writes[1].set_result(None)
        writes[3].set_exception(StoreError("disk full"))
        await c.pump()
        assert states() == [{Delivery.ACCEPTED}] * 3 + [{Delivery.REJECTED}]

    held_engine(run, go)
