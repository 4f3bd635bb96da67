"""A client that pipelines its whole opening (SASL header, sasl-init, the AMQP header,
``open``, ``begin``, ``attach``, a ``transfer``) in one write, without waiting for any
answer, against a real node: everything behind the sasl-init is served once the login
succeeds, nothing is dropped; a failed login ends the connection instead."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from amqpnode import AmqpNode
from proton import Collector, Connection, Message, Transport
from proton.utils import BlockingConnection

from waystation.gateway.amqp.codec import Described, Symbol, decode_value, encode
from waystation.gateway.amqp.sasl import (
    AMQP_HEADER,
    INIT,
    MECHANISMS,
    OUTCOME,
    SASL_HEADER,
    frame,
)

OPEN, BEGIN, ATTACH, FLOW, TRANSFER, DISPOSITION, CLOSE = (
    0x10,
    0x11,
    0x12,
    0x13,
    0x14,
    0x15,
    0x18,
)
ACCEPTED = 0x24


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    n = AmqpNode(tmp_path_factory.mktemp("amqp-pipe-s"), secure=True).start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def open_node(tmp_path_factory):
    n = AmqpNode(tmp_path_factory.mktemp("amqp-pipe")).start()
    yield n
    n.stop()


def sasl_init(mechanism: str, response: bytes | None) -> bytes:
    fields = [encode(Symbol(mechanism))]
    if response is not None:
        fields.append(encode(response))
    return frame(INIT, fields)


def amqp_opening(address: str, body: str, source: str | None = None) -> tuple[bytes, bytes]:
    """What proton's client writes: (its AMQP header, ``open``, ``begin``, the attach of a
    sender to ``address`` and, with ``source``, of a receiver from it with 1 credit; then
    the sender's first transfer).  Produced against an in-memory proton server that
    grants credit, so the bytes are a real client's; none of the first part depends on
    any answer, so a client may pipeline it; the transfer needs the node's credit first."""
    cc, ct = Connection(), Transport()
    cc.container = "pipelining-client"
    ct.bind(cc)
    ssn = cc.session()
    cc.open()
    ssn.open()
    snd = ssn.sender("pipelined")
    snd.target.address = address
    snd.open()
    if source is not None:
        rcv = ssn.receiver("pipelined-in")
        rcv.source.address = source
        rcv.open()
        rcv.flow(1)
    opening = ct.peek(ct.pending())
    ct.pop(len(opening))
    sc, st, events = Connection(), Transport(Transport.SERVER), Collector()
    sc.collect(events)
    st.bind(sc)
    st.push(opening)
    for _ in range(20):
        while events.peek() is not None:
            ev = events.peek()
            for ep in (ev.connection, ev.session, ev.link):
                if ep is not None and ep.state & ep.LOCAL_UNINIT and ep.state & ep.REMOTE_ACTIVE:
                    ep.open()
                    if ep is ev.link and ep.is_receiver:
                        ep.flow(10)
            events.pop()
        n = st.pending()
        if n > 0:
            ct.push(st.peek(n))
            st.pop(n)
        if snd.credit > 0:
            break
    assert snd.credit > 0 and opening.startswith(AMQP_HEADER)
    n = ct.pending()
    if n > 0:  # anything the client says on receiving the answers (nothing, usually)
        ct.pop(n)
    snd.delivery(b"1")
    snd.send(Message(body=body, durable=True).encode())
    snd.advance()
    transfer = ct.peek(ct.pending())
    return opening, transfer


def performatives(data: bytes) -> list[tuple[int, object]]:
    """The frames of ``data`` (SASL or AMQP, after the 8-byte protocol headers) as
    (performative code, its fields); stops at an incomplete frame."""
    out: list[tuple[int, object]] = []
    pos = 0
    while pos + 8 <= len(data):
        if data[pos : pos + 4] == b"AMQP":
            out.append((-1, data[pos : pos + 8]))  # a protocol header
            pos += 8
            continue
        size, doff = struct.unpack_from(">IB", data, pos)
        if pos + size > len(data):
            break
        if size > doff * 4:  # not an empty (heartbeat) frame
            perf, _ = decode_value(data[pos + doff * 4 : pos + size], 0)
            assert isinstance(perf, Described)
            out.append((int(perf.descriptor), perf.value))
        pos += size
    return out


class Raw:
    """A raw socket to the node's AMQP port that collects everything the node writes."""

    def __init__(self, node: AmqpNode) -> None:
        self.sock = socket.create_connection(("127.0.0.1", node.amqp_port), timeout=5)
        self.got = b""
        self.closed = False

    def send(self, *writes: bytes) -> None:
        for w in writes:  # back to back, without reading
            self.sock.sendall(w)

    def frames(self) -> list[tuple[int, object]]:
        return performatives(self.got)

    def read_until(self, *codes: int, limit: float = 5.0) -> list[tuple[int, object]]:
        """Read until each of ``codes`` has arrived, the node closes or ``limit`` passes."""
        deadline = time.monotonic() + limit
        while not self.closed and time.monotonic() < deadline:
            seen = _codes(self.frames())
            if all(c in seen for c in codes):
                break
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                self.closed = True
            self.got += chunk
        return self.frames()

    def close(self) -> None:
        self.sock.close()


def _codes(frames: list[tuple[int, object]]) -> list[int]:
    return [code for code, _ in frames]


def _send(node: AmqpNode, address: str, body: str, user: str | None = None) -> None:
    c = BlockingConnection(_url(node, user), timeout=5, allowed_mechs="PLAIN" if user else None)
    try:
        c.create_sender(address).send(Message(body=body))
    finally:
        c.close()


def _received(node: AmqpNode, address: str, user: str | None = None) -> object:
    c = BlockingConnection(_url(node, user), timeout=5, allowed_mechs="PLAIN" if user else None)
    try:
        rcv = c.create_receiver(address)
        m = rcv.receive(timeout=5)
        rcv.accept()
        return m.body
    finally:
        c.close()


def _url(node: AmqpNode, user: str | None) -> str:
    return node.url if user is None else node.url.replace("amqp://", f"amqp://{user}@")


def _opened(frames: list[tuple[int, object]], *then: int) -> list[int]:
    """SASL answered (ok), the AMQP header, then open, begin and ``then`` in that order;
    returns the AMQP codes."""
    codes = _codes(frames)
    assert codes[:4] == [-1, MECHANISMS, OUTCOME, -1], codes
    assert frames[0][1] == SASL_HEADER and frames[3][1] == AMQP_HEADER
    assert frames[2][1][0] == 0  # sasl-outcome ok
    amqp = codes[4:]
    order = [OPEN, BEGIN, *then]
    for code in order:
        assert code in amqp, (hex(code), codes)
    assert [amqp.index(c) for c in order] == sorted(amqp.index(c) for c in order), codes
    return amqp


def _accepted(raw: Raw, transfer: bytes) -> None:
    """The sender's transfer, written once the node gave credit, is accepted (settled)."""
    raw.send(transfer)
    frames = raw.read_until(DISPOSITION)
    disposition = [v for code, v in frames if code == DISPOSITION]
    assert disposition, _codes(frames)
    assert disposition[0][3] is True and disposition[0][4].descriptor == ACCEPTED


def test_a_pipelined_opening_is_served_after_a_checked_login(secure):
    """Security on: the password is checked off the loop; what came in the same write as
    the sasl-init (the AMQP header, open, begin, two attaches, the receiver's credit)
    waits for the check, then is served: the receiver gets its message at once."""
    _send(secure, "/queue/pipe-in", "waiting", "app:secret")
    opening, transfer = amqp_opening("/queue/pipe-out", "in one write", "/queue/pipe-in")
    raw = Raw(secure)
    try:
        raw.send(SASL_HEADER + sasl_init("PLAIN", b"\0app\0secret") + opening)
        frames = raw.read_until(OPEN, BEGIN, ATTACH, FLOW, TRANSFER)
        amqp = _opened(frames, ATTACH, TRANSFER)
        assert amqp.count(ATTACH) == 2 and FLOW in amqp
        _accepted(raw, transfer)
        assert not raw.closed
    finally:
        raw.close()
    assert _received(secure, "/queue/pipe-out", "app:secret") == "in one write"


def test_the_rest_arriving_while_the_login_is_checked_is_served_in_order(secure):
    opening, transfer = amqp_opening("/queue/pipe-out2", "second write")
    raw = Raw(secure)
    try:
        # the sasl-init with the first bytes of the AMQP header, the rest right behind it
        init = sasl_init("PLAIN", b"\0app\0secret")
        raw.send(SASL_HEADER + init + opening[:5], opening[5:])
        _opened(raw.read_until(OPEN, BEGIN, ATTACH, FLOW), ATTACH, FLOW)
        _accepted(raw, transfer)
    finally:
        raw.close()
    assert _received(secure, "/queue/pipe-out2", "app:secret") == "second write"


def test_a_pipelined_opening_with_a_wrong_password_is_refused_not_served(secure):
    opening, _ = amqp_opening("/queue/pipe-refused", "never")
    raw = Raw(secure)
    try:
        raw.send(SASL_HEADER + sasl_init("PLAIN", b"\0app\0wrong") + opening)
        frames = raw.read_until(OPEN)
    finally:
        raw.close()
    assert _codes(frames) == [-1, MECHANISMS, OUTCOME]  # no AMQP header, no open
    assert frames[2][1][0] == 1  # auth failed
    assert raw.closed


def test_a_pipelined_anonymous_opening_is_served_while_security_is_off(open_node):
    """Security off: the login is answered at once, within the same read."""
    _send(open_node, "/queue/pipe-in", "waiting")
    opening, transfer = amqp_opening("/queue/pipe-anon", "anonymous", "/queue/pipe-in")
    raw = Raw(open_node)
    try:
        raw.send(SASL_HEADER + sasl_init("ANONYMOUS", None) + opening)
        _opened(raw.read_until(OPEN, BEGIN, ATTACH, FLOW, TRANSFER), ATTACH, TRANSFER)
        _accepted(raw, transfer)
    finally:
        raw.close()
    assert _received(open_node, "/queue/pipe-anon") == "anonymous"
