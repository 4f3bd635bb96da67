"""The live event feed (core/event_feed.py) on a real engine: every lifecycle event of the
flow arrives as a JSON message on the management address while the event log still gets
everything, and the feed never publishes events about its own messages."""

from __future__ import annotations

import json
from pathlib import Path

from enginekit import Collector, RecordingSink, settle

from waystation.core.engine import DivertSpec, Engine, EngineConfig, QueueSpec
from waystation.core.event_feed import FEED_MARK, EventFeed
from waystation.core.events import FIELD_NAMES


async def feed_engine(**kw: object) -> tuple[Engine, EventFeed, RecordingSink]:
    log = RecordingSink()
    feed = EventFeed("ws.events", "node-1", log, **kw)  # type: ignore[arg-type]
    eng = Engine(EngineConfig(), events=feed)
    await eng.start()
    feed.attach(eng)
    return eng, feed, log


def test_the_flow_arrives_live_and_the_feed_never_feeds_itself(run) -> None:
    async def go() -> None:
        eng, feed, log = await feed_engine()
        watcher = Collector()
        eng.subscribe("ws.events", watcher)
        orders = Collector()
        sub = eng.subscribe("orders", orders)
        m = eng.make_message("orders", b"o1", durable=False)
        eng.send(m)
        await settle()
        sub.consumer.ack(orders.deliveries[0].tag)
        for _ in range(5):
            await settle()
            watcher.ack_all()  # consuming the feed makes events too: none may come back
        await settle(10)

        got = [json.loads(d.message.body) for d in watcher.deliveries]
        assert all(list(r) == list(FIELD_NAMES) for r in got)
        mine = [r["event"] for r in got if r["trace_id"] == m.trace_id]
        assert mine == ["accepted", "routed", "delivered", "acked"]
        assert {r["address"] for r in got} == {"orders"}
        # the log had the feed's own events too; the feed published exactly the others
        about_feed = [r for r in log.records if r["address"] == "ws.events"]
        assert about_feed and len(got) == len(log.records) - len(about_feed) == feed.published
        d = watcher.deliveries[0].message
        assert d.content_type == "application/json" and FEED_MARK in str(d.trace_id)
        assert d.properties["event"] == "accepted" and d.properties["address"] == "orders"
        await eng.stop()

    run(go())


def test_a_full_buffer_drops_and_counts(run) -> None:
    async def go() -> None:
        eng, feed, log = await feed_engine(buffer_limit=3)
        watcher = Collector()
        eng.subscribe("ws.events", watcher)
        for i in range(5):  # 2 events each (accepted, routed: no consumer), no flush between
            eng.send(eng.make_message("orders", f"o{i}".encode()))
        await settle()
        assert len(watcher.deliveries) == 3 and feed.dropped == 7
        assert len([r for r in log.records if r["address"] == "orders"]) == 10
        await eng.stop()

    run(go())


def test_events_before_attach_go_only_to_the_log(run, tmp_path: Path) -> None:
    async def go() -> None:
        log = RecordingSink()
        feed = EventFeed("ws.events", "node-1", log)
        eng = Engine(EngineConfig(), events=feed)
        await eng.start()
        eng.send(eng.make_message("orders", b"early"))
        await settle()
        assert log.records and feed.published == 0
        await eng.stop()

    run(go())


def test_a_divert_of_the_feed_does_not_feed_it(run) -> None:
    """Copies of feed messages elsewhere keep the feed's trace id, so their events (on
    another address) are not published either."""

    async def go() -> None:
        log = RecordingSink()
        feed = EventFeed("ws.events", "node-1", log)
        cfg = EngineConfig(
            queues=[QueueSpec("ws.events"), QueueSpec("audit")],
            diverts=[DivertSpec("copy", "ws.events", "audit")],
        )
        eng = Engine(cfg, events=feed)
        await eng.start()
        feed.attach(eng)
        eng.send(eng.make_message("orders", b"o1"))
        await settle(10)
        audit_q, feed_q = eng.queue("audit"), eng.queue("ws.events")
        assert audit_q is not None and feed_q is not None
        audit = list(audit_q.browse())
        assert audit and all(FEED_MARK in str(m.trace_id) for m in audit)
        assert any(r["address"] == "audit" for r in log.records)  # logged, not published
        published = [json.loads(m.body)["address"] for m in feed_q.browse()]
        assert published and set(published) == {"orders"}
        assert feed.published == len(published)
        await eng.stop()

    run(go())
