"""Auto-created queues and addresses (issue 27, finding 4): counted per user as well as per
node, refused past ``max_auto_created_per_user`` for that user only, and deleted once unused
(``auto_delete_queues``/``auto_delete_addresses``) so the counts come down again; the
creator survives a restart.  In process, no sockets (the node-level attack is in
tests/gateway/test_auto_create_quota.py)."""

from __future__ import annotations

import asyncio

import pytest
from enginekit import Collector, make_engine, settle

from waystation.core.engine import DivertSpec
from waystation.core.limits import LimitExceeded, Limits
from waystation.core.queue import ANYCAST, MULTICAST
from waystation.core.security import Permission, Principal, SecurityManager
from waystation.core.session import Source
from waystation.core.settings import AddressSettings

NOW = AddressSettings(auto_delete_queues_delay_ms=0, auto_delete_addresses_delay_ms=0)
ALICE = Principal("alice", frozenset({"u"}))
BOB = Principal("bob", frozenset({"u"}))


async def engine(tmp=None, *, per_user: int = 10, node: int = 100, settings=None, **kw):
    eng = await make_engine(
        tmp,
        {"#": NOW, **(settings or {})},
        limits=Limits(max_auto_created_per_user=per_user, max_auto_created=node),
        **kw,
    )
    eng.security = SecurityManager(
        enabled=True, permissions={"#": {p: frozenset({"u"}) for p in Permission}}
    )
    return eng


def publish(session, address: str, body: bytes = b"", routing: str | None = MULTICAST) -> None:
    session.send(session.engine.make_message(address, body), routing=routing)


def test_one_users_quota_refuses_that_user_only_and_counts_what_exists(run):
    async def go():
        eng = await engine(per_user=10)
        alice = eng.open_session(ALICE, "t", "here")
        bob = eng.open_session(BOB, "t", "here")
        refused = []
        for i in range(15):
            try:
                publish(alice, f"t.{i}")
            except LimitExceeded as e:
                refused.append(e)
        assert len(refused) == 5 and refused[0].limit == "max_auto_created_per_user"
        assert "'alice' already has 10" in str(refused[0])
        publish(alice, "t.3")  # an existing one: no creation, no refusal
        # another user still creates, by send and by subscription
        publish(bob, "b.topic")
        bob.subscribe(Source("b.sub", MULTICAST), Collector())
        publish(bob, "b.queue", b"x", routing=None)  # an anycast queue and its address: 2
        assert eng.post.auto_created_by == {"alice": 10, "bob": 4}
        assert eng.auto_created_count() == 14
        # the check before the message is built refuses too (STOMP, AMQP attach, MQTT)
        with pytest.raises(LimitExceeded, match="max_auto_created_per_user"):
            alice.check_send("t.new", MULTICAST)
        await eng.stop()

    run(go())


def test_node_wide_limit_still_applies_and_the_node_itself_is_not_counted_per_user(run):
    async def go():
        eng = await engine(per_user=100, node=5)
        alice = eng.open_session(ALICE, "t", "here")
        for i in range(5):
            publish(alice, f"t.{i}")
        with pytest.raises(LimitExceeded, match=r"\(limit max_auto_created\)"):
            publish(alice, "t.5")
        eng.send(eng.make_message("n.0"), routing=MULTICAST)  # the node's own: not refused
        assert eng.post.auto_created_by == {"alice": 5} and eng.auto_created_count() == 6
        await eng.stop()

    run(go())


def test_unused_addresses_and_queues_go_and_the_count_with_them(run):
    async def go():
        eng = await engine(per_user=6)
        alice = eng.open_session(ALICE, "t", "here")
        for i in range(3):
            publish(alice, f"t.{i}")  # nobody subscribes: unused from the start
        publish(alice, "q.full", b"kept", routing=None)  # a queue with a message
        h = Collector()
        c = alice.subscribe(Source("t.sub", MULTICAST), h)  # bound: in use
        assert eng.post.auto_created_by == {"alice": 6}
        gone = eng.reap_unused()
        assert gone == {"t.0", "t.1", "t.2"}
        assert {"q.full", "t.sub"} <= set(eng.post.addresses) and "q.full" in eng.post.queues
        assert eng.post.auto_created_by == {"alice": 3}
        publish(alice, "t.0")  # made again, counted again
        alice.unsubscribe(c)
        assert eng.reap_unused() == {"t.0", "t.sub"}
        # the queue goes (with its address) once empty and without consumer
        d = Collector()
        c = alice.subscribe(Source("q.full"), d)
        await settle()
        d.ack_all()
        assert eng.reap_unused() == set()  # a consumer is attached
        alice.unsubscribe(c)
        assert eng.reap_unused() == {"q.full"}
        assert "q.full" not in eng.post.queues and "q.full" not in eng.post.addresses
        assert eng.post.auto_created_by == {} and eng.auto_created_count() == 0
        await eng.stop()

    run(go())


def test_the_delay_counts_from_when_it_fell_unused(run):
    async def go():
        slow = AddressSettings(auto_delete_addresses_delay_ms=200)
        eng = await engine(settings={"slow.#": slow})
        alice = eng.open_session(ALICE, "t", "here")
        publish(alice, "slow.a")
        assert eng.reap_unused() == set()
        await asyncio.sleep(0.25)
        assert eng.reap_unused() == {"slow.a"}
        await eng.stop()

    run(go())


def test_what_is_still_referred_to_is_kept(run):
    async def go():
        keep = AddressSettings(auto_delete_addresses=False, auto_delete_queues=False)
        eng = await engine(
            per_user=50,
            settings={
                "keep.#": keep,
                "#": NOW.merged_over(AddressSettings(dead_letter_address="DLQ")),
            },
            remote_nodes={"site-b"},
        )
        eng.add_divert(DivertSpec("d", "div.src", "div.dst"))
        alice = eng.open_session(ALICE, "t", "here")
        publish(alice, "div.src")  # a divert watches it
        publish(alice, "div.dst", b"x", routing=None)  # ... and routes there
        publish(alice, "keep.a")  # its settings keep it
        publish(alice, "keep.q", b"", routing=None)
        alice.send(eng.make_message("ret.a", b"state"), routing=MULTICAST, retain=True)
        durable = alice.subscribe(Source("dur.t", MULTICAST, durable_name="d1"), Collector())
        alice.unsubscribe(durable)  # the durable subscription stays, and its address
        eng.create_queue("configured")
        eng.post.ensure_address("declared", MULTICAST)
        publish(alice, "site-b::orders", b"far", routing=None)  # into the node's sf.site-b
        assert eng.queue("sf.site-b").creator == ""  # the node's, not alice's
        assert eng.reap_unused() == set()
        assert {"div.src", "div.dst", "keep.a", "keep.q", "ret.a", "dur.t"} <= set(
            eng.post.addresses
        )
        assert {"configured", "sf.site-b", "keep.q", "div.dst"} <= set(eng.post.queues)
        eng.remove_divert("d")
        alice.send(eng.make_message("ret.a", b""), routing=MULTICAST, retain=True)  # cleared
        assert {"div.src", "ret.a"} <= eng.reap_unused()
        await eng.stop()

    run(go())


def test_a_send_cached_as_checked_makes_its_deleted_target_again_for_its_user(run):
    """The session checks a target once; routing makes it again after it was deleted, for
    the sending user and within that user's quota (routing itself knows no user)."""

    async def go():
        eng = await engine(per_user=2)
        alice = eng.open_session(ALICE, "t", "here")
        publish(alice, "a.0")
        publish(alice, "a.1")
        assert eng.reap_unused() == {"a.0", "a.1"}
        publish(alice, "a.0")  # checked before: made again while routed, for alice
        assert eng.post.addresses["a.0"].creator == "alice"
        publish(alice, "b.0")
        with pytest.raises(LimitExceeded, match="max_auto_created_per_user"):
            publish(alice, "a.1")  # checked before, but alice is at her quota now
        assert eng.post.auto_created_by == {"alice": 2}
        await eng.stop()

    run(go())


def test_a_transaction_makes_its_targets_at_commit_with_their_routing(run):
    async def go():
        eng = await engine(per_user=4)
        alice = eng.open_session(ALICE, "t", "here")
        tx = alice.begin()
        alice.send(eng.make_message("tx.topic", b"t"), routing=MULTICAST, tx=tx)
        alice.send(eng.make_message("tx.queue", b"q"), routing=ANYCAST, tx=tx)
        assert "tx.topic" not in eng.post.addresses  # nothing made before the commit
        alice.commit(tx)
        assert eng.post.addresses["tx.topic"].routing == MULTICAST
        assert eng.queue("tx.queue").depth == 1
        assert eng.post.auto_created_by == {"alice": 3}
        # a target deleted as unused before the commit is made again, with its routing
        tx = alice.begin()
        alice.send(eng.make_message("tx.topic", b"again"), routing=MULTICAST, tx=tx)
        assert eng.reap_unused() == {"tx.topic"}
        alice.commit(tx)
        assert eng.post.addresses["tx.topic"].routing == MULTICAST  # not an anycast queue
        assert "tx.topic" not in eng.post.queues
        # past the quota at commit: refused, and the transaction stays open
        tx = alice.begin()
        alice.send(eng.make_message("tx.late", b"x"), routing=MULTICAST, tx=tx)  # 4 of 4
        publish(alice, "other.now")  # 4 of 4 taken outside the transaction meanwhile
        with pytest.raises(LimitExceeded, match="max_auto_created_per_user"):
            alice.commit(tx)
        assert tx in alice.transactions
        alice.rollback(tx)
        assert "tx.late" not in eng.post.addresses
        await eng.stop()

    run(go())


def test_a_durable_auto_created_queue_keeps_its_creator_across_a_restart(run, tmp_path):
    async def go():
        slow = AddressSettings(auto_delete_queues_delay_ms=60_000)
        eng = await engine(tmp_path, per_user=4, settings={"#": slow})
        alice = eng.open_session(ALICE, "t", "here")
        msg = eng.make_message("kept.q", b"x", durable=True)
        stored = alice.send(msg)
        assert stored is not None
        await stored
        alice.subscribe(Source("empty.q"), Collector())
        assert eng.post.auto_created_by == {"alice": 4}
        await eng.stop()
        eng = await engine(tmp_path, per_user=4, settings={"#": slow})
        assert eng.queue("kept.q").creator == "alice"
        assert eng.post.auto_created_by == {"alice": 4}
        alice = eng.open_session(ALICE, "t", "here")
        with pytest.raises(LimitExceeded, match="max_auto_created_per_user"):
            alice.check_send("more.q")
        await eng.stop()
        eng = await engine(tmp_path, per_user=4)  # delay 0: the empty one goes
        assert eng.reap_unused() == {"empty.q"}
        assert eng.post.auto_created_by == {"alice": 2}
        await eng.stop()

    run(go())


def test_the_reaper_runs_on_its_own(run):
    async def go():
        eng = await engine(expiry_scan_period=0.05)
        alice = eng.open_session(ALICE, "t", "here")
        publish(alice, "auto.x")
        for _ in range(100):
            await asyncio.sleep(0.02)
            if "auto.x" not in eng.post.addresses:
                break
        assert "auto.x" not in eng.post.addresses and eng.auto_created_count() == 0
        await eng.stop()

    run(go())
