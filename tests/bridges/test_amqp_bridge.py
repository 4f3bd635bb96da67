"""Core bridges over amqp:// and amqps://: the STOMP bridge's promises (once, in order, typed,
dead-letter reasons, node identity) over AMQP 1.0, in process and between two real nodes."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nodekit import NodeProcess
from sitekit import FAST_LINK, check_once_in_order, collect, send_all, toml_value
from wanproxy import WanProxy

from waystation.bridges.amqp_link import bridge_payload, classify_condition
from waystation.bridges.backoff import RetryPolicy
from waystation.bridges.core_bridge import CoreBridge
from waystation.bridges.dial import Target
from waystation.bridges.foreign import ForeignInbound
from waystation.bridges.manager import BridgeManager
from waystation.bridges.spec import BridgeSpec
from waystation.core.engine import Engine, EngineConfig
from waystation.core.message import Float32, Int32, Message, Timestamp
from waystation.core.reasons import (
    INVALID_REMOTE_DESTINATION,
    MESSAGE_TOO_LARGE,
    REMOTE_AUTHORIZATION,
)
from waystation.core.settings import AddressSettings
from waystation.gateway.amqp.mapping import message_from_transfer
from waystation.gateway.amqp.session import AmqpOptions, AmqpSession
from waystation.gateway.stream import StreamServer

pytestmark = pytest.mark.timeout(120)


# -- pure pieces ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "text", "reason"),
    [
        ("amqp:not-found", "queue 'x' does not exist", INVALID_REMOTE_DESTINATION),
        ("amqp:unauthorized-access", "user 'b' may not send", REMOTE_AUTHORIZATION),
        ("amqp:link:message-size-exceeded", "message larger than 10", MESSAGE_TOO_LARGE),
        ("amqp:internal-error", "the node could not store the message", None),
        ("amqp:resource-limit-exceeded", "address 'x' is full", None),
    ],
)
def test_rejections_map_to_dead_letter_reasons(name, text, reason):
    assert classify_condition(name, text) == reason


def test_the_payload_reads_back_as_the_same_typed_message():
    props = {"i": Int32(7), "l": 2**40, "f": Float32(1.5), "t": Timestamp(5), "b": b"\x00\x01"}
    props["_WS_DUPL_ID"] = "mine"
    m = Message(42, "sf.site-b", b"\x00body", props, True, 7, 1000, content_type="x/y")
    m.annotations["_WS_ORIG_ADDRESS"] = "site-b::orders"
    m.annotations["_WS_ROUTE_TO_NODE"] = "site-b"
    m.trace_id = "site-a/42"
    payload = bridge_payload(m, "1", None, "site-a/to-b/42")
    back, to = message_from_transfer(payload, 1, "", 2000)
    assert to == "site-b::orders"
    assert back.body == m.body and back.durable and back.priority == 7
    assert back.timestamp == 1000 and back.content_type == "x/y"
    assert back.trace_id == "site-a/42"
    got = dict(back.application_properties)
    assert got.pop("_WS_DUPL_ID") == "site-a/to-b/42"
    assert got.pop("_WS_SRC_DUPL_ID") == "mine"
    assert got == {k: v for k, v in props.items() if k != "_WS_DUPL_ID"}
    assert [type(got[k]) for k in ("i", "f", "t")] == [Int32, Float32, Timestamp]


# -- an in-process pair: site-b serves AMQP --------------------------------------------------
class Pair:
    def __init__(self, a: Engine, b: Engine, server: StreamServer, scheme: str) -> None:
        self.a = a
        self.b = b
        self.server = server
        self.scheme = scheme
        self.tls_ca: str | None = None
        self.bridges: list[CoreBridge] = []

    def bridge(self, remote_node: str = "site-b", **kw: object) -> CoreBridge:
        spec = BridgeSpec(
            name="to-b",
            remote_node=remote_node,
            queue="sf.site-b",
            targets=[
                Target(
                    "127.0.0.1", self.server.bound_port(), scheme=self.scheme, tls_ca=self.tls_ca
                )
            ],
            retry=RetryPolicy(0.05, 2.0, 0.2, -1),
            heartbeat=0.5,
            liveness_timeout=2.0,
        )
        for k, v in kw.items():
            setattr(spec, k, v)
        b = CoreBridge(self.a, spec)
        self.bridges.append(b)
        return b

    def send(self, n: int, address: str = "site-b::orders", **props: object) -> list[Message]:
        out = []
        for i in range(n):
            m = self.a.make_message(address, f"m{i:05d}".encode(), dict(props), durable=True)
            self.a.send(m)
            out.append(m)
        return out

    def received(self, queue: str = "orders") -> list[bytes]:
        q = self.b.queue(queue)
        return [m.body for m in q.browse()] if q is not None else []


@contextlib.asynccontextmanager
async def pair(
    options: AmqpOptions | None = None, tls: tuple[Path, Path] | None = None
) -> AsyncIterator[Pair]:
    a = Engine(EngineConfig(node_name="site-a", remote_nodes={"site-b"}))
    b = Engine(EngineConfig(node_name="site-b"))
    await a.start()
    await b.start()
    ctx = None
    if tls is not None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(tls[0]), str(tls[1]))
    server = StreamServer(
        "amqp", lambda link: AmqpSession(b, link, options), "127.0.0.1", 0, tls=ctx
    )
    await server.start()
    p = Pair(a, b, server, "amqps" if tls else "amqp")
    if tls is not None:
        p.tls_ca = str(tls[0])
    try:
        yield p
    finally:
        for br in p.bridges:
            await br.stop()
        await server.stop()
        await a.stop()
        await b.stop()


async def until(pred, timeout: float = 10.0) -> None:  # noqa: ANN001
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


def test_forwards_in_order_typed_with_duplicate_ids_and_the_node_claimed(run):
    async def main() -> None:
        async with pair() as p:
            br = p.bridge()
            await br.start()
            sent = p.send(300, k=Int32(3), x=1.25)
            await until(lambda: br.status()["forwarded"] == 300)
            assert p.received() == [m.body for m in sent]
            q = p.b.queue("orders")
            assert q is not None
            first = next(iter(q.browse()))
            assert first.properties["_WS_DUPL_ID"] == f"site-a/to-b/{sent[0].id}"
            assert type(first.properties["k"]) is Int32 and first.properties["x"] == 1.25
            assert first.durable and first.trace_id == sent[0].trace_id
            st = br.status()
            assert st["state"] == "connected" and st["in_flight"] == 0 and st["waiting"] == 0
            assert st["url"] == f"amqp://127.0.0.1:{p.server.bound_port()}"
            assert [s.node for s in p.b.sessions.values() if s.protocol == "amqp"] == ["site-a"]

    run(main())


def test_twenty_cuts_neither_lose_nor_duplicate(run):
    async def main() -> None:
        async with pair() as p:
            br = p.bridge(window=50)
            await br.start()
            sent = p.send(4000)
            busy = 0  # cuts that caught messages in flight
            last = None
            for _ in range(20):
                await until(lambda last=last: br._link is not None and br._link is not last)
                await asyncio.sleep(0.01)
                link = last = br._link
                assert link is not None
                busy += br.status()["unconfirmed"] > 0  # type: ignore[operator]
                link.close("test cut")
            await until(lambda: len(p.received()) == 4000, 60)
            assert p.received() == [m.body for m in sent]
            assert br.dead_lettered == 0 and busy >= 5

    run(main())


def test_over_amqps(run, tmp_path):
    from test_stomp_tls import self_signed

    async def main() -> None:
        async with pair(tls=self_signed(tmp_path)) as p:
            br = p.bridge()
            await br.start()
            sent = p.send(20)
            await until(lambda: len(p.received()) == 20)
            assert p.received() == [m.body for m in sent]
            assert str(br.status()["url"]).startswith("amqps://")

    run(main())


def test_through_an_http_proxy(run):
    from test_core_bridge import _fake_proxy

    async def main() -> None:
        async with pair() as p:
            seen: list[bytes] = []
            port = p.server.bound_port()
            proxy = await _fake_proxy(port, seen, "pu", "pp")
            pport = proxy.sockets[0].getsockname()[1]
            try:
                t = Target("127.0.0.1", port, "127.0.0.1", pport, "pu", "pp", scheme="amqp")
                br = p.bridge()
                br.spec.targets = [t]
                await br.start()
                sent = p.send(20)
                await until(lambda: len(p.received()) == 20)
                assert p.received() == [m.body for m in sent]
                assert seen[-1].startswith(f"CONNECT 127.0.0.1:{port} HTTP/1.1".encode())
            finally:
                proxy.close()

    run(main())


def test_a_black_holed_link_dies_by_idle_timeout_and_nothing_is_lost(run):
    async def main() -> None:
        async with pair() as p:
            wan = WanProxy(p.server.bound_port()).start()
            loop = asyncio.get_running_loop()
            try:
                br = p.bridge()
                br.spec.targets = [Target("127.0.0.1", wan.port, scheme="amqp")]
                await br.start()
                p.send(10)
                await until(lambda: len(p.received()) == 10)
                await loop.run_in_executor(None, wan.blackhole, True)
                t0 = time.monotonic()
                sent = p.send(10)
                await until(lambda: br._link is None, 10)
                took = time.monotonic() - t0
                assert took < 5, f"black hole noticed after {took:.1f}s (liveness 2s)"
                assert "idle" in str(br.last_error), br.last_error
                await loop.run_in_executor(None, wan.blackhole, False)
                await until(lambda: len(p.received()) == 20, 20)
                assert p.received()[10:] == [m.body for m in sent]
            finally:
                for b in p.bridges:
                    await b.stop()
                await loop.run_in_executor(None, wan.stop)

    run(main())


def test_a_wrong_remote_node_is_refused(run):
    async def main() -> None:
        async with pair() as p:
            p.a.add_remote_node("site-x")
            br = p.bridge(remote_node="site-x", queue="sf.site-b")
            await br.start()
            p.send(3)
            await until(lambda: br.failed >= 2)
            assert "wrong node" in str(br.status()["last_error"])
            assert "'site-b'" in str(br.status()["last_error"])
            assert p.received() == []

    run(main())


def test_refused_messages_are_dead_lettered_with_their_reason_and_the_rest_flow(run):
    async def main() -> None:
        async with pair(AmqpOptions(max_message_size=4096)) as p:
            dlq = p.a.create_queue("DLQ")
            p.a.settings.set("#", AddressSettings(dead_letter_address="DLQ"))
            p.b.settings.set("strict.#", AddressSettings(auto_create_queues=False))
            br = p.bridge()
            await br.start()
            p.send(1)
            p.send(1, address="site-b::strict.nowhere")  # rejected: amqp:not-found
            big = p.a.make_message("site-b::orders", b"x" * 20000, durable=True)
            p.a.send(big)  # the link is detached: message-size-exceeded
            p.send(2)
            await until(lambda: dlq.depth == 2 and len(p.received()) == 3, 20)
            reasons = sorted(str(m.properties["_WS_DLQ_REASON"]) for m in dlq.browse())
            assert reasons == [INVALID_REMOTE_DESTINATION, MESSAGE_TOO_LARGE]
            assert br.status()["dead_lettered"] == 2

    run(main())


def _secure(engine: Engine) -> None:
    from waystation.core.security import Permission, SecurityManager, User

    everything = (
        Permission.SEND,
        Permission.CONSUME,
        Permission.CREATE_DURABLE_QUEUE,
        Permission.CREATE_NON_DURABLE_QUEUE,
    )
    engine.security = SecurityManager(
        enabled=True,
        users={
            "bridge": User("bridge", lambda pw: pw == "pw", frozenset({"b"})),
            "other": User("other", lambda pw: pw == "pw", frozenset({"b"}), nodes=frozenset({"x"})),
        },
        permissions={
            "#": {p: frozenset({"b"}) for p in everything},
            "secret.#": {Permission.CONSUME: frozenset({"b"})},
        },
    )


def test_login_node_claim_and_remote_authorization(run):
    async def main() -> None:
        async with pair() as p:
            _secure(p.b)
            dlq = p.a.create_queue("DLQ")
            p.a.settings.set("#", AddressSettings(dead_letter_address="DLQ"))
            wrong = p.bridge(user="bridge", password="nope")
            wrong.spec.retry = RetryPolicy(0.05, 2.0, 0.2, 0)
            await wrong.start()
            await until(lambda: wrong.state == "stopped" and wrong.last_error is not None)
            assert "credentials refused" in str(wrong.last_error), wrong.last_error
            claim = p.bridge(user="other", password="pw")
            claim.spec.retry = RetryPolicy(0.05, 2.0, 0.2, 0)
            await claim.start()
            await until(lambda: claim.state == "stopped" and claim.last_error is not None)
            assert "may not claim to be node 'site-a'" in str(claim.last_error), claim.last_error
            br = p.bridge(user="bridge", password="pw")
            await br.start()
            p.send(1)
            p.send(1, address="site-b::secret.x")  # rejected: amqp:unauthorized-access
            p.send(1)
            await until(lambda: dlq.depth == 1 and len(p.received()) == 2)
            (dead,) = dlq.browse()
            assert dead.properties["_WS_DLQ_REASON"] == REMOTE_AUTHORIZATION

    run(main())


def test_pause_keeps_the_link_and_takes_nothing_new_until_resumed(run):
    async def main() -> None:
        async with pair() as p:
            manager = BridgeManager(p.a, [])
            br = p.bridge()
            manager.bridges.append(br)
            await br.start()
            p.send(5)
            await until(lambda: len(p.received()) == 5)
            manager.pause("to-b")
            p.send(5)
            await asyncio.sleep(0.5)
            st = br.status()
            assert st["paused"] is True and st["state"] == "connected"
            assert len(p.received()) == 5 and st["waiting"] == 5
            manager.resume("to-b")
            await until(lambda: len(p.received()) == 10)
            assert manager.status()[0]["paused"] is False
            with pytest.raises(KeyError):
                manager.pause("nope")
            with pytest.raises(KeyError):
                manager.resume("nope")

    run(main())


def test_an_inbound_amqp_bridge_pauses_and_resumes(run):
    """A foreign AMQP inbound bridge (site-b's AMQP listener stands in for the broker):
    typed messages arrive, a pause holds what arrives without storing it, resume stores it."""

    async def main() -> None:
        async with pair() as p:
            p.b.create_queue("src")
            p.a.create_queue("inbox")
            spec = BridgeSpec(
                name="from-b",
                remote_node="b",
                queue="",
                targets=[Target("127.0.0.1", p.server.bound_port(), scheme="amqp")],
                forwarding_address="inbox",
                retry=RetryPolicy(0.05, 2.0, 0.2, -1),
                window=10,
                liveness_timeout=2.0,
                foreign="amqp",
                inbound=True,
                source="/queue/src",
            )
            br = ForeignInbound(p.a, spec)
            await br.start()
            try:
                for i in range(5):
                    p.b.send(p.b.make_message("src", b"a%d" % i, {"n": Int32(i)}, durable=True))
                inbox = p.a.queue("inbox")
                assert inbox is not None
                await until(lambda: inbox.depth == 5)
                first = next(iter(inbox.browse()))
                assert first.body == b"a0" and type(first.properties["n"]) is Int32
                assert first.durable
                br.pause()
                for i in range(5, 25):
                    p.b.send(p.b.make_message("src", b"a%d" % i, durable=True))
                await asyncio.sleep(0.5)
                st = br.status()
                assert st["paused"] is True and st["state"] == "connected"
                assert inbox.depth == 5 and len(br._held) == 10  # the window, no more
                br.resume()
                await until(lambda: inbox.depth == 25)
                assert [m.body for m in inbox.browse()] == [b"a%d" % i for i in range(25)]
                await until(lambda: p.b.queue("src").depth == 0)  # type: ignore[union-attr]
            finally:
                await br.stop()

    run(main())


# -- two real nodes, cut 20 times through a WAN proxy ---------------------------------------------
def test_two_nodes_over_amqp_survive_twenty_link_cuts(tmp_path):
    b = NodeProcess(tmp_path / "site-b", name="site-b", amqp=True)
    wan = WanProxy(b.amqp_port).start()
    opts = "".join(f"{k} = {toml_value(v)}\n" for k, v in FAST_LINK.items())
    a = NodeProcess(
        tmp_path / "site-a",
        name="site-a",
        extra_config=f"""
[[bridges]]
name = "to-b"
remote_node = "site-b"
urls = ["amqp://127.0.0.1:{wan.port}"]
confirmation_window = 100
{opts}""",
    )
    try:
        b.start()
        a.start()
        sent = [f"m{i:05d}" for i in range(2000)]
        cuts: list[int] = []

        def between(i: int) -> None:  # cut the bridge's live link (wait for its redial)
            end = time.monotonic() + 10
            n = 0
            while not n and time.monotonic() < end:
                time.sleep(0.05)
                n = wan.cut()
            cuts.append(n)

        confirmed = send_all(
            a.stomp_port,
            "/queue/site-b::orders",
            sent,
            headers={"k": "v", "n": "7", "ws-types": "n=int"},
            batch=100,
            between=between,
        )
        assert len(confirmed) == 2000
        received = collect(b.stomp_port, "orders", confirmed, timeout=60)
        check_once_in_order(sent, confirmed, received)
        assert len(cuts) == 20 and all(cuts)  # every cut hit a live link
        assert "amqp://127.0.0.1" in a.log()
    finally:
        a.stop()
        b.stop()
        wan.stop()
