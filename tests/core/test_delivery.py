"""Delivery semantics: acks, redelivery, dead letters, expiry, priority, scheduling, groups,
last-value queues, browsing, consumer credit, selectors."""

from __future__ import annotations

import asyncio
import time

import pytest
from enginekit import Collector, make_engine, settle

from waystation.core.consumer import ConsumerError
from waystation.core.engine import QueueSpec
from waystation.core.message import (
    ACTUAL_EXPIRY,
    DEAD_LETTER_REASON,
    GROUP_ID,
    ORIGINAL_ADDRESS,
    ORIGINAL_QUEUE,
    now_ms,
)
from waystation.core.settings import AddressSettings


def test_nack_redelivers_then_dead_letters_with_reason(run):
    async def go():
        eng = await make_engine(
            None, {"work": AddressSettings(max_delivery_attempts=3, dead_letter_address="DLQ")}
        )
        c = Collector()
        sub = eng.subscribe("work", c)
        eng.send(eng.make_message("work", b"poison"))
        for attempt in range(1, 4):
            await settle()
            assert len(c.deliveries) == attempt
            d = c.deliveries[-1]
            assert d.delivery_count == attempt and d.redelivered == (attempt > 1)
            sub.consumer.nack(d.tag)
        await settle()
        assert len(c.deliveries) == 3
        dead = list(eng.queue("DLQ").browse())
        assert [m.body for m in dead] == [b"poison"]
        p = dead[0].properties
        assert (
            p[DEAD_LETTER_REASON] == "max-deliveries"
            and p[ORIGINAL_ADDRESS] == "work"
            and p[ORIGINAL_QUEUE] == "work"
        )
        assert eng.queue("work").depth == 0
        await eng.stop()

    run(go())


def test_redelivery_delay_with_multiplier_and_cap():
    from waystation.core.settings import SettingsRepository

    r = SettingsRepository(
        {
            "#": AddressSettings(
                redelivery_delay_ms=100, redelivery_multiplier=2.0, max_redelivery_delay_ms=300
            )
        }
    ).resolve("q")
    assert [r.redelivery_delay(n) for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.3, 0.3]


def test_redelivery_waits_for_the_delay(run):
    async def go():
        eng = await make_engine(None, {"slow": AddressSettings(redelivery_delay_ms=200)})
        c = Collector()
        sub = eng.subscribe("slow", c)
        eng.send(eng.make_message("slow", b"m"))
        await settle()
        t0 = time.monotonic()
        sub.consumer.nack(c.deliveries[0].tag)
        while len(c.deliveries) < 2:
            await asyncio.sleep(0.01)
        assert time.monotonic() - t0 >= 0.18
        await eng.stop()

    run(go())


def test_closing_a_consumer_returns_unacked_messages_in_order(run):
    async def go():
        eng = await make_engine(None)
        c1 = Collector()
        s1 = eng.subscribe("q", c1, window=10)
        for i in range(5):
            eng.send(eng.make_message("q", bytes([48 + i])))
        await settle()
        assert c1.bodies == [b"0", b"1", b"2", b"3", b"4"]
        s1.consumer.ack(c1.deliveries[0].tag)
        s1.consumer.close()
        c2 = Collector()
        eng.subscribe("q", c2, window=10)
        await settle()
        assert c2.bodies == [b"1", b"2", b"3", b"4"]
        assert all(d.redelivered for d in c2.deliveries)
        await eng.stop()

    run(go())


def test_cumulative_ack(run):
    async def go():
        eng = await make_engine(None)
        c = Collector()
        sub = eng.subscribe("q", c, window=100)
        for i in range(5):
            eng.send(eng.make_message("q", b"%d" % i))
        await settle()
        assert sub.consumer.ack_cumulative(c.deliveries[2].tag) == 3
        assert len(sub.consumer.in_flight) == 2
        with pytest.raises(ConsumerError):
            sub.consumer.ack(c.deliveries[0].tag)
        await eng.stop()

    run(go())


def test_expired_messages_go_to_the_expiry_address(run):
    async def go():
        eng = await make_engine(
            None, {"#": AddressSettings(expiry_address="Expired")}, expiry_scan_period=0.05
        )
        eng.send(eng.make_message("q", b"old", expiration=now_ms() + 50))
        eng.send(eng.make_message("q", b"fresh"))
        await asyncio.sleep(0.3)
        assert [m.body for m in eng.queue("q").browse()] == [b"fresh"]
        exp = list(eng.queue("Expired").browse())
        assert [m.body for m in exp] == [b"old"]
        assert exp[0].properties[ORIGINAL_ADDRESS] == "q" and ACTUAL_EXPIRY in exp[0].properties
        assert exp[0].expiration == 0
        await eng.stop()

    run(go())


def test_expired_message_is_not_delivered_and_expiry_delay_applies(run):
    async def go():
        eng = await make_engine(
            None, {"short": AddressSettings(expiry_delay_ms=30)}, expiry_scan_period=60
        )
        eng.send(eng.make_message("q", b"dead", expiration=now_ms() - 1))
        eng.send(eng.make_message("short", b"x"))
        assert next(iter(eng.queue("short").browse())).expiration > 0
        c = Collector()
        eng.subscribe("q", c, auto_ack=True)
        await settle()
        assert c.bodies == []
        await eng.stop()

    run(go())


def test_priority_order_fifo_within_a_priority(run):
    async def go():
        eng = await make_engine(None)
        for body, prio in ((b"l1", 1), (b"h1", 9), (b"n1", 4), (b"h2", 9), (b"l2", 1), (b"n2", 4)):
            eng.send(eng.make_message("q", body, priority=prio))
        c = Collector()
        eng.subscribe("q", c, auto_ack=True)
        await settle()
        assert c.bodies == [b"h1", b"h2", b"n1", b"n2", b"l1", b"l2"]
        await eng.stop()

    run(go())


def test_scheduled_delivery(run):
    async def go():
        eng = await make_engine(None)
        c = Collector()
        eng.subscribe("q", c, auto_ack=True)
        eng.send(eng.make_message("q", b"later", scheduled=now_ms() + 200))
        eng.send(eng.make_message("q", b"now"))
        await asyncio.sleep(0.05)
        assert c.bodies == [b"now"]
        await asyncio.sleep(0.3)
        assert c.bodies == [b"now", b"later"]
        await eng.stop()

    run(go())


def test_message_groups_stick_to_one_consumer(run):
    async def go():
        eng = await make_engine(None)
        a, b = Collector(), Collector()
        eng.subscribe("q", a, window=0)
        eng.subscribe("q", b, window=0)
        for i in range(20):
            eng.send(eng.make_message("q", b"%d" % i, {GROUP_ID: "g1" if i % 2 else "g2"}))
        await settle()
        groups_a = {d.message.properties[GROUP_ID] for d in a.deliveries}
        groups_b = {d.message.properties[GROUP_ID] for d in b.deliveries}
        assert groups_a and groups_b and not (groups_a & groups_b)
        assert len(a.deliveries) + len(b.deliveries) == 20
        await eng.stop()

    run(go())


def test_last_value_queue_keeps_the_newest_per_key(run):
    async def go():
        eng = await make_engine(None, {"prices": AddressSettings(last_value_key="symbol")})
        for sym, px in (("A", 1), ("B", 1), ("A", 2), ("A", 3), ("B", 2)):
            eng.send(eng.make_message("prices", b"%s%d" % (sym.encode(), px), {"symbol": sym}))
        assert [m.body for m in eng.queue("prices").browse()] == [b"A3", b"B2"]
        c = Collector()
        eng.subscribe("prices", c, auto_ack=True)
        await settle()
        assert c.bodies == [b"A3", b"B2"]
        await eng.stop()

    run(go())


def test_browsing_does_not_consume(run):
    async def go():
        eng = await make_engine(None)
        for i in range(3):
            eng.send(eng.make_message("q", b"%d" % i, {"n": i}))
        from waystation.core.filter import compile_filter

        assert [m.body for m in eng.queue("q").browse()] == [b"0", b"1", b"2"]
        assert [m.body for m in eng.queue("q").browse(compile_filter("n >= 1"))] == [b"1", b"2"]
        c = Collector()
        eng.subscribe("q", c, auto_ack=True)
        await settle()
        assert c.bodies == [b"0", b"1", b"2"]
        await eng.stop()

    run(go())


def test_consumer_window_limits_messages_in_flight(run):
    async def go():
        eng = await make_engine(None)
        c = Collector()
        sub = eng.subscribe("q", c, window=3)
        for i in range(10):
            eng.send(eng.make_message("q", b"%d" % i))
        await settle()
        assert len(c.deliveries) == 3
        sub.consumer.ack(c.deliveries[0].tag)
        sub.consumer.queue.dispatch()
        assert len(c.deliveries) == 4
        sub.consumer.pause()
        c.ack_all()
        sub.consumer.queue.dispatch()
        assert len(c.deliveries) == 4
        sub.consumer.resume()
        assert len(c.deliveries) == 7
        await eng.stop()

    run(go())


def test_consumer_selector_leaves_other_messages_for_others(run):
    async def go():
        eng = await make_engine(None)
        red, rest = Collector(), Collector()
        eng.subscribe("q", red, selector="color = 'red'", auto_ack=True)
        for color in ("red", "blue", "red", "green"):
            eng.send(eng.make_message("q", color.encode(), {"color": color}))
        await settle()
        assert red.bodies == [b"red", b"red"]
        assert [m.body for m in eng.queue("q").browse()] == [b"blue", b"green"]
        eng.subscribe("q", rest, auto_ack=True)
        await settle()
        assert rest.bodies == [b"blue", b"green"]
        await eng.stop()

    run(go())


def test_exclusive_queue_and_max_consumers(run):
    async def go():
        eng = await make_engine(
            None, queues=[QueueSpec("ex", exclusive=True), QueueSpec("two", max_consumers=2)]
        )
        eng.subscribe("ex", Collector())
        with pytest.raises(ConsumerError, match="exclusive"):
            eng.subscribe("ex", Collector())
        eng.subscribe("two", Collector())
        eng.subscribe("two", Collector())
        with pytest.raises(ConsumerError, match="maximum"):
            eng.subscribe("two", Collector())
        await eng.stop()

    run(go())


def test_bad_selector_is_a_clear_error(run):
    async def go():
        from waystation.core.filter import FilterError

        eng = await make_engine(None)
        with pytest.raises(FilterError):
            eng.subscribe("q", Collector(), selector="color = = 'red'")
        await eng.stop()

    run(go())
