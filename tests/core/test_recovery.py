"""What survives a restart: durable messages, queues, subscriptions, delivery counts, schedules."""

from __future__ import annotations

import asyncio

from enginekit import Collector, make_engine, settle

from waystation.core.message import now_ms
from waystation.core.queue import MULTICAST


def test_durable_messages_in_durable_queues_survive_restart(run, tmp_path):
    async def go():
        eng = await make_engine(tmp_path)
        for i in range(5):
            fut = eng.send(
                eng.make_message("q", b"d%d" % i, {"k": i}, durable=True, priority=4 + i % 2)
            )
            assert fut is not None
            await fut
        eng.send(eng.make_message("q", b"transient"))
        await eng.stop()
        eng = await make_engine(tmp_path)
        msgs = list(eng.queue("q").browse())
        assert sorted(m.body for m in msgs) == [b"d0", b"d1", b"d2", b"d3", b"d4"]
        assert {m.properties["k"] for m in msgs} == {0, 1, 2, 3, 4}
        await eng.stop()

    run(go())


def test_acked_messages_do_not_come_back(run, tmp_path):
    async def go():
        eng = await make_engine(tmp_path)
        for i in range(4):
            await eng.send(eng.make_message("q", b"%d" % i, durable=True))
        c = Collector()
        sub = eng.subscribe("q", c, window=10)
        await settle()
        sub.consumer.ack(c.deliveries[0].tag)
        sub.consumer.ack(c.deliveries[2].tag)
        sub.consumer.nack(c.deliveries[1].tag)  # redelivered at once: its second delivery
        await settle()
        assert c.bodies == [b"0", b"1", b"2", b"3", b"1"]
        await eng.flush()
        await eng.stop()
        eng = await make_engine(tmp_path)
        c2 = Collector()
        eng.subscribe("q", c2, window=10)
        await settle()
        assert sorted(c2.bodies) == [b"1", b"3"]
        counts = {d.message.body: d.delivery_count for d in c2.deliveries}
        # deliveries before the stop count: 1 was delivered twice, 3 once (in flight at stop)
        assert counts == {b"1": 3, b"3": 2}
        await eng.stop()

    run(go())


def test_durable_subscription_survives_restart_and_collects_while_away(run, tmp_path):
    async def go():
        eng = await make_engine(tmp_path)
        c = Collector()
        sub = eng.subscribe("news", c, routing=MULTICAST, durable_name="app.news", auto_ack=True)
        eng.unsubscribe(sub)  # detach, keep the subscription
        await eng.send(eng.make_message("news", b"while-away", durable=True), routing=MULTICAST)
        await eng.stop()
        eng = await make_engine(tmp_path)
        assert eng.queue("app.news") is not None
        await eng.send(eng.make_message("news", b"after-restart", durable=True), routing=MULTICAST)
        c2 = Collector()
        eng.subscribe("news", c2, routing=MULTICAST, durable_name="app.news", auto_ack=True)
        await settle()
        assert c2.bodies == [b"while-away", b"after-restart"]
        await eng.stop()

    run(go())


def test_scheduled_message_survives_restart(run, tmp_path):
    async def go():
        eng = await make_engine(tmp_path)
        await eng.send(eng.make_message("q", b"later", durable=True, scheduled=now_ms() + 400))
        await eng.stop()
        eng = await make_engine(tmp_path)
        c = Collector()
        eng.subscribe("q", c, auto_ack=True)
        await settle()
        assert c.bodies == []
        await asyncio.sleep(0.6)
        assert c.bodies == [b"later"]
        await eng.stop()

    run(go())


def test_non_durable_queue_and_messages_do_not_survive(run, tmp_path):
    async def go():
        eng = await make_engine(tmp_path)
        eng.create_queue("volatile", durable=False)
        eng.send(eng.make_message("volatile", b"x", durable=True))
        await eng.stop()
        eng = await make_engine(tmp_path)
        assert eng.queue("volatile") is None
        await eng.stop()

    run(go())


def test_transaction_is_atomic_on_disk(run, tmp_path):
    async def go():
        eng = await make_engine(tmp_path)
        tx = eng.begin()
        for i in range(3):
            eng.send(eng.make_message("q", b"%d" % i, durable=True), tx=tx)
        fut = eng.commit(tx)
        assert fut is not None
        await fut
        await eng.stop()
        eng = await make_engine(tmp_path)
        assert eng.queue("q").depth == 3
        await eng.stop()

    run(go())
