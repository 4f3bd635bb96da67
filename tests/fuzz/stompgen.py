"""STOMP sessions for the fuzzers, drawn by hypothesis and encoded by wire/stomp.py: a
CONNECT (or STOMP) with the fuzz user's login, then SEND, SUBSCRIBE with selectors and
durable names, ACK, NACK, transactions, DISCONNECT; and ``relength``, which rewrites a
frame's content-length to anything (huge, negative, padded, not a number)."""

from __future__ import annotations

import asyncio
import re
from random import Random

from hypothesis import strategies as st

from fuzz.fuzzkit import PASSWORD, USER, draw
from fuzz.mutate import HUGE
from waystation.wire.stomp import Frame, StompParser, encode_frame

_dest = st.sampled_from(
    ["/queue/fz.a", "/queue/fz.b", "/topic/fz.t", "fz.c", "/queue/fz.a::fz.a", "/temp-queue/x"]
) | st.text(st.characters(codec="utf-8"), max_size=12).map(lambda s: "/queue/fz." + s)
_value = st.text(st.characters(codec="utf-8"), max_size=20)
_selector = st.sampled_from(
    ["a = 1", "color = 'red' AND weight > 2.5", "x IN ('a','b')", "y LIKE 'a%' ESCAPE '!'",
     "NOT (z BETWEEN 1 AND 3)", "JMSPriority > 4", "a IS NULL OR b IS NOT NULL", "((((", "'",
     "a = 1 AND " * 50 + "b = 2", "c = -9223372036854775809", "1/0 = 1"]
)  # fmt: skip
_ids = st.sampled_from(["0", "1", "s", "m-1", "x:y"])


@st.composite
def frame(draw_: st.DrawFn) -> bytes:
    kind = draw_(st.sampled_from(("SEND", "SEND", "SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK",
                                  "NACK", "BEGIN", "COMMIT", "ABORT", "DISCONNECT")))  # fmt: skip
    h: dict[str, str] = {}
    body = b""
    if kind == "SEND":
        h["destination"] = draw_(_dest)
        body = draw_(st.binary(max_size=300) | st.integers(0, 20_000).map(lambda n: b"b" * n))
        for k in draw_(st.lists(st.sampled_from(("content-type", "persistent", "expires",
                                                 "priority", "transaction", "receipt", "reply-to",
                                                 "x-custom")), max_size=4)):  # fmt: skip
            h[k] = draw_(_value | st.sampled_from(("true", "0", "9", "text/plain;charset=utf-8")))
    elif kind == "SUBSCRIBE":
        h["destination"] = draw_(_dest)
        h["id"] = draw_(_ids)
        h["ack"] = draw_(st.sampled_from(("auto", "client", "client-individual", "bogus")))
        if draw_(st.booleans()):
            h["selector"] = draw_(_selector)
        if draw_(st.booleans()):
            h["activemq.subscriptionName"] = draw_(_value)
    elif kind in ("UNSUBSCRIBE", "ACK", "NACK"):
        h["id"] = draw_(_ids)
    elif kind in ("BEGIN", "COMMIT", "ABORT"):
        h["transaction"] = draw_(st.sampled_from(("t1", "t2", "")))
    if draw_(st.booleans()):
        h["receipt"] = draw_(_ids)
    return encode_frame(kind, h, body, draw_(st.sampled_from(("1.0", "1.1", "1.2"))))


@st.composite
def connect(draw_: st.DrawFn) -> bytes:
    command = draw_(st.sampled_from(("CONNECT", "STOMP")))
    h = {
        "accept-version": draw_(st.sampled_from(("1.2", "1.1", "1.0", "1.0,1.1,1.2", "2.0", ""))),
        "host": "localhost",
        "login": USER,
        "passcode": PASSWORD,
    }
    if draw_(st.booleans()):
        h["heart-beat"] = draw_(st.sampled_from(("0,0", "100,100", "0,1", "x,y", "9999999999,1")))
    if draw_(st.booleans()):
        h["client-id"] = draw_(_value)
    return encode_frame(command, h)


_LENGTH = re.compile(rb"content-length:[^\n]*\n")


def relength(data: bytes, rng: Random) -> bytes | None:
    """``content-length`` set to a huge, negative, padded or non-numeric value (added to a
    frame that had none)."""
    value = rng.choice([str(rng.choice(HUGE)), "-1", "99999999999999999999", " 3", "x", ""])
    line = b"content-length:" + value.encode() + b"\n"
    if _LENGTH.search(data):
        return _LENGTH.sub(line, data, count=1)
    head, sep, rest = data.partition(b"\n")
    return head + sep + line + rest if sep else None


def sessions(rng: Random, n: int, seed: int) -> list[list[bytes]]:
    """``n`` sessions: a drawn login and one to eight drawn frames each."""
    connects, frames = draw(connect(), 20, seed), draw(frame(), n, seed)
    return [[rng.choice(connects), *rng.sample(frames, rng.randint(1, 8))] for _ in range(n)]


async def round_trip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A login and a receipt over ``reader``/``writer`` (closed after)."""
    try:
        writer.write(encode_frame("CONNECT", {"accept-version": "1.2", "host": "localhost",
                                              "login": USER, "passcode": PASSWORD}))  # fmt: skip
        writer.write(encode_frame("DISCONNECT", {"receipt": "bye"}))
        parser, got = StompParser(), list[Frame]()
        while not any(f.command == "RECEIPT" for f in got):
            data = await reader.read(65536)
            assert data, f"probe: closed after {got}"
            events = parser.feed(data) + parser.feed(b"")
            got += [f for f in events if isinstance(f, Frame)]
        assert got[0].command == "CONNECTED", got
    finally:
        writer.close()
