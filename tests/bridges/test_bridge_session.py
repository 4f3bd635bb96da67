"""Bridges run on a core session (DESIGN §7): listed with the engine's sessions while they run,
gone when they stop; held messages go back released, so stopping a bridge never counts as a
delivery attempt; ``forwarded`` and ``accepted`` events carry the trace id and the session.
Two engines in one process, site-b's real STOMP server between them."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import pytest
from enginekit import RecordingSink
from nodekit import free_port

from waystation.bridges.backoff import RetryPolicy
from waystation.bridges.core_bridge import CoreBridge
from waystation.bridges.dial import Target
from waystation.bridges.foreign import ForeignInbound
from waystation.bridges.spec import BridgeSpec
from waystation.core.engine import Engine, EngineConfig, QueueSpec
from waystation.core.message import Message
from waystation.core.queue import MULTICAST
from waystation.core.session import Session
from waystation.core.settings import AddressSettings
from waystation.gateway.stomp.server import stomp_server
from waystation.gateway.stomp.session import StompOptions
from waystation.gateway.stream import StreamServer
from waystation.wire.stomp import Limits

pytestmark = pytest.mark.timeout(60)


class Sites:
    def __init__(self, a: Engine, b: Engine, server: StreamServer, events: RecordingSink) -> None:
        self.a, self.b, self.server, self.events = a, b, server, events
        self.stoppers: list[Callable[[], object]] = []

    @property
    def port(self) -> int:
        assert self.server.server is not None
        return int(self.server.server.sockets[0].getsockname()[1])

    def spec(self, port: int | None = None, **kw: object) -> BridgeSpec:
        spec = BridgeSpec(
            name="to-b",
            remote_node="site-b",
            queue="sf.site-b",
            targets=[Target("127.0.0.1", self.port if port is None else port)],
            retry=RetryPolicy(0.05, 2.0, 0.2, -1),
            heartbeat=0.5,
            liveness_timeout=2.0,
        )
        for k, v in kw.items():
            setattr(spec, k, v)
        return spec

    def core_bridge(self, port: int | None = None, **kw: object) -> CoreBridge:
        br = CoreBridge(self.a, self.spec(port, **kw))
        self.stoppers.append(br.stop)
        return br

    def send(self, engine: Engine, n: int, address: str) -> list[Message]:
        out = []
        for i in range(n):
            m = engine.make_message(address, f"m{i:03d}".encode(), durable=True)
            engine.send(m)
            out.append(m)
        return out

    def bridge_sessions(self) -> list[Session]:
        return [s for s in self.a.sessions.values() if s.protocol == "bridge"]


@contextlib.asynccontextmanager
async def sites(
    settings: dict[str, AddressSettings] | None = None, queues: list[QueueSpec] | None = None
) -> AsyncIterator[Sites]:
    events = RecordingSink()
    a = Engine(
        EngineConfig(
            node_name="site-a",
            remote_nodes={"site-b"},
            address_settings=settings or {},
            queues=queues or [],
        ),
        events=events,
    )
    b = Engine(EngineConfig(node_name="site-b"))
    await a.start()
    await b.start()
    server = stomp_server(b, "127.0.0.1", 0, StompOptions(Limits()))
    await server.start()
    s = Sites(a, b, server, events)
    try:
        yield s
    finally:
        for stop in s.stoppers:
            await stop()  # type: ignore[misc]
        await server.stop()
        await a.stop()
        await b.stop()


async def until(pred: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


def test_a_core_bridge_is_a_listed_system_session_until_it_stops(run):
    async def main() -> None:
        async with sites() as s:
            br = s.core_bridge()
            assert s.bridge_sessions() == []
            await br.start()
            [session] = s.bridge_sessions()
            info = session.info()
            assert (info["user"], info["client_id"], info["remote"]) == ("$node", "to-b", "site-b")
            sent = s.send(s.a, 20, "site-b::orders")
            await until(lambda: br.status()["forwarded"] == 20)
            assert session.info()["messages_out"] == 20 and session.info()["consumers"] == 1
            forwarded = s.events.of("forwarded")
            assert [r["message_id"] for r in forwarded] == [m.id for m in sent]
            assert {(r["peer"], r["queue"]) for r in forwarded} == {("site-b", "sf.site-b")}
            assert [r["trace_id"] for r in forwarded] == [m.trace_id for m in sent]
            await br.stop()
            assert s.bridge_sessions() == [] and session.closed

    run(main())


def test_stopping_a_bridge_releases_its_messages_without_counting_a_delivery(run):
    async def main() -> None:
        # one counted attempt would dead-letter, and a counted redelivery would wait a minute
        strict = AddressSettings(
            max_delivery_attempts=1, redelivery_delay_ms=60_000, dead_letter_address="DLQ"
        )
        async with sites({"#": strict}) as s:
            dlq = s.a.create_queue("DLQ")
            sent = s.send(s.a, 5, "site-b::orders")
            dead = free_port()  # nobody listens: the bridge holds the messages and retries
            for _ in range(4):
                br = s.core_bridge(dead)
                await br.start()
                await until(lambda: br.status()["in_flight"] == 5)  # noqa: B023
                await br.stop()
                sf = s.a.queue("sf.site-b")
                assert sf is not None and sf.depth == 5 and dlq.depth == 0
            br = s.core_bridge()
            await br.start()
            await until(lambda: br.status()["forwarded"] == 5, 5)
            q = s.b.queue("orders")
            assert q is not None and [m.body for m in q.browse()] == [m.body for m in sent]
            assert dlq.depth == 0

    run(main())


def test_a_foreign_inbound_bridge_sends_through_its_session(run):
    async def main() -> None:
        async with sites() as s:
            s.b.create_queue("outbox")
            sent = s.send(s.b, 10, "outbox")
            spec = s.spec(name="from-b", foreign="stomp", inbound=True, source="/queue/outbox")
            spec.forwarding_address = "inbox"
            br = ForeignInbound(s.a, spec)
            s.stoppers.append(br.stop)
            await br.start()
            [session] = s.bridge_sessions()
            assert session.remote == f"tcp://127.0.0.1:{s.port}"
            assert session.client_id == "from-b" and session.principal.name == "$node"
            await until(lambda: br.status()["forwarded"] == 10)
            inbox = s.a.queue("inbox")
            assert inbox is not None
            assert [m.body for m in inbox.browse()] == [m.body for m in sent]
            assert session.messages_in == 10
            accepted = [r for r in s.events.of("accepted") if r["address"] == "inbox"]
            assert len(accepted) == 10
            assert {(r["protocol"], r["session"]) for r in accepted} == {("bridge", session.id)}
            await br.stop()
            assert s.bridge_sessions() == [] and session.closed

    run(main())


def test_a_bridge_drains_a_topic_subscription_queue_as_it_is(run):
    async def main() -> None:
        audit = QueueSpec("audit", "events", MULTICAST, filter="kind = 'x'")
        async with sites(queues=[audit]) as s:
            q = s.a.queue("audit")
            assert q is not None
            wanted = []
            for i in range(30):
                kind = "x" if i % 3 else "y"
                m = s.a.make_message("events", f"e{i:02d}".encode(), {"kind": kind}, durable=True)
                s.a.send(m)
                if kind == "x":
                    wanted.append(m.body)
            br = s.core_bridge(queue="audit", forwarding_address="audit-copy")
            await br.start()
            await until(lambda: br.status()["forwarded"] == len(wanted))
            copy = s.b.queue("audit-copy")
            assert copy is not None and [m.body for m in copy.browse()] == wanted
            # the configured subscription itself is used, never replaced
            assert s.a.queue("audit") is q and q.depth == 0
            assert q.filter is not None and q.filter.text == "kind = 'x'"
            [session] = s.bridge_sessions()
            await br.stop()
            assert session.closed and s.a.queue("audit") is q

    run(main())


def test_a_foreign_inbound_bridge_that_gives_up_closes_its_session(run):
    async def main() -> None:
        async with sites() as s:
            spec = s.spec(
                free_port(),
                name="from-nowhere",
                foreign="stomp",
                inbound=True,
                source="/queue/outbox",
                retry=RetryPolicy(0.02, 1.0, 0.02, attempts=1),
            )
            spec.forwarding_address = "inbox"
            br = ForeignInbound(s.a, spec)
            s.stoppers.append(br.stop)
            await br.start()
            assert len(s.bridge_sessions()) == 1
            await until(lambda: "gave up" in str(br.status()["last_error"]), 5)
            assert s.bridge_sessions() == []

    run(main())
