"""The per-message fast paths of routing and settlement keep their meaning: the bindings
cached per address follow queues as they come and go (durability included), an accept frees
a window place at once, and ``Session.settle_many`` settles a read's accepts in order with one
dispatch pass — on a real engine and journal."""

from __future__ import annotations

import pytest
from enginekit import Collector, RecordingSink, make_engine, settle

from waystation.core.consumer import ConsumerError
from waystation.core.engine import Engine, EngineConfig
from waystation.core.queue import MULTICAST
from waystation.core.security import Principal
from waystation.core.session import CreditMode, Source
from waystation.core.store.journal import FileJournal

USER = Principal("u", frozenset({"r"}))


async def engine_with(data_dir, sink: RecordingSink) -> Engine:
    """An engine on a journal in ``data_dir`` whose event records go to ``sink``."""
    eng = Engine(
        EngineConfig(data_dir=data_dir),
        FileJournal(data_dir / "journal"),
        bindings=FileJournal(data_dir / "bindings"),
        events=sink,
    )
    await eng.start()
    return eng


async def fill(session, address: str, n: int, durable: bool = False) -> None:
    for i in range(n):
        session.send(session.engine.make_message(address, b"%d" % i, durable=durable))
    await settle()


def test_settle_many_accepts_in_order_and_refills_the_window_at_once(run):
    async def go():
        eng = await make_engine(None)
        s = eng.open_session(USER, "test", "here")
        await fill(s, "q", 5)
        h = Collector()
        c = s.subscribe(Source("q"), h, window=2)
        await settle()
        assert h.bodies == [b"0", b"1"]
        assert s.settle_many(c, [d.tag for d in h.deliveries]) == 2
        # one dispatch pass inside settle_many: the freed places are filled before it returns
        assert h.bodies == [b"0", b"1", b"2", b"3"]
        q = eng.queue("q")
        assert q is not None and q.messages_acked == 2 and q.in_flight == 2
        await eng.stop()

    run(go())


def test_settle_many_settles_the_known_tags_and_names_the_unknown(run):
    async def go():
        eng = await make_engine(None)
        s = eng.open_session(USER, "test", "here")
        await fill(s, "q", 3)
        h = Collector()
        c = s.subscribe(Source("q"), h, mode=CreditMode.CREDIT, credit=3)
        await settle()
        tags = [d.tag for d in h.deliveries]
        with pytest.raises(ConsumerError, match=r"tag 999\b"):
            s.settle_many(c, [tags[0], 999, tags[2]])
        assert [t for t in tags if c.is_in_flight(t)] == [tags[1]]
        other = eng.open_session(USER, "test", "there")
        with pytest.raises(ConsumerError, match="another session"):
            other.settle_many(c, [tags[1]])
        assert c.is_in_flight(tags[1])
        await eng.stop()

    run(go())


def test_an_accept_on_a_credit_link_hands_out_nothing_until_credit_comes(run):
    async def go():
        eng = await make_engine(None)
        s = eng.open_session(USER, "test", "here")
        await fill(s, "q", 3)
        h = Collector()
        c = s.subscribe(Source("q"), h, mode=CreditMode.CREDIT, credit=1)
        await settle()
        s.settle(c, h.deliveries[0].tag)
        await settle()
        assert h.bodies == [b"0"]  # an accept is not credit
        s.set_credit(c, 2)
        assert h.bodies == [b"0", b"1", b"2"]
        await eng.stop()

    run(go())


def test_accepts_settled_in_a_batch_are_gone_after_a_restart(run, tmp_path):
    async def go():
        eng = await make_engine(tmp_path)
        s = eng.open_session(USER, "test", "here")
        await fill(s, "q", 4, durable=True)
        h = Collector()
        c = s.subscribe(Source("q"), h, mode=CreditMode.CREDIT, credit=4)
        await settle()
        s.settle_many(c, [d.tag for d in h.deliveries[:3]])
        await eng.flush()
        await eng.stop()
        eng = await make_engine(tmp_path)
        q = eng.queue("q")
        assert q is not None and [m.body for m in q.browse()] == [b"3"]
        await eng.stop()

    run(go())


def test_cached_bindings_follow_queues_and_their_durability(run, tmp_path):
    async def go():
        sink = RecordingSink()
        eng = await engine_with(tmp_path, sink)
        s = eng.open_session(USER, "test", "here")
        eng.create_queue("t.mem", "t", routing=MULTICAST, durable=False)
        await fill(s, "t", 1, durable=True)  # one non-durable queue: nothing stored
        assert sink.of("stored") == []
        eng.create_queue("t.disk", "t", routing=MULTICAST, durable=True)
        await fill(s, "t", 1, durable=True)
        await eng.flush()
        assert len(sink.of("stored")) == 1
        routed = [(r["message_id"], r["queue"]) for r in sink.of("routed")]
        second = sink.of("accepted")[1]["message_id"]
        assert sorted(q for m, q in routed if m == second) == ["t.disk", "t.mem"]
        eng.delete_queue("t.mem")
        await fill(s, "t", 1, durable=True)
        third = sink.of("accepted")[2]["message_id"]
        assert [r["queue"] for r in sink.of("routed") if r["message_id"] == third] == ["t.disk"]
        assert sink.of("accepted")[2]["trace_id"] == f"{eng.node_name}/{third}"
        await eng.stop()
        eng = await make_engine(tmp_path)
        q = eng.queue("t.disk")
        assert q is not None and [m.body for m in q.browse()] == [b"0", b"0"]
        await eng.stop()

    run(go())
