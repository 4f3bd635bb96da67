"""Retained messages and a client's saved state (core/retained.py, core/client_state.py):
kept per address / per client, handed to new subscriptions, bounded, and back after a
restart — in process, on a real file journal."""

from __future__ import annotations

import pytest
from enginekit import Collector, make_engine, settle

from waystation.core.limits import LimitExceeded, Limits
from waystation.core.message import RETAINED, Int32
from waystation.core.queue import MULTICAST
from waystation.core.security import Principal
from waystation.core.session import CreditMode, SessionError, Source

USER = Principal("u")


def retained_send(s, address: str, body: bytes, durable: bool = True):
    msg = s.engine.make_message(address, body, durable=durable)
    return s.send(msg, routing=MULTICAST, retain=True)


def test_retained_message_is_routed_kept_and_handed_to_new_subscriptions(run, tmp_path):
    async def go():
        eng = await make_engine(tmp_path)
        s = eng.open_session(USER, "test", "here", client_id="c1")
        live = Collector()
        s.subscribe(Source("a.b", routing=MULTICAST), live, mode=CreditMode.PRESETTLED)
        fut = retained_send(s, "a.b", b"one")
        assert fut is not None
        await fut  # routed and kept, both on disk
        retained_send(s, "a.b", b"two")  # replaces it
        retained_send(s, "a.c", b"three")
        await settle()
        assert live.bodies == [b"one", b"two"]  # routed like any message
        later = Collector()
        c = s.subscribe(Source("a.*", routing=MULTICAST), later, mode=CreditMode.PRESETTLED)
        assert s.send_retained(c) == 2
        await settle()
        assert later.bodies == [b"two", b"three"]
        assert all(d.message.annotations[RETAINED] is True for d in later.deliveries)
        await eng.stop()

        eng = await make_engine(tmp_path)  # after a restart
        s = eng.open_session(USER, "test", "here", client_id="c1")
        h = Collector()
        c = s.subscribe(Source("a.#", routing=MULTICAST), h, mode=CreditMode.PRESETTLED)
        assert s.send_retained(c) == 2
        await settle()
        assert h.bodies == [b"two", b"three"]
        retained_send(s, "a.b", b"")  # an empty body clears the address's retained message
        await settle()
        h2 = Collector()
        c2 = s.subscribe(Source("a.#", routing=MULTICAST), h2, mode=CreditMode.PRESETTLED)
        assert s.send_retained(c2) == 1
        await eng.stop()

        eng = await make_engine(tmp_path)  # the clearing survived too
        s = eng.open_session(USER, "test", "here")
        h3 = Collector()
        c3 = s.subscribe(Source("a.#", routing=MULTICAST), h3, mode=CreditMode.PRESETTLED)
        assert s.send_retained(c3) == 1
        await settle()
        assert h3.bodies == [b"three"]
        await eng.stop()

    run(go())


def test_non_durable_retained_is_memory_only_and_expired_ones_are_dropped(run, tmp_path):
    async def go():
        eng = await make_engine(tmp_path)
        s = eng.open_session(USER, "test", "here")
        retained_send(s, "t.mem", b"m", durable=False)
        gone = eng.make_message("t.old", b"o")
        gone.expiration = 1  # long ago
        s.send(gone, routing=MULTICAST, retain=True)
        await settle()
        h = Collector()
        c = s.subscribe(Source("t.#", routing=MULTICAST), h, mode=CreditMode.PRESETTLED)
        assert s.send_retained(c) == 1  # the expired one is not handed out
        await eng.stop()
        eng = await make_engine(tmp_path)
        s = eng.open_session(USER, "test", "here")
        c = s.subscribe(Source("t.#", routing=MULTICAST), Collector())
        assert s.send_retained(c) == 0  # neither came back
        await eng.stop()

    run(go())


def test_retained_is_bounded_and_not_transactional(run):
    async def go():
        eng = await make_engine(None, limits=Limits(max_retained=2))
        s = eng.open_session(USER, "test", "here")
        retained_send(s, "r.1", b"x")
        retained_send(s, "r.2", b"x")
        retained_send(s, "r.2", b"y")  # replacing one is fine at the limit
        with pytest.raises(LimitExceeded, match="max_retained"):
            retained_send(s, "r.3", b"x")
        tx = s.begin()
        with pytest.raises(SessionError, match="transaction"):
            s.send(eng.make_message("r.1", b"z"), tx=tx, retain=True)
        await eng.stop()

    run(go())


def test_client_state_survives_restart_per_protocol_and_client(run, tmp_path):
    async def go():
        eng = await make_engine(tmp_path)
        a = eng.open_session(USER, "mqtt", "here", client_id="dev-1")
        b = eng.open_session(USER, "mqtt", "here", client_id="dev-2")
        other = eng.open_session(USER, "amqp", "here", client_id="dev-1")
        subs = {"a/b": {"qos": 1, "no_local": False}, "c/#": {"qos": 2}}
        await a.save_state("subscriptions", subs)
        await a.save_state("qos2_in", [3, 9, 12])
        await a.save_state("qos2_in", [9])  # replaced
        await b.save_state("qos2_in", [Int32(1)])
        a.drop_state("nothing-there")
        assert other.load_state("subscriptions") is None  # another protocol's scope
        anonymous = eng.open_session(USER, "mqtt", "here")
        with pytest.raises(SessionError, match="client id"):
            anonymous.load_state("x")
        await eng.stop()

        eng = await make_engine(tmp_path)
        a = eng.open_session(USER, "mqtt", "here", client_id="dev-1")
        assert a.load_state("subscriptions") == subs
        assert a.load_state("qos2_in") == [9]
        b = eng.open_session(USER, "mqtt", "here", client_id="dev-2")
        assert b.load_state("qos2_in") == [1]
        b.drop_state("qos2_in")
        await eng.flush()
        await eng.stop()

        eng = await make_engine(tmp_path)
        assert eng.open_session(USER, "mqtt", "x", client_id="dev-2").load_state("qos2_in") is None
        assert eng.client_states.scopes("mqtt/") == {"mqtt/dev-1"}
        await eng.stop()

    run(go())


def test_client_state_is_bounded(run):
    async def go():
        eng = await make_engine(None, limits=Limits(max_state_bytes=100))
        s = eng.open_session(USER, "mqtt", "here", client_id="d")
        s.save_state("small", list(range(10)))
        with pytest.raises(LimitExceeded, match="max_state_bytes"):
            s.save_state("big", b"x" * 200)
        assert s.load_state("big") is None and s.load_state("small") == list(range(10))
        await eng.stop()

    run(go())


def test_browse_sees_waiting_messages_without_taking_them(run):
    async def go():
        from waystation.core.security import NotAuthorized, Permission, SecurityManager

        eng = await make_engine(None)
        s = eng.open_session(USER, "test", "here")
        for i, color in enumerate(["red", "blue", "red"]):
            m = eng.make_message("q", b"%d" % i)
            m.properties["color"] = color
            s.send(m)
        await settle()
        assert [m.body for m in s.browse("q")] == [b"0", b"1", b"2"]
        assert [m.body for m in s.browse("q", "color = 'red'")] == [b"0", b"2"]
        h = Collector()
        s.subscribe(Source("q"), h, mode=CreditMode.PRESETTLED)
        await settle()
        assert h.bodies == [b"0", b"1", b"2"]  # browsing took nothing
        with pytest.raises(SessionError, match="does not exist"):
            s.browse("nope")
        eng.security = SecurityManager(
            enabled=True, permissions={"#": {Permission.CONSUME: frozenset({"r"})}}
        )
        with pytest.raises(NotAuthorized):
            eng.open_session(Principal("u", frozenset({"r"})), "t", "x").browse("q")
        await eng.stop()

    run(go())
