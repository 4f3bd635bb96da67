"""A closed MQTT session is freed by reference counting, not left to the cyclic garbage
collector, which a serving node runs rarely (gateway/gc_policy.py): neither a parser error
(its traceback holds the session's frames), nor the subscriptions (each core consumer holds
its ``Sub`` as its handler), nor packets held for a login may keep it in a cycle.  The
collector is off while each case runs; what it then finds unreachable is a cycle."""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from mqtt_inproc_kit import MQTT_5, MQTT_311, Client, in_engine, settle

from waystation.wire.mqtt import (
    Publish,
    Subscribe,
    SubscriptionRequest,
    Unsubscribe,
)

OURS = {"MqttSession", "Sub", "MqttParser", "Outbound", "Inbound"}


@contextmanager
def cycles_found() -> Iterator[list[str]]:
    """The gateway.mqtt objects that only the cyclic collector would free, once the block
    has run (the list is filled on exit)."""
    found: list[str] = []
    gc.collect()
    gc.disable()
    try:
        yield found
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        found += sorted(type(o).__name__ for o in gc.garbage if type(o).__name__ in OURS)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
        gc.collect()


async def _subscribed(engine: Any, version: int) -> None:
    """QoS 0, 1 and 2 subscriptions, one replaced and one unsubscribed, deliveries not yet
    acknowledged, then the connection is lost."""
    pub = Client(engine, version)
    pub.connect("pub")
    c = Client(engine, version)
    c.connect("sub")
    c.send(Subscribe(1, [SubscriptionRequest(f"t/{q}", q) for q in (0, 1, 2)]))
    c.send(Subscribe(2, [SubscriptionRequest("t/1", 2), SubscriptionRequest("x/#", 1)]))
    c.send(Unsubscribe(3, ["x/#"]))
    await settle()
    for q in (0, 1, 2):
        pub.send(Publish(f"t/{q}", b"m", q, packet_id=q or None))
    await settle()
    assert len(c.recv()) >= 5  # SUBACKs, UNSUBACK, deliveries
    c.server.connection_lost()
    pub.server.connection_lost()


async def _malformed(engine: Any, version: int) -> None:
    """A bad packet after the login: the parser keeps its error."""
    c = Client(engine, version)
    c.connect("bad")
    c.raw(b"\x00\x00")  # reserved packet type 0
    assert c.link.closed
    c.server.connection_lost()


async def _partial(engine: Any, version: int) -> None:
    """A packet cut short, before any login."""
    c = Client(engine, version)
    c.raw(b"\x10\xff\xff\x03" + bytes(1000))
    c.server.connection_lost()


Case = Callable[[Any, int], Awaitable[None]]


@pytest.mark.parametrize("version", [MQTT_311, MQTT_5], ids=["v3.1.1", "v5"])
@pytest.mark.parametrize("case", [_subscribed, _malformed, _partial],
                         ids=["subscribed", "malformed", "partial"])  # fmt: skip
def test_a_closed_session_makes_no_cycles(run, case: Case, version: int) -> None:
    found: list[str] = []

    async def go(engine: Any) -> None:
        nonlocal found
        with cycles_found() as found:
            await case(engine, version)
            await settle()

    in_engine(run, go)
    assert not found, f"kept in reference cycles after close: {found}"
