"""AMQP 1.0 fuzzed against a real node, in two parts.

``sasl``: the SASL exchange, structure-aware: protocol headers of every kind, sasl-init
frames (encoded by proton's Data) with any mechanism, PLAIN responses of any shape, any
hostname, unsolicited SASL frames, AMQP frames in the SASL phase, frame headers with any
size, data offset and type; sometimes followed by a valid AMQP opening.
``frames``: whole conversations written by proton's engine (amqpgen.py: open, begin,
attach of senders, receivers and coordinators, transfers, detach/end/close), three in four
mutated (mutate.py, plus frame sizes, data offsets, types and header versions rewritten).
Either way the node stays up, answers the bystander and a fresh proton client's round trip
after every batch, and frees what the fuzz took."""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Iterator
from random import Random

import pytest
from hypothesis import strategies as st
from proton import Data, Message
from proton.utils import BlockingConnection

from fuzz.amqpgen import AMQP_HEADER, SASL_HEADER, plans, record
from fuzz.campaign import check, fuzz, fuzz_seed
from fuzz.fuzzkit import ANSWER_SECONDS, LONG, PASSWORD, USER, Batch, FuzzNode, Tally, draw, pool
from fuzz.mutate import HUGE, stream_batches

PAUSE = 0.005  # between chunks: the node's answers (mechanisms, outcome) interleave


def _sasl_frame(performative: int, fields: list[object], ftype: int = 1, doff: int = 2) -> bytes:
    d = Data()
    d.put_described()
    d.enter()
    d.put_ulong(performative)
    d.put_list()
    d.enter()
    for f in fields:
        if isinstance(f, bytes):
            d.put_binary(f)
        elif isinstance(f, str):
            d.put_symbol(f) if f.isascii() else d.put_string(f)
        elif f is None:
            d.put_null()
        else:
            d.put_ubyte(int(f))  # type: ignore[call-overload]
    d.exit()
    d.exit()
    body = d.encode()
    return (
        struct.pack(">IBBH", 8 + (doff - 2) * 4 + len(body), doff, ftype, 0)
        + (b"\0" * ((doff - 2) * 4))
        + body
    )


_headers = st.sampled_from(
    [SASL_HEADER, SASL_HEADER, SASL_HEADER, AMQP_HEADER, b"AMQP\x02\x01\x00\x00",
     b"AMQP\x03\x01\x00\x01", b"AMQP\x03\x00\x09\x01", b"AMQP", b"GET / HTTP/1.1\r\n\r\n",
     b"\x00" * 8]
)  # fmt: skip
_mech = st.sampled_from(["PLAIN", "PLAIN", "ANONYMOUS", "EXTERNAL", "SCRAM-SHA-256", "plain",
                         "", "PLAIN" * 100]) | st.text(max_size=10)  # fmt: skip
_response = st.sampled_from(
    [f"\0{USER}\0{PASSWORD}".encode(), f"{USER}\0{USER}\0{PASSWORD}".encode(),
     f"\0{USER}\0wrong".encode(), f"{USER}\0{PASSWORD}".encode(), b"\0\0\0", b"", b"\0\xff\0\xfe",
     b"\0" + b"u" * 5000 + b"\0p"]
) | st.binary(max_size=40)  # fmt: skip
_init = st.builds(
    lambda m, r, h, t, o: _sasl_frame(0x41, [m, r, h], t, o),
    _mech,
    st.none() | _response,
    st.none() | st.sampled_from(["localhost", "", "h" * 300]),
    st.sampled_from([1, 1, 1, 0, 2]),
    st.sampled_from([2, 2, 2, 0, 1, 3, 255]),
)
_other = st.sampled_from(
    [_sasl_frame(0x43, [b"resp"]), _sasl_frame(0x40, ["PLAIN"]), _sasl_frame(0x44, [0]),
     _sasl_frame(0x42, [b"c"]),
     _sasl_frame(0x10, ["c"], ftype=0), struct.pack(">IBBH", 8, 2, 1, 0),
     struct.pack(">IBBH", 2**32 - 1, 2, 1, 0), struct.pack(">IBBH", 4097, 2, 1, 0) + b"x" * 4089]
)  # fmt: skip


@st.composite
def _sasl_session(draw_: st.DrawFn) -> list[bytes]:
    units = [draw_(_headers)]
    units += draw_(st.lists(_other, max_size=2))
    units += draw_(st.lists(_init, min_size=0, max_size=2))
    units += draw_(st.lists(_other, max_size=1))
    return units


def relength(unit: bytes, rng: Random) -> bytes | None:
    """A frame's size, data offset or type (or a protocol header's version) rewritten."""
    if unit.startswith(b"AMQP") and len(unit) == 8:
        return unit[:4] + bytes(rng.randrange(256) for _ in range(4))
    if len(unit) < 8:
        return None
    which = rng.randrange(3)
    if which == 0:
        size = rng.choice(HUGE + (len(unit) - 1, len(unit) + 1, len(unit) + 4096))
        return struct.pack(">I", min(size, 2**32 - 1)) + unit[4:]
    if which == 1:
        return unit[:4] + bytes((rng.choice((0, 1, 3, 64, 255)),)) + unit[5:]
    return unit[:5] + bytes((rng.randrange(256),)) + unit[6:]


def batches(part: str, seed: int, cases: int, tally: Tally, port: int) -> Iterator[Batch]:
    rng = Random(seed)
    conversations = [record(p) for p in draw(plans(), pool(cases) // 2, seed)]
    if part == "sasl":
        sessions = draw(_sasl_session(), pool(cases), seed)
        # a third go on with a proton-written AMQP opening after their SASL units
        sessions = [s + rng.choice(conversations)[2:] if rng.random() < 0.33 else s
                    for s in sessions]  # fmt: skip
        return stream_batches(rng, cases, sessions, tally, port, relength, 0.5, PAUSE)
    return stream_batches(rng, cases, conversations, tally, port, relength, 0.75, PAUSE)


def _round_trip(url: str) -> None:
    c = BlockingConnection(url, timeout=ANSWER_SECONDS, user=USER, password=PASSWORD)
    try:
        r = c.create_receiver("/queue/fz.probe")
        s = c.create_sender("/queue/fz.probe")
        body = uuid.uuid4().hex
        s.send(Message(body=body))
        while r.receive(timeout=ANSWER_SECONDS).body != body:
            r.accept()
        r.accept()
    finally:
        c.close()


async def probe(port: int) -> None:
    """A fresh proton client: login, a message sent and received."""
    await asyncio.to_thread(_round_trip, f"amqp://127.0.0.1:{port}")


@pytest.mark.parametrize(("part", "cases"), [
    pytest.param("sasl", 800, id="quick-sasl"),
    pytest.param("frames", 800, id="quick-frames"),
    pytest.param("sasl", 20_000, id="long-sasl", marks=LONG),
    pytest.param("frames", 20_000, id="long-frames", marks=LONG),
])  # fmt: skip
def test_amqp_node_survives_fuzz(tmp_path, run, part: str, cases: int) -> None:
    node = FuzzNode(tmp_path / "n").start()
    try:
        seed, tally = fuzz_seed(), Tally()
        work = batches(part, seed, cases, tally, node.amqp_port)
        report = run(
            fuzz(node, f"amqp {part}", seed, work, lambda: probe(node.amqp_port), tally),
            timeout=3 * 3600,
        )
        check(report, node)
    finally:
        node.stop()
