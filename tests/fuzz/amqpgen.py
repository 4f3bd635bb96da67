"""Valid AMQP 1.0 client streams, written by proton's engine, for the AMQP fuzzer.

A hypothesis-drawn :class:`Plan` (container, frame size, sessions and links of every kind:
senders, receivers with selectors and durable or dynamic sources, a transaction
coordinator; transfers of messages proton encodes, some with their payload mangled) is
played by a proton client against an in-memory proton server; what the client wrote is
the stream, split into units for mutate.py: the SASL header, the sasl-init frame (PLAIN,
the fuzz user), the AMQP header, then one unit per frame.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from random import Random
from typing import Any

from hypothesis import strategies as st
from proton import (
    Collector,
    Connection,
    Described,
    Endpoint,
    Event,
    Link,
    Message,
    Terminus,
    Transport,
    symbol,
)

from fuzz.fuzzkit import PASSWORD, USER
from fuzz.mutate import OPS
from waystation.gateway.amqp.sasl import mechanisms_frame, outcome_frame

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


@dataclass(frozen=True)
class LinkPlan:
    kind: str  # "sender", "receiver" or "coordinator"
    address: str | None
    settled: bool
    selector: str | None = None
    durable: bool = False
    dynamic: bool = False


@dataclass(frozen=True)
class Plan:
    container: str
    max_frame: int  # 0: proton's default
    idle_timeout: float
    sessions: int
    links: tuple[LinkPlan, ...]
    transfers: tuple[tuple[int, bytes, bool], ...]  # (link index, payload, settled)
    credit: int
    ending: str  # "close", "detach", "end" or "none"


_text = st.text(st.characters(codec="utf-8"), max_size=10)
_address = st.sampled_from(
    ["fz.a", "/queue/fz.b", "/topic/fz.t", "topic://fz.t", "queue://fz.c", "fz.a::fz.q", "", "#"]
) | _text.map(lambda t: "fz." + t)
_selector = st.sampled_from(["a = 1", "color IN ('r','g')", "((", "b LIKE '%x%'", "x > 1e400"])
_value = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | _text
    | st.binary(max_size=20) | st.uuids()
)  # fmt: skip
_body = (
    _value
    | st.lists(_value, max_size=4)
    | st.dictionaries(_text, _value, max_size=4)
    | st.integers(0, 70_000).map(lambda n: b"x" * n)
)


@st.composite
def _message(draw: st.DrawFn) -> bytes:
    m = Message(body=draw(_body))
    if draw(st.booleans()):
        m.properties = draw(st.dictionaries(_text, _value, max_size=4))  # type: ignore[assignment]
    if draw(st.booleans()):
        keys = st.text("abcxyz-.:", max_size=8).map(lambda k: symbol("x-opt-" + k))
        m.annotations = draw(st.dictionaries(keys, _value, max_size=2))  # type: ignore[assignment]
    m.durable = draw(st.booleans())
    m.priority = draw(st.integers(0, 9))
    if draw(st.booleans()):
        m.ttl = draw(st.floats(0, 1e6))
    m.subject = draw(st.none() | _text)  # type: ignore[assignment]
    m.content_type = draw(st.sampled_from([None, "text/plain", "application/json"]))  # type: ignore[assignment]
    data: bytes = m.encode()
    if draw(st.integers(0, 3)) == 0:  # a mangled payload in a well-formed transfer
        frames = [data]
        rng = Random(draw(st.integers(0, 2**32)))
        for _ in range(draw(st.integers(1, 3))):
            rng.choice(OPS)(frames, rng)
        data = b"".join(frames)
    return data


_declare = Message(body=Described(symbol("amqp:declare:list"), [])).encode()


def _discharge(fail: bool) -> bytes:
    return Message(body=Described(symbol("amqp:discharge:list"), [b"txn", fail])).encode()


_link = st.builds(
    LinkPlan,
    st.sampled_from(("sender", "sender", "receiver", "coordinator")),
    st.none() | _address,
    st.booleans(),
    st.none() | _selector,
    st.booleans(),
    st.booleans(),
)


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    links = tuple(draw(st.lists(_link, min_size=1, max_size=4)))
    senders = [i for i, lk in enumerate(links) if lk.kind != "receiver"]
    payload = _message() | st.sampled_from([_declare, _discharge(False), _discharge(True)])
    transfers: tuple[tuple[int, bytes, bool], ...] = ()
    if senders:
        transfers = tuple(draw(st.lists(
            st.tuples(st.sampled_from(senders), payload, st.booleans()), max_size=6)))  # fmt: skip
    return Plan(
        draw(st.sampled_from(["fz-c1", "fz-c2", ""]) | _text),
        draw(st.sampled_from((0, 512, 4096, 65536))),
        draw(st.sampled_from((0.0, 0.0, 5.0, 0.2))),
        draw(st.integers(1, 2)),
        links,
        transfers,
        draw(st.sampled_from((0, 1, 10, 2**31 - 1))),
        draw(st.sampled_from(("close", "detach", "end", "none"))),
    )


class _Server:
    """An in-memory proton server that opens whatever the client opens and gives credit."""

    def __init__(self) -> None:
        self.conn = Connection()
        self.transport = Transport(Transport.SERVER)
        self.transport.bind(self.conn)
        self.events = Collector()
        self.conn.collect(self.events)

    def handle(self) -> None:
        while True:
            e: Any = self.events.peek()  # proton's types make every field of it optional
            if e is None:
                return
            t = e.type
            if t == Event.CONNECTION_REMOTE_OPEN:
                self.conn.open()
            elif t == Event.SESSION_REMOTE_OPEN:
                e.session.open()
            elif t == Event.LINK_REMOTE_OPEN:
                link = e.link
                link.source.copy(link.remote_source)
                link.target.copy(link.remote_target)
                link.open()
                if link.is_receiver:
                    link.flow(1000)
            elif t == Event.DELIVERY and e.link.is_receiver:
                d = e.delivery
                if not d.partial:
                    e.link.recv(d.pending)
                    d.update(d.ACCEPTED)
                    d.settle()
                    e.link.advance()
            elif t in (Event.LINK_REMOTE_CLOSE, Event.SESSION_REMOTE_CLOSE,
                       Event.CONNECTION_REMOTE_CLOSE):  # fmt: skip
                ep = e.context
                if ep.state & Endpoint.LOCAL_ACTIVE:
                    ep.close()
            self.events.pop()


def record(plan: Plan) -> list[bytes]:
    """The client's stream for ``plan``, split into units (see the module doc)."""
    client = Connection()
    client.container = plan.container
    client.hostname = "localhost"
    client.user, client.password = USER, PASSWORD
    ct = Transport()
    sasl = ct.sasl()
    sasl.allowed_mechs("PLAIN")
    sasl.allow_insecure_mechs = True
    if plan.max_frame:
        ct.max_frame_size = plan.max_frame
    if plan.idle_timeout:
        ct.idle_timeout = plan.idle_timeout
    ct.bind(client)
    server = _Server()
    wrote = bytearray()

    def out() -> bytes:
        n = ct.pending()
        if n <= 0:
            return b""
        data = ct.peek(n) or b""
        ct.pop(n)
        wrote.extend(data)
        return data

    client.open()
    out()  # the SASL header
    ct.push(SASL_HEADER + mechanisms_frame(["PLAIN"]))
    out()  # sasl-init
    ct.push(outcome_frame(0))
    sasl_len = len(wrote)

    def pump() -> None:
        for _ in range(50):
            moved = False
            if data := out():
                _feed(server.transport, data)
                moved = True
            server.handle()
            n = server.transport.pending()
            if n > 0:
                _feed(ct, server.transport.peek(n) or b"")
                server.transport.pop(n)
                moved = True
            if not moved:
                return

    sessions = [client.session() for _ in range(plan.sessions)]
    for s in sessions:
        s.open()
    links: list[Link] = []
    for i, lp in enumerate(plan.links):
        ssn = sessions[i % len(sessions)]
        name = f"l{i}"
        link: Any
        if lp.kind == "receiver":
            link = ssn.receiver(name)
            link.source.address = lp.address
            link.source.dynamic = lp.dynamic
            if lp.durable:
                link.source.durability = Terminus.DELIVERIES
                link.source.expiry_policy = Terminus.EXPIRE_NEVER
            if lp.selector is not None:
                f = link.source.filter
                f.put_map()
                f.enter()
                f.put_symbol("jms-selector")
                f.put_described()
                f.enter()
                f.put_symbol("apache.org:selector-filter:string")
                f.put_string(lp.selector)
                f.exit()
                f.exit()
        else:
            link = ssn.sender(name)
            if lp.kind == "coordinator":
                link.target.type = Terminus.COORDINATOR
            else:
                link.target.address = lp.address
        if lp.settled:
            link.snd_settle_mode = Link.SND_SETTLED
        link.open()
        links.append(link)
    pump()
    for lk in links:
        if lk.is_receiver and plan.credit:
            lk.flow(plan.credit)
    for n, (i, payload, settled) in enumerate(plan.transfers):
        snd = links[i]
        dlv = snd.delivery(f"t{n}")
        snd.send(payload)
        snd.advance()
        if settled:
            dlv.settle()
        pump()
    if plan.ending == "detach":
        for lk in links:
            lk.close()
    elif plan.ending == "end":
        for s in sessions:
            s.close()
    elif plan.ending == "close":
        client.close()
    pump()
    return _units(bytes(wrote), sasl_len)


def _feed(transport: Transport, data: bytes) -> None:
    """Push ``data`` as fast as ``transport`` takes it (the rest is dropped once it closes)."""
    while data and (cap := transport.capacity()) > 0:
        transport.push(data[:cap])
        data = data[cap:]


def _units(stream: bytes, sasl_len: int) -> list[bytes]:
    units = [stream[:8], stream[8:sasl_len], stream[sasl_len : sasl_len + 8]]
    i = sasl_len + 8
    while i + 4 <= len(stream):
        (size,) = struct.unpack_from(">I", stream, i)
        units.append(stream[i : i + max(size, 8)])
        i += max(size, 8)
    return [u for u in units if u]
