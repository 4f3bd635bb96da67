"""Attacks on links dialled from one side (``direction = "both"`` / ``"accept"``), in one
process: the hub's engine and real STOMP server with its AcceptedBridge, site-a's engine and
its two-way CoreBridge dialling the hub, and raw STOMP clients poking at the hub."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import pytest

from waystation.bridges.accepted import AcceptedBridge
from waystation.bridges.backoff import RetryPolicy
from waystation.bridges.core_bridge import CoreBridge
from waystation.bridges.dial import Target
from waystation.bridges.spec import BridgeSpec
from waystation.core.engine import Engine, EngineConfig
from waystation.core.message import Message
from waystation.core.settings import AddressSettings, FullPolicy
from waystation.gateway.stomp.server import stomp_server
from waystation.gateway.stomp.session import StompOptions
from waystation.gateway.stream import StreamServer
from waystation.wire.stomp import Limits

pytestmark = pytest.mark.timeout(60)


class Dial:
    """The hub (accepting site-a) and site-a (dialling the hub, both ways)."""

    def __init__(self, a: Engine, hub: Engine, server: StreamServer) -> None:
        self.a = a
        self.hub = hub
        self.server = server
        self.accepts: list[AcceptedBridge] = []
        self.dial: CoreBridge | None = None

    @property
    def port(self) -> int:
        assert self.server.server is not None
        return int(self.server.server.sockets[0].getsockname()[1])

    async def accept(self, name: str = "from-a", window: int = 20, **kw: object) -> AcceptedBridge:
        spec = BridgeSpec(
            name=name,
            remote_node="site-a",
            queue="sf.site-a",
            targets=[],
            accept=True,
            window=window,
            retry=RetryPolicy(0.05, 2.0, 0.2, -1),
        )
        for k, v in kw.items():
            setattr(spec, k, v)
        b = AcceptedBridge(self.hub, spec)
        self.accepts.append(b)
        await b.start()
        return b

    async def dial_in(self, window: int = 20, **kw: object) -> CoreBridge:
        spec = BridgeSpec(
            name="to-hub",
            remote_node="hub",
            queue="sf.hub",
            targets=[Target("127.0.0.1", self.port)],
            two_way=True,
            window=window,
            retry=RetryPolicy(0.05, 2.0, 0.2, -1),
            heartbeat=0.5,
            liveness_timeout=2.0,
        )
        for k, v in kw.items():
            setattr(spec, k, v)
        self.dial = CoreBridge(self.a, spec)
        await self.dial.start()
        return self.dial

    def send(self, engine: Engine, address: str, n: int, prefix: str = "m") -> list[bytes]:
        out = []
        for i in range(n):
            m = engine.make_message(address, f"{prefix}{i:05d}".encode(), {}, durable=True)
            engine.send(m)
            out.append(m.body)
        return out


def bodies(engine: Engine, queue: str) -> list[bytes]:
    q = engine.queue(queue)
    return [m.body for m in q.browse()] if q is not None else []


def browse(engine: Engine, queue: str) -> list[Message]:
    q = engine.queue(queue)
    return list(q.browse()) if q is not None else []


@contextlib.asynccontextmanager
async def dial_pair() -> AsyncIterator[Dial]:
    a = Engine(EngineConfig(node_name="site-a", remote_nodes={"hub"}))
    hub = Engine(EngineConfig(node_name="hub", remote_nodes={"site-a"}))
    await a.start()
    await hub.start()
    server = stomp_server(hub, "127.0.0.1", 0, StompOptions(Limits()))
    await server.start()
    d = Dial(a, hub, server)
    try:
        yield d
    finally:
        if d.dial is not None:
            await d.dial.stop()
        for b in d.accepts:
            await b.stop()
        await server.stop()
        await a.stop()
        await hub.stop()


async def until(pred: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"condition not met in time: {what}")
        await asyncio.sleep(0.01)


# -- sanity: the harness carries traffic both ways ------------------------------------------
def test_harness_carries_traffic_both_ways(run):
    async def main() -> None:
        async with dial_pair() as d:
            await d.accept()
            await d.dial_in()
            up = d.send(d.a, "hub::orders", 50, "u")
            down = d.send(d.hub, "site-a::orders", 50, "d")
            await until(lambda: len(bodies(d.hub, "orders")) == 50, what="up")
            await until(lambda: len(bodies(d.a, "orders")) == 50, what="down")
            assert bodies(d.hub, "orders") == up and bodies(d.a, "orders") == down

    run(main())


# -- BUG: reverse.py classifies its own typed refusals by a text heuristic ---------------------
def test_a_destination_name_with_timeout_in_it_does_not_wedge_the_link(run):
    """site-a refuses ``timeout-log`` (no such address, auto-create off): a permanent refusal,
    so the hub should dead-letter that one message and go on.  reverse.py feeds the text
    "unknown destination: address 'timeout-log' does not exist" to classify_error, which sees
    "timeout" and calls it transient: the link is closed, the hub resends the same message
    first on the next link, and both directions stall (until the in-doubt timeout, 5 min)."""

    async def main() -> None:
        async with dial_pair() as d:
            d.a.settings.set(
                "timeout-log",
                AddressSettings(auto_create_queues=False, auto_create_addresses=False),
            )
            d.hub.create_queue("DLQ")
            d.hub.settings.set("#", AddressSettings(dead_letter_address="DLQ"))
            await d.accept()
            d.send(d.hub, "site-a::timeout-log", 1, "poison")
            down = d.send(d.hub, "site-a::orders", 20, "d")
            dial = await d.dial_in()
            up = d.send(d.a, "hub::orders", 20, "u")
            await until(lambda: bodies(d.a, "orders") == down, 5, "the messages behind it")
            await until(lambda: bodies(d.hub, "orders") == up, 5, "the other direction")
            assert [m.properties["_WS_DLQ_REASON"] for m in browse(d.hub, "DLQ")] == [
                "invalid-remote-destination"
            ]
            assert dial._conn == 1  # one link: a permanent refusal does not end it

    run(main())


# -- BUG: a BLOCK-ed address at the hub stops the hub reading the ACKs of its own traffic ----
def test_a_blocked_address_at_the_hub_does_not_stall_traffic_to_the_site(run):
    """site-a's SENDs fill a BLOCK address at the hub, so the hub stops reading the
    connection (gateway/stomp/session.py pauses the transport).  On a two-way link that
    connection also carries site-a's ACKs for the hub's MESSAGEs: the hub's window fills and
    traffic to site-a stalls (a window per liveness timeout, when site-a's unanswered probes
    end the link) although nothing is wrong on that side."""

    async def main() -> None:
        async with dial_pair() as d:
            d.hub.settings.set(
                "orders", AddressSettings(max_size_bytes=2000, full_policy=FullPolicy.BLOCK)
            )
            await d.accept(window=10)
            dial = await d.dial_in(window=10)
            await until(lambda: d.accepts[0].state == "connected", 5, "dialled in")
            up = d.send(d.a, "hub::orders", 200, "u" + "." * 100)  # far over the hub's limit
            await until(lambda: d.hub.blocked("orders") is not None, 5, "hub address blocked")
            down = d.send(d.hub, "site-a::orders", 100, "d")
            await until(lambda: bodies(d.a, "orders") == down, 4, "traffic to the site")
            assert dial._conn == 1
            orders = d.hub.queue("orders")
            assert orders is not None
            got: list[bytes] = []
            while len(got) < 200:  # a consumer at the hub makes room
                got += [r.message.body for r in orders.take(lambda m: True)]
                await asyncio.sleep(0.02)
            assert got == up and dial._conn == 1

    run(main())


# -- BUG: two "accept" entries for one node: the first holds messages no link will carry ------
def test_two_accept_bridges_for_one_node_do_not_strand_messages(run):
    """Nothing refuses two ``direction = "accept"`` entries with the same remote_node.  Both
    consume sf.site-a, but ``engine.dial_ins`` keeps only the last one's ``offer``: the first
    takes a window of messages and holds them for good (no routing_timeout: forever)."""

    async def main() -> None:
        async with dial_pair() as d:
            await d.accept("from-a-1", window=5)
            await d.accept("from-a-2", window=5)
            down = d.send(d.hub, "site-a::orders", 30, "d")
            await d.dial_in()
            await until(lambda: sorted(bodies(d.a, "orders")) == down, 5, "all delivered")

    run(main())


# -- BUG: a message the dialling side's parser cannot read wedges the link ---------------------
def test_a_message_with_a_huge_property_does_not_wedge_the_link(run):
    """A property of 20 KB (an AMQP or MQTT producer at the hub may set one) makes a MESSAGE
    header line longer than the dialling link's parser takes (max_header_length 10240): site-a
    ends the link with a protocol error, the hub resends the same message first on the next
    link, and both directions stall until the in-doubt timeout.  A one-way bridge gets an
    ERROR for such a SEND and dead-letters it as message-too-large."""

    async def main() -> None:
        async with dial_pair() as d:
            d.hub.create_queue("DLQ")
            d.hub.settings.set("#", AddressSettings(dead_letter_address="DLQ"))
            await d.accept()
            big = d.hub.make_message("site-a::orders", b"big", {"note": "y" * 20000}, durable=True)
            d.hub.send(big)
            down = d.send(d.hub, "site-a::orders", 20, "d")
            dial = await d.dial_in()
            up = d.send(d.a, "hub::orders", 20, "u")
            await until(lambda: bodies(d.a, "orders") == down, 5, "the messages behind it")
            await until(lambda: bodies(d.hub, "orders") == up, 5, "the other direction")
            assert [m.properties["_WS_DLQ_REASON"] for m in browse(d.hub, "DLQ")] == [
                "message-too-large"
            ]
            assert dial._conn == 1

    run(main())


# -- BUG: the hub ending a link ("link closed") reads as a permanent refusal at site-a ---------
def test_the_hub_ending_the_link_never_dead_letters_the_sites_messages(run):
    """When the hub's accept bridge ends a link (stopped by a reload or at shutdown, or
    replaced by a newer link) the STOMP session sends ERROR "link closed".  site-a's link
    passes it to CoreBridge._on_refused with classify_error("link closed") = remote-rejected,
    a *permanent* reason for the message it cannot name: the first time the bridge enters
    careful mode, and the next time, with one careful message in flight, that message is
    dead-lettered at site-a although nothing was wrong with it."""

    async def main() -> None:
        async with dial_pair() as d:
            dlq = d.a.create_queue("DLQ")
            d.a.settings.set("#", AddressSettings(dead_letter_address="DLQ"))
            hub_side = await d.accept()
            dial = await d.dial_in(window=20)
            up = d.send(d.a, "hub::orders", 3000, "u")
            ended: list[object] = [None]

            def all_up() -> bool:
                return len(bodies(d.hub, "orders")) + dlq.depth >= 3000

            # up to 8 cuts, as long as messages are still on the way (a fast machine moves all
            # 3,000 after a few: the cuts after that would wait for entries that never come)
            for _ in range(8):  # what offer() does when a newer link replaces this one
                await until(
                    lambda: (
                        all_up()
                        or (hub_side._link not in (None, ended[-1]) and bool(dial._entries))
                    ),
                    5,
                )
                if all_up():
                    break
                await until(lambda: not dial._careful or dial._careful_tag is not None, 5)
                link = hub_side._link
                assert link is not None
                ended.append(link)
                link.close("replaced by a new link from site-a")
            await until(all_up, 8, "all up")
            assert len(ended) - 1 >= 2, "the link must be ended at least twice in the transfer"
            assert [m.properties.get("_WS_DLQ_REASON") for m in browse(d.a, "DLQ")] == []
            assert bodies(d.hub, "orders") == up and dial.dead_lettered == 0

    run(main())


# -- what held: raw clients poking at the hub's served link -----------------------------------
class Raw:
    """A bare STOMP 1.2 client: frames out, frames in (as (command, headers, body))."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buf = b""

    @classmethod
    async def connect(cls, port: int, **headers: str) -> Raw:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        raw = cls(r, w)
        raw.send("CONNECT", {"accept-version": "1.2", "host": "x", **headers})
        assert (await raw.recv())[0] == "CONNECTED"
        return raw

    def send(self, command: str, headers: dict[str, str]) -> None:
        head = "".join(f"{k}:{v}\n" for k, v in headers.items())
        self.writer.write(f"{command}\n{head}\n".encode() + b"\0")

    async def recv(self, timeout: float = 5.0) -> tuple[str, dict[str, str], bytes]:
        while True:
            self.buf = self.buf.lstrip(b"\r\n")
            head_end = self.buf.find(b"\n\n")
            if head_end >= 0:
                lines = self.buf[:head_end].decode().split("\n")
                headers = dict(line.split(":", 1) for line in lines[1:])
                start = head_end + 2
                n = int(headers.get("content-length", -1))
                end = start + n if n >= 0 else self.buf.find(b"\0", start)
                if end >= 0 and len(self.buf) > end:
                    body, self.buf = self.buf[start:end], self.buf[end + 1 :]
                    return lines[0], headers, body
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not data:
                raise EOFError
            self.buf += data

    def close(self) -> None:
        self.writer.close()


def subscribe_link(raw: Raw) -> None:
    raw.send(
        "SUBSCRIBE",
        {"id": "ws-link", "destination": "ws-link", "ack": "client-individual",
         "ws-link": "back", "receipt": "ws-link"},
    )  # fmt: skip


def test_a_client_without_a_served_link_cannot_ack_the_links_messages(run):
    """An ACK/NACK with a ``ws-link-<tag>`` id on another connection is that connection's own
    (unknown) ack: an ERROR for it, nothing confirmed or dead-lettered at the hub."""

    async def main() -> None:
        async with dial_pair() as d:
            hub_side = await d.accept(window=5)
            d.send(d.hub, "site-a::orders", 20, "d")
            site = await Raw.connect(d.port, **{"ws-node": "site-a"})
            subscribe_link(site)
            got = [await site.recv() for _ in range(6)]  # RECEIPT + a window of 5
            assert got[0][0] == "RECEIPT" and [g[0] for g in got[1:]] == ["MESSAGE"] * 5
            acks = [g[1]["ack"] for g in got[1:]]
            other = await Raw.connect(d.port)
            other.send("ACK", {"id": acks[0]})
            other.send("NACK", {"id": acks[1], "ws-reason": "remote-rejected"})
            assert (await other.recv())[0] == "ERROR"
            assert len(hub_side._entries) == 5 and hub_side.dead_lettered == 0
            assert hub_side.forwarded == 0
            site.send("ACK", {"id": acks[0]})
            await until(lambda: hub_side.forwarded == 1, 5, "the site's own ACK counts")
            site.close()
            other.close()

    run(main())


@pytest.mark.parametrize(
    "end",
    ["disconnect-receipt", "unsubscribe", "subscribe-twice", "vanish"],
)
def test_a_served_connection_ending_any_way_gives_everything_back(run, end: str):
    """However the dialled-in connection ends mid-window, the hub goes back to waiting and
    the next link gets every message once, in order; nothing is left behind per connection."""

    async def main() -> None:
        async with dial_pair() as d:
            hub_side = await d.accept(window=5)
            down = d.send(d.hub, "site-a::orders", 20, "d")
            site = await Raw.connect(d.port, **{"ws-node": "site-a"})
            subscribe_link(site)
            got = [await site.recv() for _ in range(6)]
            site.send("ACK", {"id": got[1][1]["ack"]})  # one confirmed, four in flight
            if end == "disconnect-receipt":
                site.send("DISCONNECT", {"receipt": "bye"})
            elif end == "unsubscribe":
                site.send("UNSUBSCRIBE", {"id": "ws-link"})
            elif end == "subscribe-twice":
                subscribe_link(site)
            else:
                site.writer.transport.abort()
            await until(lambda: hub_side.state == "waiting", 5, "waiting again")
            assert hub_side._link is None and hub_side._offers.empty()
            site.close()
            await d.dial_in()
            await until(lambda: bodies(d.a, "orders") == down[1:], 5, "the rest, once, in order")
            assert hub_side.dead_lettered == 0

    run(main())


# -- BUG: site-a's own full address ends the link again and again, both ways -------------------
def test_a_full_address_at_the_site_holds_its_traffic_without_ending_the_link(run):
    """site-a's ``full`` address is full (FAIL policy).  reverse.py ends the link on the
    message for it; the hub resends it first on the next link, which ends again: a reconnect
    storm (about 100 links a second while site-a has traffic to send up; site-a's own
    traffic is cut and resent each time).  Holding that message un-ACKed (the hub's window
    stops it) and trying again keeps the link, and everything arrives once and in order."""

    async def main() -> None:
        async with dial_pair() as d:
            d.a.settings.set(
                "full", AddressSettings(max_size_bytes=500, full_policy=FullPolicy.FAIL)
            )
            full = d.a.create_queue("full")
            await d.accept()
            dial = await d.dial_in()
            down = d.send(d.hub, "site-a::full", 12, "f" + "." * 100)
            up = d.send(d.a, "hub::orders", 500, "u")
            await until(lambda: bodies(d.hub, "orders") == up, 5, "site-a's traffic")
            assert dial._conn == 1
            got: list[bytes] = []
            while len(got) < 12:  # a consumer makes room
                got += [r.message.body for r in full.take(lambda m: True)]
                await asyncio.sleep(0.05)
            assert got == down and dial._conn == 1

    run(main())


def test_the_config_refuses_a_second_bridge_on_an_accepted_nodes_queue():
    """The file-level half of the stranded-window bug above: refused at load (and reload)."""
    from waystation.config import ConfigError, parse_config

    def entry(name: str, direction: str) -> str:
        urls = "" if direction == "accept" else 'urls = ["tcp://127.0.0.1:1"]\n'
        return (
            f'\n[[bridges]]\nname = "{name}"\nremote_node = "site-a"\n'
            f'direction = "{direction}"\n{urls}'
        )

    node = '[node]\nname = "hub"\npersistence = false\n'
    for second in ("accept", "outbound"):
        with pytest.raises(ConfigError) as e:
            parse_config(node + entry("a1", "accept") + entry("a2", second))
        assert "already drains 'sf.site-a'" in str(e.value)
