"""Routing: anycast, multicast, wildcards, auto-creation, diverts, store-and-forward."""

from __future__ import annotations

import pytest
from enginekit import Collector, make_engine, settle

from waystation.core.divert import DivertError
from waystation.core.engine import DivertSpec, QueueSpec
from waystation.core.message import (
    DEAD_LETTER_REASON,
    DIVERT_PATH,
    ORIGINAL_ADDRESS,
    ROUTE_TO_NODE,
    Message,
)
from waystation.core.postoffice import RoutingError
from waystation.core.queue import ANYCAST, MULTICAST
from waystation.core.settings import AddressSettings


def add_suffix(msg: Message) -> Message:
    msg.body = msg.body + b"-transformed"
    return msg


def test_anycast_competing_consumers_get_each_message_once(run):
    async def go():
        eng = await make_engine(None)
        a, b = Collector(), Collector()
        eng.subscribe("orders", a, routing=ANYCAST, auto_ack=True)
        eng.subscribe("orders", b, routing=ANYCAST, auto_ack=True)
        for i in range(10):
            eng.send(eng.make_message("orders", str(i).encode()), routing=ANYCAST)
        await settle()
        got = sorted(a.bodies + b.bodies, key=int)
        assert got == [str(i).encode() for i in range(10)]
        assert a.bodies and b.bodies  # round robin shares the work
        await eng.stop()

    run(go())


def test_multicast_every_subscription_gets_a_copy_and_unsubscribed_temp_queue_goes(run):
    async def go():
        eng = await make_engine(None)
        a, b = Collector(), Collector()
        sa = eng.subscribe("prices", a, routing=MULTICAST, auto_ack=True)
        eng.subscribe("prices", b, routing=MULTICAST, auto_ack=True)
        eng.send(eng.make_message("prices", b"p1"), routing=MULTICAST)
        await settle()
        assert a.bodies == [b"p1"] and b.bodies == [b"p1"]
        eng.unsubscribe(sa)
        assert sa.queue.name not in eng.post.queues
        eng.send(eng.make_message("prices", b"p2"), routing=MULTICAST)
        await settle()
        assert a.bodies == [b"p1"] and b.bodies == [b"p1", b"p2"]
        await eng.stop()

    run(go())


def test_multicast_without_subscribers_drops_or_dead_letters(run):
    async def go():
        eng = await make_engine(
            None,
            {"news.#": AddressSettings(send_to_dla_on_no_route=True, dead_letter_address="DLQ")},
        )
        eng.send(eng.make_message("prices", b"nobody"), routing=MULTICAST)
        eng.send(eng.make_message("news.x", b"to-dla"), routing=MULTICAST)
        dlq = eng.queue("DLQ")
        assert dlq is not None and [m.body for m in dlq.browse()] == [b"to-dla"]
        assert next(iter(dlq.browse())).properties[DEAD_LETTER_REASON] == "no-route"
        assert eng.queue("prices") is None
        await eng.stop()

    run(go())


def test_wildcard_subscription_receives_matching_addresses_once(run):
    async def go():
        eng = await make_engine(None)
        c = Collector()
        eng.subscribe("a.#", c, routing=MULTICAST, auto_ack=True)
        for addr in ("a", "a.b", "a.b.c", "b.a"):
            eng.send(eng.make_message(addr, addr.encode()), routing=MULTICAST)
        await settle()
        assert c.bodies == [b"a", b"a.b", b"a.b.c"]
        await eng.stop()

    run(go())


def test_wildcard_routing_disabled_makes_patterns_literal(run):
    async def go():
        eng = await make_engine(None, wildcard_routing=False)
        c = Collector()
        eng.subscribe("a.#", c, routing=MULTICAST, auto_ack=True)
        eng.send(eng.make_message("a.b", b"x"), routing=MULTICAST)
        eng.send(eng.make_message("a.#", b"literal"), routing=MULTICAST)
        await settle()
        assert c.bodies == [b"literal"]
        await eng.stop()

    run(go())


def test_auto_create_governed_by_settings(run):
    async def go():
        eng = await make_engine(
            None,
            {"strict.#": AddressSettings(auto_create_queues=False, auto_create_addresses=False)},
        )
        eng.send(eng.make_message("loose", b"x"))
        assert eng.queue("loose") is not None and eng.queue("loose").depth == 1
        with pytest.raises(RoutingError, match="does not exist"):
            eng.send(eng.make_message("strict.q", b"x"), routing=ANYCAST)
        with pytest.raises(RoutingError):
            eng.subscribe("strict.q", Collector(), routing=ANYCAST)
        with pytest.raises(RoutingError):
            eng.subscribe("strict.t", Collector(), routing=MULTICAST)
        await eng.stop()

    run(go())


def test_queue_filter_only_admits_matching_messages(run):
    async def go():
        eng = await make_engine(
            None,
            queues=[QueueSpec("red", "paint", filter="color = 'red'"), QueueSpec("all", "paint")],
        )
        for color in ("red", "blue"):
            eng.send(eng.make_message("paint", color.encode(), {"color": color}))
        assert [m.body for m in eng.queue("red").browse()] == [b"red"]
        assert [m.body for m in eng.queue("all").browse()] == [b"red", b"blue"]
        await eng.stop()

    run(go())


def test_non_exclusive_divert_copies_with_filter_and_transformer(run):
    async def go():
        eng = await make_engine(
            None,
            queues=[QueueSpec("orders"), QueueSpec("audit")],
            diverts=[
                DivertSpec(
                    "eu",
                    "orders",
                    "audit",
                    filter="region = 'EU'",
                    transformer="test_routing:add_suffix",
                )
            ],
        )
        eng.send(eng.make_message("orders", b"o1", {"region": "EU"}))
        eng.send(eng.make_message("orders", b"o2", {"region": "US"}))
        assert [m.body for m in eng.queue("orders").browse()] == [b"o1", b"o2"]
        audit = list(eng.queue("audit").browse())
        assert [m.body for m in audit] == [b"o1-transformed"]
        assert audit[0].properties[DIVERT_PATH] == "eu"
        await eng.stop()

    run(go())


def test_exclusive_divert_moves_the_message(run):
    async def go():
        eng = await make_engine(
            None,
            queues=[QueueSpec("orders"), QueueSpec("priority")],
            diverts=[
                DivertSpec("big", "orders", "priority", filter="amount > 1000", exclusive=True)
            ],
        )
        eng.send(eng.make_message("orders", b"small", {"amount": 5}))
        eng.send(eng.make_message("orders", b"big", {"amount": 5000}))
        assert [m.body for m in eng.queue("orders").browse()] == [b"small"]
        assert [m.body for m in eng.queue("priority").browse()] == [b"big"]
        await eng.stop()

    run(go())


def test_divert_loop_is_refused(run):
    async def go():
        with pytest.raises(DivertError, match="divert loop"):
            await make_engine(
                None, diverts=[DivertSpec("d1", "a", "b"), DivertSpec("d2", "b", "a")]
            )
        eng = await make_engine(None, diverts=[DivertSpec("d1", "x.#", "y")])
        from waystation.core.divert import Divert

        with pytest.raises(DivertError, match="loop"):
            eng.post.add_divert(Divert("d2", "y", "x.z"))
        await eng.stop()

    run(go())


def test_store_and_forward_address_goes_to_the_node_queue(run):
    async def go():
        eng = await make_engine(
            None,
            {"#": AddressSettings(dead_letter_address="DLQ")},
            node_name="site-a",
            remote_nodes={"site-b"},
        )
        eng.send(eng.make_message("site-b::orders", b"remote"))
        eng.send(eng.make_message("site-a::orders", b"local"))
        eng.send(eng.make_message("site-x::orders", b"nowhere"))
        sf = list(eng.queue("sf.site-b").browse())
        assert [m.body for m in sf] == [b"remote"]
        assert (
            sf[0].properties[ROUTE_TO_NODE] == "site-b"
            and sf[0].properties[ORIGINAL_ADDRESS] == "orders"
        )
        assert [m.body for m in eng.queue("orders").browse()] == [b"local"]
        dead = list(eng.queue("DLQ").browse())
        assert [m.body for m in dead] == [b"nowhere"]
        assert dead[0].properties[DEAD_LETTER_REASON] == "invalid-remote-node"
        await eng.stop()

    run(go())
