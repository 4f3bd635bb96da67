"""The core session (DESIGN §7): credit modes, drain, neutral outcomes, transactions named by
the client or the broker, limits, and close() releasing everything — in process, no sockets."""

from __future__ import annotations

import pytest
from enginekit import Collector, RecordingSink, make_engine, settle

from waystation.core.consumer import Consumer, ConsumerError
from waystation.core.limits import LimitExceeded, Limits
from waystation.core.message import DEAD_LETTER_REASON
from waystation.core.security import NotAuthorized, Permission, Principal, SecurityManager
from waystation.core.session import CreditMode, Outcome, Source
from waystation.core.settings import AddressSettings

USER = Principal("u", frozenset({"r"}))


class Drains(Collector):
    def __init__(self) -> None:
        super().__init__()
        self.drained_count = 0

    def drained(self, consumer: Consumer) -> None:
        self.drained_count += 1


async def fill(session, address: str, n: int) -> None:
    for i in range(n):
        session.send(session.engine.make_message(address, b"%d" % i))
    await settle()


def test_link_credit_is_consumed_per_delivery_and_drain_zeroes_it(run):
    async def go():
        eng = await make_engine(None)
        s = eng.open_session(USER, "test", "here")
        await fill(s, "q", 5)
        h = Drains()
        c = s.subscribe(Source("q"), h, mode=CreditMode.CREDIT, credit=2)
        await settle()
        assert h.bodies == [b"0", b"1"] and c.credit == 0
        s.set_credit(c, 10, drain=True)  # 3 left: sent, then the rest of the credit drained
        await settle()
        assert h.bodies == [b"0", b"1", b"2", b"3", b"4"]
        assert c.credit == 0 and h.drained_count == 1
        await fill(s, "q", 1)
        assert len(h.deliveries) == 5  # no credit: nothing more
        await eng.stop()

    run(go())


def test_outcomes_released_modified_rejected(run):
    async def go():
        eng = await make_engine(
            None, {"#": AddressSettings(dead_letter_address="DLQ", max_delivery_attempts=5)}
        )
        s = eng.open_session(USER, "test", "here")
        await fill(s, "q", 3)
        h = Collector()
        c = s.subscribe(Source("q"), h, window=10)
        await settle()
        d0, d1, d2 = h.deliveries
        s.settle(c, d0.tag, Outcome.RELEASED)
        s.settle(c, d1.tag, Outcome.MODIFIED)
        s.settle(c, d2.tag, Outcome.REJECTED, detail="bad payload")
        await settle()
        again = {d.message.body: d.delivery_count for d in h.deliveries[3:]}
        assert again == {b"0": 1, b"1": 2}  # released counts no attempt, modified does
        dlq = eng.queue("DLQ")
        assert dlq is not None and dlq.depth == 1
        [msg] = list(dlq.browse())
        assert msg.body == b"2"
        assert msg.properties.get(DEAD_LETTER_REASON) == "rejected"
        with pytest.raises(ConsumerError):
            s.settle(c, d2.tag, Outcome.ACCEPTED)  # already settled
        await eng.stop()

    run(go())


def test_cumulative_settlement_and_window(run):
    async def go():
        eng = await make_engine(None)
        s = eng.open_session(USER, "test", "here")
        await fill(s, "q", 10)
        h = Collector()
        c = s.subscribe(Source("q"), h, window=4)
        await settle()
        assert len(h.deliveries) == 4  # the window of unsettled deliveries
        assert s.settle(c, h.deliveries[2].tag, cumulative=True) == 3
        await settle()
        assert len(h.deliveries) == 7
        await eng.stop()

    run(go())


def test_broker_issued_and_client_named_transactions(run):
    async def go():
        eng = await make_engine(None)
        s = eng.open_session(USER, "test", "here")
        txa = s.begin()  # broker-issued
        txb = s.begin("mine")  # client-named
        assert txa != txb and len(txa) >= 16 and txb == "mine"
        s.send(eng.make_message("q", b"a"), tx=txa)
        s.send(eng.make_message("q", b"b"), tx=txb)
        assert eng.queue("q") is None or eng.queue("q").depth == 0
        await (s.commit(txa) or settle())
        s.rollback(txb)
        await settle()
        assert eng.queue("q").depth == 1
        await eng.stop()

    run(go())


def test_transaction_and_session_limits(run):
    async def go():
        limits = Limits(max_transaction_messages=2, max_transactions_per_session=1, max_window=3)
        eng = await make_engine(None, limits=limits)
        s = eng.open_session(USER, "test", "here")
        tx = s.begin()
        s.send(eng.make_message("q", b"1"), tx=tx)
        s.send(eng.make_message("q", b"2"), tx=tx)
        with pytest.raises(LimitExceeded, match="max_transaction_messages"):
            s.send(eng.make_message("q", b"3"), tx=tx)
        with pytest.raises(LimitExceeded, match="max_transactions_per_session"):
            s.begin()
        await fill(s, "w", 10)
        h = Collector()
        s.subscribe(Source("w"), h, window=0)  # "unbounded" is lowered to max_window
        await settle()
        assert len(h.deliveries) == 3
        await eng.stop()

    run(go())


def test_close_releases_consumers_transactions_and_temporary_queues(run):
    async def go():
        eng = await make_engine(None)
        s = eng.open_session(USER, "test", "here")
        eng.post.ensure_address("t", "multicast")
        await fill(s, "q", 2)
        h = Collector()
        s.subscribe(Source("q"), h, window=10)
        s.subscribe(Source("t", "multicast"), Collector())
        tx = s.begin()
        s.send(eng.make_message("q", b"held"), tx=tx)
        await settle()
        assert eng.queue("q").in_flight == 2
        temporary = [q for q in eng.post.queues.values() if q.temporary]
        assert len(temporary) == 1 and s.id in eng.sessions
        s.close()
        await settle()
        assert eng.queue("q").depth == 2 and eng.queue("q").in_flight == 0
        assert not [q for q in eng.post.queues.values() if q.temporary]
        assert s.id not in eng.sessions
        await eng.stop()

    run(go())


def test_registry_lists_sessions_with_counts(run):
    async def go():
        eng = await make_engine(None)
        s = eng.open_session(USER, "stomp", "127.0.0.1:5555", client_id="c1")
        await fill(s, "q", 3)
        h = Collector()
        s.subscribe(Source("q"), h, mode=CreditMode.PRESETTLED)
        await settle()
        info = eng.sessions[s.id].info()
        assert info["protocol"] == "stomp" and info["user"] == "u"
        assert info["client_id"] == "c1" and info["remote"] == "127.0.0.1:5555"
        assert info["messages_in"] == 3 and info["messages_out"] == 3
        await eng.stop()

    run(go())


def test_settling_another_sessions_consumer_is_refused(run):
    async def go():
        eng = await make_engine(None)
        a = eng.open_session(USER, "test", "a")
        b = eng.open_session(USER, "test", "b")
        await fill(a, "q", 1)
        h = Collector()
        c = a.subscribe(Source("q"), h, window=10)
        await settle()
        with pytest.raises(ConsumerError, match="another session"):
            b.settle(c, h.deliveries[0].tag)
        await eng.stop()

    run(go())


def test_permissions_are_checked_against_the_queue_address(run):
    async def go():
        eng = await make_engine(None)
        eng.security = SecurityManager(
            enabled=True,
            permissions={
                "#": {p: frozenset({"admin"}) for p in Permission},
                "public.#": {
                    Permission.CONSUME: frozenset({"r"}),
                    Permission.SEND: frozenset({"r"}),
                },
            },
        )
        eng.post.create_queue("public.view", "private.data")  # anycast queue, other address
        s = eng.open_session(USER, "test", "here")
        with pytest.raises(NotAuthorized, match="consume"):
            s.subscribe(Source("public.view"), Collector())
        with pytest.raises(NotAuthorized, match="create durable queue"):
            s.send(eng.make_message("public.new", b"x"))  # would auto-create a queue
        await eng.stop()

    run(go())


def test_released_and_redelivered_events(run):
    async def go():
        from waystation.core.engine import Engine

        rec = RecordingSink()
        eng = Engine(events=rec)
        await eng.start()
        s = eng.open_session(USER, "stomp", "here")
        await fill(s, "q", 2)
        h = Collector()
        c = s.subscribe(Source("q"), h, window=2)
        await settle()
        s.settle(c, h.deliveries[0].tag, Outcome.RELEASED)
        s.settle(c, h.deliveries[1].tag, Outcome.MODIFIED)
        await settle()
        kinds = [(r["event"], r["queue"], r.get("delivery_count")) for r in rec.records]
        assert ("released", "q", 0) in kinds and ("redelivered", "q", 1) in kinds
        accepted = rec.of("accepted")
        assert accepted and all(e["protocol"] == "stomp" and e["session"] == s.id for e in accepted)
        await eng.stop()

    run(go())


def test_no_local_skips_only_the_sessions_own_messages(run):
    async def go():
        eng = await make_engine(None)
        eng.post.ensure_address("news", "multicast")
        me = eng.open_session(USER, "test", "me")
        other = eng.open_session(USER, "test", "other")
        h = Collector()
        me.subscribe(Source("news", "multicast", no_local=True), h)
        me.send(eng.make_message("news", b"mine"))
        other.send(eng.make_message("news", b"theirs"))
        tx = me.begin()
        me.send(eng.make_message("news", b"mine in a transaction"), tx=tx)
        me.commit(tx)
        await settle()
        assert h.bodies == [b"theirs"]
        with pytest.raises(Exception, match="topic subscriptions only"):
            me.subscribe(Source("q", "anycast", no_local=True), Collector())
        await eng.stop()

    run(go())


def test_temporary_queue_is_named_by_the_node_private_and_removed(run):
    async def go():
        eng = await make_engine(None)
        me = eng.open_session(USER, "test", "me")
        other = eng.open_session(USER, "test", "other")
        h = Collector()
        c = me.subscribe(Source("", temporary=True), h)
        reply_to = me.address_of(c)
        assert reply_to.startswith("tmp.")
        other.send(eng.make_message(reply_to, b"reply"))
        await settle()
        assert h.bodies == [b"reply"]
        with pytest.raises(NotAuthorized, match="temporary queue"):
            other.subscribe(Source(reply_to), Collector())
        me.unsubscribe(c)
        assert eng.queue(reply_to) is None
        await eng.stop()

    run(go())


def test_sessions_per_user_are_bounded_and_freed_on_close(run):
    async def go():
        eng = await make_engine(None, limits=Limits(max_sessions_per_user=2))
        eng.security = SecurityManager(enabled=True)
        a = eng.open_session(USER, "test", "1")
        eng.open_session(USER, "test", "2")
        with pytest.raises(LimitExceeded, match="max_sessions_per_user"):
            eng.open_session(USER, "test", "3")
        eng.open_session(Principal("other"), "test", "4")  # another user is not affected
        a.close()
        eng.open_session(USER, "test", "5")
        await eng.stop()

    run(go())


def test_presettled_with_credit_counts_deliveries_and_without_is_unlimited(run):
    async def go():
        eng = await make_engine(None)
        s = eng.open_session(USER, "test", "here")
        await fill(s, "q", 5)
        h = Drains()
        c = s.subscribe(Source("q"), h, mode=CreditMode.PRESETTLED, credit=2)
        await settle()
        assert h.bodies == [b"0", b"1"] and c.credit == 0 and not c.in_flight
        s.set_credit(c, 2)
        await settle()
        assert h.bodies == [b"0", b"1", b"2", b"3"]
        s.unsubscribe(c)
        free = Collector()
        s.subscribe(Source("q"), free, mode=CreditMode.PRESETTLED)  # STOMP auto: no credit
        await fill(s, "q", 3)
        assert len(free.deliveries) == 4
        await eng.stop()

    run(go())
