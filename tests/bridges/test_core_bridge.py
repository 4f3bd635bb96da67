"""The bridge state machine in one process: two engines, site-b's real STOMP server, and the
bridge between them (fast and deterministic; the process-level tests are in test_sites.py)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
from nodekit import free_port

from waystation.bridges.backoff import RetryPolicy
from waystation.bridges.core_bridge import CoreBridge
from waystation.bridges.dial import Target
from waystation.bridges.proxy import ProxyError, connect_request, open_tunnel, parse_status
from waystation.bridges.reasons import classify_error, is_authentication_failure
from waystation.bridges.spec import BridgeSpec
from waystation.bridges.stomp_link import LinkOptions, StompLink
from waystation.core.consumer import Delivery
from waystation.core.engine import Engine, EngineConfig
from waystation.core.message import Message
from waystation.core.reasons import (
    INVALID_REMOTE_DESTINATION,
    MESSAGE_TOO_LARGE,
    REMOTE_AUTHORIZATION,
    REMOTE_REJECTED,
)
from waystation.core.settings import AddressSettings
from waystation.gateway.stomp.server import stomp_server
from waystation.gateway.stomp.session import StompOptions
from waystation.gateway.stream import StreamServer
from waystation.wire.stomp import Limits

pytestmark = pytest.mark.timeout(60)


# -- pure pieces ------------------------------------------------------------------------------
def test_backoff_grows_and_caps():
    p = RetryPolicy(0.1, 2.0, 0.5, attempts=3)
    assert [p.delay(n) for n in range(1, 6)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert p.delay(0) == 0
    assert not p.exhausted(3) and p.exhausted(4)
    assert not RetryPolicy(attempts=-1).exhausted(10**6)
    assert RetryPolicy(1, 2, 60).delay(10**6) == 60  # no overflow after a long outage


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("unknown destination: queue 'x' does not exist", INVALID_REMOTE_DESTINATION),
        ("not authorized: user 'b' may not send on 'secret'", REMOTE_AUTHORIZATION),
        ("content-length 9000 exceeds max_body_size (4096 bytes)", MESSAGE_TOO_LARGE),
        ("header line exceeds max_header_length (1024 bytes)", MESSAGE_TOO_LARGE),
        ("store failure: message not persisted", None),
        ("address full: address 'x' is full (10 of 10 bytes)", None),
        ("invalid priority header 12: expected 0..9", REMOTE_REJECTED),
    ],
)
def test_remote_errors_map_to_reasons(text, reason):
    assert classify_error(text) == reason


def test_authentication_refusals_are_recognised():
    assert is_authentication_failure("authentication failed")
    assert is_authentication_failure("User name [x] or password is invalid.")
    assert not is_authentication_failure("unknown command 'FOO'")


def test_proxy_request_and_status():
    req = connect_request("10.0.0.1", 61613, "u", "p:w")
    assert req.startswith(b"CONNECT 10.0.0.1:61613 HTTP/1.1\r\nHost: 10.0.0.1:61613\r\n")
    assert b"Proxy-Authorization: Basic " + base64.b64encode(b"u:p:w") + b"\r\n\r\n" in req
    assert b"Proxy-Authorization" not in connect_request("h", 1)
    assert parse_status(b"HTTP/1.1 200 Connection established\r\n\r\n") == (
        200,
        "Connection established",
    )
    with pytest.raises(ProxyError):
        parse_status(b"SSH-2.0-OpenSSH\r\n\r\n")


def test_spec_from_config():
    from waystation.bridges.spec import spec_from_config
    from waystation.config import parse_config

    cfg = parse_config(
        """
[node]
name = "site-a"
[[bridges]]
name = "to-b"
remote_node = "site-b"
urls = ["ws://127.0.0.1:8171/stomp", "tcp://127.0.0.1:61623"]
proxy = "http://pu:pp@127.0.0.1:3128"
retry_interval = "250ms"
routing_timeout = "1m"
""",
        "a.toml",
    )
    spec = spec_from_config(cfg.bridges[0])
    assert spec.queue == "sf.site-b"
    assert spec.targets == [
        Target("127.0.0.1", 8171, "127.0.0.1", 3128, "pu", "pp", scheme="ws", path="/stomp"),
        Target("127.0.0.1", 61623, "127.0.0.1", 3128, "pu", "pp"),
    ]
    assert spec.skipped == []  # every scheme the config accepts can be dialled
    assert spec.retry.interval == 0.25 and spec.routing_timeout == 60.0
    assert spec.window == 1000 and spec.duplicate_detection


# -- an in-process pair of sites ----------------------------------------------------------------
class Pair:
    def __init__(self, a: Engine, b: Engine, server: StreamServer) -> None:
        self.a = a
        self.b = b
        self.server = server
        self.bridges: list[CoreBridge] = []

    @property
    def port(self) -> int:
        assert self.server.server is not None
        return int(self.server.server.sockets[0].getsockname()[1])

    def bridge(self, targets: list[Target] | None = None, **kw: object) -> CoreBridge:
        spec = BridgeSpec(
            name="to-b",
            remote_node="site-b",
            queue="sf.site-b",
            targets=targets if targets is not None else [Target("127.0.0.1", self.port)],
            retry=RetryPolicy(0.05, 2.0, 0.2, -1),
            heartbeat=0.5,
            liveness_timeout=2.0,
        )
        for k, v in kw.items():
            setattr(spec, k, v)
        b = CoreBridge(self.a, spec)
        self.bridges.append(b)
        return b

    def send(self, n: int, address: str = "site-b::orders", **props: str) -> list[Message]:
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
async def pair(limits: Limits | None = None) -> AsyncIterator[Pair]:
    a = Engine(EngineConfig(node_name="site-a", remote_nodes={"site-b"}))
    b = Engine(EngineConfig(node_name="site-b"))
    await a.start()
    await b.start()
    server = stomp_server(b, "127.0.0.1", 0, StompOptions(limits or Limits()))
    await server.start()
    p = Pair(a, b, server)
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


def test_forwards_in_order_with_stable_duplicate_ids(run):
    async def main() -> None:
        async with pair() as p:
            br = p.bridge()
            await br.start()
            sent = p.send(300)
            await until(lambda: len(p.received()) == 300)
            assert p.received() == [m.body for m in sent]
            q = p.b.queue("orders")
            assert q is not None
            first = next(iter(q.browse()))
            assert first.properties["_WS_DUPL_ID"] == f"site-a/to-b/{sent[0].id}"
            assert first.durable
            await until(lambda: br.status()["forwarded"] == 300)
            st = br.status()
            assert st["state"] == "connected" and st["in_flight"] == 0 and st["waiting"] == 0
            assert st["url"] == f"tcp://127.0.0.1:{p.port}"

    run(main())


def test_window_bounds_messages_in_flight(run):
    async def main() -> None:
        async with pair() as p:
            br = p.bridge(window=7)
            held: list[int] = []
            deliver = br.deliver

            def spy(d: Delivery) -> None:
                deliver(d)
                held.append(br.status()["in_flight"])  # type: ignore[arg-type]

            br.deliver = spy  # type: ignore[method-assign,assignment]
            p.send(50)
            await br.start()
            await until(lambda: len(p.received()) == 50)
            assert max(held) == 7

    run(main())


def test_many_cuts_neither_lose_nor_duplicate_nor_count_as_deliveries(run):
    async def main() -> None:
        async with pair() as p:
            br = p.bridge(window=50)
            await br.start()
            sent = p.send(2000)
            for i in range(15):  # more cuts than max_delivery_attempts (10), each on a new link
                await until(lambda i=i: br._link is not None and br._conn > i)
                await asyncio.sleep(0.01)
                if br._link is not None:
                    br._link.close("test cut")
            await until(lambda: len(p.received()) == 2000, 20)
            assert p.received() == [m.body for m in sent]
            assert br.dead_lettered == 0
            assert br._conn >= 10  # the cuts hit live links

    run(main())


def test_refused_messages_are_dead_lettered_and_the_rest_flow(run):
    async def main() -> None:
        async with pair(Limits(max_body_size=1024, max_header_length=512)) as p:
            dlq = p.a.create_queue("DLQ")
            p.a.settings.set("#", AddressSettings(dead_letter_address="DLQ"))
            br = p.bridge()
            await br.start()
            p.send(1)
            big = p.a.make_message("site-b::orders", b"x" * 4000, durable=True)
            p.a.send(big)
            p.send(1, note="y" * 1000)  # header too long: no receipt-id in the ERROR
            p.send(2)
            await until(lambda: dlq.depth == 2 and len(p.received()) == 3, 15)
            reasons = [m.properties["_WS_DLQ_REASON"] for m in dlq.browse()]
            assert reasons == ["message-too-large", "message-too-large"]
            assert br.status()["dead_lettered"] == 2

    run(main())


def test_gives_up_after_reconnect_attempts_and_returns_messages(run):
    async def main() -> None:
        async with pair() as p:
            br = p.bridge(
                targets=[Target("127.0.0.1", free_port())],
                retry=RetryPolicy(0.02, 1.0, 0.02, attempts=2),
            )
            await br.start()
            p.send(5)
            await until(lambda: "gave up" in str(br.status()["last_error"]), 5)
            st = br.status()
            assert st["failed"] == 3 and "gave up after 3" in str(st["last_error"])
            sf = p.a.queue("sf.site-b")
            assert sf is not None and sf.depth == 5  # back in the queue, in order

    run(main())


def test_retry_state_reports_the_next_attempt(run):
    async def main() -> None:
        async with pair() as p:
            br = p.bridge(
                targets=[Target("127.0.0.1", free_port())], retry=RetryPolicy(5.0, 2.0, 5.0)
            )
            await br.start()
            await until(lambda: br.status()["state"] == "retrying", 5)
            st = br.status()
            assert st["next_attempt"] is not None and "ConnectionRefused" in str(st["last_error"])

    run(main())


async def _fake_proxy(
    target_port: int, seen: list[bytes], user: str, password: str
) -> asyncio.Server:
    """An HTTP CONNECT proxy demanding Basic credentials, piping to ``target_port``."""
    want = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        head = await r.readuntil(b"\r\n\r\n")
        seen.append(head)
        if f"Proxy-Authorization: {want}".encode() not in head:
            w.write(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
            w.close()
            return
        tr, tw = await asyncio.open_connection("127.0.0.1", target_port)
        w.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(r, tw), pipe(tr, w))

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_through_an_http_proxy_with_credentials(run):
    async def main() -> None:
        async with pair() as p:
            seen: list[bytes] = []
            proxy = await _fake_proxy(p.port, seen, "pu", "pp")
            pport = proxy.sockets[0].getsockname()[1]
            try:
                bad = p.bridge(targets=[Target("127.0.0.1", p.port, "127.0.0.1", pport, "pu", "x")])
                await bad.start()
                await until(lambda: "407" in str(bad.status()["last_error"]), 5)
                await bad.stop()
                br = p.bridge(targets=[Target("127.0.0.1", p.port, "127.0.0.1", pport, "pu", "pp")])
                await br.start()
                sent = p.send(20)
                await until(lambda: len(p.received()) == 20)
                assert p.received() == [m.body for m in sent]
                assert seen[-1].startswith(f"CONNECT 127.0.0.1:{p.port} HTTP/1.1".encode())
                with pytest.raises(ProxyError):
                    await open_tunnel("127.0.0.1", pport, "127.0.0.1", p.port, "pu", "nope")
            finally:
                proxy.close()

    run(main())


def test_a_silent_remote_is_probed_then_declared_dead_within_the_liveness_time(run):
    async def main() -> None:
        seen: list[bytes] = []

        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await r.readuntil(b"\x00")
            w.write(b"CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00")
            data = b""
            with contextlib.suppress(OSError):
                while chunk := await r.read(4096):  # then silence: no heart-beat, no receipt
                    data += chunk
            seen.append(data)

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            link = await StompLink.open(
                Target("127.0.0.1", port), LinkOptions(heartbeat=0.2, liveness=0.6)
            )
            t0 = time.monotonic()
            reason = await asyncio.wait_for(asyncio.shield(link.closed), 5)
            elapsed = time.monotonic() - t0
            await link.wait_closed()
            assert "liveness timeout" in reason
            assert 0.55 <= elapsed <= 1.2, elapsed
            await until(lambda: bool(seen), 2)
            assert b"BEGIN\ntransaction:ws-probe-1" in seen[0] and b"ABORT\n" in seen[0]
        finally:
            server.close()

    run(main())


def test_a_slow_link_pauses_the_consumer_instead_of_buffering_without_bound(run):
    from wanproxy import WanProxy

    async def main() -> None:
        async with pair(Limits(max_body_size=1 << 20)) as p:
            wan = WanProxy(p.port).start()
            try:
                wan.set_bandwidth(8_000_000)
                br = p.bridge(targets=[Target("127.0.0.1", wan.port)], window=100)
                drains = 0
                drain = br._drain

                async def counted(link: StompLink, consumer: object) -> None:
                    nonlocal drains
                    drains += 1
                    await drain(link, consumer)  # type: ignore[arg-type]

                br._drain = counted  # type: ignore[method-assign]
                await br.start()
                body = b"z" * 300_000
                sent = [p.a.make_message("site-b::orders", body + b"%d" % i) for i in range(80)]
                for m in sent:
                    p.a.send(m)
                await until(lambda: len(p.received()) == 80, 30)
                assert p.received() == [m.body for m in sent]
                assert drains >= 1
            finally:
                for b in p.bridges:
                    await b.stop()
                await asyncio.get_running_loop().run_in_executor(None, wan.stop)

    run(main())
