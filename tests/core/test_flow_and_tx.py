"""Address full policies (BLOCK, FAIL, DROP, PAGE), transactions, duplicate detection, events."""

from __future__ import annotations

import asyncio
import json

import pytest
from enginekit import Collector, make_engine, settle

from waystation.core.engine import Engine, EngineConfig
from waystation.core.eventlog import JsonlEventLog
from waystation.core.message import DUPLICATE_ID
from waystation.core.postoffice import AddressFull
from waystation.core.settings import AddressSettings, FullPolicy

BODY = b"x" * 1000


def test_fail_policy_refuses_when_full(run):
    async def go():
        eng = await make_engine(
            None, {"q": AddressSettings(max_size_bytes=5000, full_policy=FullPolicy.FAIL)}
        )
        with pytest.raises(AddressFull, match="is full"):
            for _ in range(100):
                eng.send(eng.make_message("q", BODY))
        assert 3 <= eng.queue("q").depth <= 6
        await eng.stop()

    run(go())


def test_drop_policy_discards_when_full(run):
    async def go():
        eng = await make_engine(
            None, {"q": AddressSettings(max_size_bytes=5000, full_policy=FullPolicy.DROP)}
        )
        for _ in range(100):
            eng.send(eng.make_message("q", BODY))
        assert 3 <= eng.queue("q").depth <= 6
        await eng.stop()

    run(go())


def test_block_policy_gates_the_producer_until_space(run):
    async def go():
        eng = await make_engine(
            None, {"q": AddressSettings(max_size_bytes=5000, full_policy=FullPolicy.BLOCK)}
        )
        gate = None
        sent = 0
        while gate is None:
            eng.send(eng.make_message("q", BODY))
            sent += 1
            gate = eng.blocked("q")
        assert not gate.done()
        c = Collector()
        eng.subscribe("q", c, auto_ack=True)
        await asyncio.wait_for(gate, 2)
        assert len(c.deliveries) == sent
        await eng.stop()

    run(go())


def test_page_policy_keeps_memory_bounded_and_order(run, tmp_path):
    async def go():
        limit = 20_000
        eng = await make_engine(
            tmp_path, {"q": AddressSettings(max_size_bytes=limit, full_policy=FullPolicy.PAGE)}
        )
        n = 2000
        for i in range(n):
            eng.send(eng.make_message("q", b"%06d" % i + BODY))
        q = eng.queue("q")
        assert q.depth == n
        assert q.usage.memory_bytes <= limit + 2000
        assert any((tmp_path / "paging").rglob("*"))
        c = Collector()
        eng.subscribe("q", c, auto_ack=True)
        for _ in range(200):
            await asyncio.sleep(0.01)
            if len(c.deliveries) == n:
                break
        assert [b[:6] for b in c.bodies] == [b"%06d" % i for i in range(n)]
        assert q.usage.memory_bytes == 0
        await eng.stop()

    run(go())


def test_transaction_commit_and_rollback(run):
    async def go():
        eng = await make_engine(None, {"#": AddressSettings(max_delivery_attempts=10)})
        tx = eng.begin()
        eng.send(eng.make_message("q", b"a"), tx=tx)
        eng.send(eng.make_message("q", b"b"), tx=tx)
        eng.send(eng.make_message("q", b"c"))
        assert eng.queue("q").depth == 1
        eng.commit(tx)
        assert [m.body for m in eng.queue("q").browse()] == [b"c", b"a", b"b"]
        tx2 = eng.begin()
        eng.send(eng.make_message("q", b"never"), tx=tx2)
        eng.rollback(tx2)
        assert eng.queue("q").depth == 3
        # acks in a rolled back transaction are undone: the messages come back
        c = Collector()
        sub = eng.subscribe("q", c, window=10)
        await settle()
        tx3 = eng.begin()
        for d in c.deliveries:
            sub.consumer.ack(d.tag, tx3)
        eng.rollback(tx3)
        await settle()
        assert len(c.deliveries) == 6 and all(d.redelivered for d in c.deliveries[3:])
        tx4 = eng.begin()
        for d in c.deliveries[3:]:
            sub.consumer.ack(d.tag, tx4)
        eng.commit(tx4)
        assert eng.queue("q").depth == 0 and eng.queue("q").in_flight == 0
        await eng.stop()

    run(go())


def test_duplicate_ids_are_dropped_and_remembered_across_restart(run, tmp_path):
    async def go():
        eng = await make_engine(tmp_path)
        for dup in ("a", "b", "a"):
            await (
                eng.send(eng.make_message("q", dup.encode(), {DUPLICATE_ID: dup}, durable=True))
                or settle()
            )
        assert [m.body for m in eng.queue("q").browse()] == [b"a", b"b"]
        await eng.stop()
        eng = await make_engine(tmp_path)
        eng.send(eng.make_message("q", b"a-again", {DUPLICATE_ID: "a"}, durable=True))
        eng.send(eng.make_message("q", b"c", {DUPLICATE_ID: "c"}, durable=True))
        assert [m.body for m in eng.queue("q").browse()] == [b"a", b"b", b"c"]
        await eng.stop()

    run(go())


def test_duplicate_cache_is_bounded(run, tmp_path):
    async def go():
        eng = await make_engine(tmp_path, {"q": AddressSettings(duplicate_cache_size=3)})
        for i in range(5):
            eng.send(eng.make_message("q", b"", {DUPLICATE_ID: str(i)}))
        assert len(eng.post.dup_cache("q")) == 3
        eng.send(eng.make_message("q", b"0-again", {DUPLICATE_ID: "0"}))
        assert eng.queue("q").depth == 6
        await eng.stop()

    run(go())


def test_event_log_records_the_lifecycle(run, tmp_path):
    async def go():
        events = JsonlEventLog(tmp_path / "events", "node-1", max_file_size=400, max_files=50)
        eng = Engine(
            EngineConfig(
                node_name="node-1",
                address_settings={
                    "#": AddressSettings(max_delivery_attempts=1, dead_letter_address="DLQ")
                },
            ),
            events=events,
        )
        await eng.start()
        c = Collector()
        sub = eng.subscribe("q", c)
        eng.send(eng.make_message("q", b"m1"))
        eng.send(eng.make_message("q", b"m2"))
        await settle()
        sub.consumer.ack(c.deliveries[0].tag)
        sub.consumer.nack(c.deliveries[1].tag)
        await eng.stop()
        files = sorted((tmp_path / "events").glob("events-*.jsonl"))
        assert len(files) > 1  # rolled over
        recs = [json.loads(line) for f in files for line in f.read_text().splitlines()]
        kinds = [r["event"] for r in recs]
        for k in ("accepted", "routed", "delivered", "acked", "dead_lettered"):
            assert k in kinds
        assert all(r["node"] == "node-1" and "message_id" in r and "ts_us" in r for r in recs)

    run(go())
