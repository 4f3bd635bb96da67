"""A message the engine cannot store is refused before routing changes anything: no queue
gets it, its duplicate id is not remembered, so the corrected resend is routed normally."""

from __future__ import annotations

import pytest
from enginekit import Collector, make_engine, settle

from waystation.core.engine import QueueSpec
from waystation.core.message import DUPLICATE_ID
from waystation.core.postoffice import InvalidMessage, RoutingError
from waystation.core.queue import ANYCAST, MULTICAST
from waystation.core.settings import AddressSettings

TOO_BIG = 10**23  # does not fit msgpack's 64-bit integers


def test_unencodable_expiration_leaves_no_duplicate_id_and_no_message(run, tmp_path):
    async def go():
        eng = await make_engine(tmp_path)
        bad = eng.make_message("dq", b"x", {DUPLICATE_ID: "abc"}, durable=True, expiration=TOO_BIG)
        with pytest.raises(InvalidMessage, match="cannot be stored"):
            eng.send(bad, routing=ANYCAST)
        q = eng.queue("dq")
        assert q is None or q.depth == 0
        assert "abc" not in eng.post.dup_cache("dq")
        fut = eng.send(eng.make_message("dq", b"x", {DUPLICATE_ID: "abc"}, durable=True))
        assert fut is not None
        await fut
        await eng.stop()
        eng = await make_engine(tmp_path)  # what was stored is exactly the good message
        q = eng.queue("dq")
        assert q is not None and q.depth == 1
        assert "abc" in eng.post.dup_cache("dq")
        await eng.stop()

    run(go())


def test_text_that_is_not_unicode_reaches_no_subscriber(run, tmp_path):
    async def go():
        eng = await make_engine(tmp_path)
        temp, durable = Collector(), Collector()
        eng.subscribe("news", temp, routing=MULTICAST, auto_ack=True)
        sub = eng.subscribe("news", durable, routing=MULTICAST, durable_name="keep", auto_ack=True)
        bad = eng.make_message("news", b"x", {"http_x$foo": "caf\udcff"}, durable=True)
        with pytest.raises(InvalidMessage):
            eng.send(bad, routing=MULTICAST)
        bad_id = eng.make_message("news", b"x", {DUPLICATE_ID: "id\udcff"}, durable=False)
        with pytest.raises(InvalidMessage, match="duplicate id"):
            eng.send(bad_id, routing=MULTICAST)
        await settle()
        assert temp.bodies == [] and durable.bodies == []
        assert sub.queue.depth == 0 and sub.queue.messages_added == 0
        eng.send(eng.make_message("news", b"ok", {"http_x$foo": "café"}, durable=True))
        await settle()
        assert temp.bodies == [b"ok"] and durable.bodies == [b"ok"]
        await eng.stop()

    run(go())


def test_a_routing_error_does_not_remember_the_duplicate_id(run):
    async def go():
        settings = {"fixed.#": AddressSettings(auto_create_queues=False)}
        eng = await make_engine(None, settings)
        msg = eng.make_message("fixed.q", b"x", {DUPLICATE_ID: "d1"})
        with pytest.raises(RoutingError):
            eng.send(msg, routing=ANYCAST)
        eng.create_queue("fixed.q", "fixed.q", routing=ANYCAST)
        eng.send(eng.make_message("fixed.q", b"x", {DUPLICATE_ID: "d1"}), routing=ANYCAST)
        q = eng.queue("fixed.q")
        assert q is not None and q.depth == 1
        await eng.stop()

    run(go())


def test_a_durable_message_is_encoded_once(run, tmp_path, monkeypatch):
    """The check is the encoding the journal writes: no second encoding per send."""
    import waystation.core.message as message

    calls = 0
    pack = message._pack  # Message.encode's packer (a compiled class cannot be patched)

    def counting(record: object) -> bytes:
        nonlocal calls
        calls += 1
        return pack(record)

    async def go():
        eng = await make_engine(tmp_path, queues=[QueueSpec("a"), QueueSpec("b")])
        monkeypatch.setattr(message, "_pack", counting)
        eng.create_queue("b2", "a", routing=ANYCAST)
        fut = eng.send(eng.make_message("a", b"x", durable=True), routing=ANYCAST)
        assert fut is not None
        await fut
        assert calls == 1
        await eng.stop()

    run(go())


def test_a_transaction_refuses_an_unstorable_send_at_once_and_commits_the_rest(run, tmp_path):
    """A commit is all or nothing: the bad message is refused when it is sent in the
    transaction, so it can never fail the commit after earlier sends were routed."""

    async def go():
        eng = await make_engine(tmp_path)
        tx = eng.begin("t1")
        eng.send(eng.make_message("tq", b"good", durable=True), routing=ANYCAST, tx=tx)
        bad = eng.make_message("tq", b"bad", durable=True, expiration=TOO_BIG)
        with pytest.raises(InvalidMessage, match="cannot be stored"):
            eng.send(bad, routing=ANYCAST, tx=tx)
        bad_id = eng.make_message("tq", b"bad", {DUPLICATE_ID: "id\udcff"})
        with pytest.raises(InvalidMessage, match="duplicate id"):
            eng.send(bad_id, routing=ANYCAST, tx=tx)
        assert len(tx.sends) == 1
        fut = eng.commit(tx)
        if fut is not None:
            await fut
        q = eng.queue("tq")
        assert q is not None and q.depth == 1
        await eng.stop()

    run(go())
