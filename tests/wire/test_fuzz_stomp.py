"""Fuzzing the STOMP codec (wire/stomp.py) as a hostile peer would feed it.

Properties: any bytes, cut anywhere, only ever raise StompError (and the parser then stays
dead); every feed returns promptly and what the parser buffers stays within its frame limit;
valid frames, cut anywhere, give the same frames as when fed whole, equal to what was
encoded, on both the copying path and the in-place path for large remainders.

The default run is a bounded budget (seconds); ``-m fuzz`` runs the long budget.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from waystation.wire.stomp import (
    _JOIN_BELOW,
    HEARTBEAT,
    Frame,
    Heartbeat,
    Limits,
    StompError,
    StompParser,
    encode_frame,
)

LONG = [pytest.mark.fuzz, pytest.mark.timeout(3600)]  # opt in: -m fuzz
BUDGET = pytest.mark.parametrize(
    "examples",
    [pytest.param(150, id="quick"), pytest.param(20_000, id="long", marks=LONG)],
)
FEED_SECONDS = 2.0  # one feed of at most a few KiB; a parser that loops blows far past this
RESUME = ("CONNECT", "STOMP", "CONNECTED")

_pieces = st.sampled_from(
    [b"SEND", b"MESSAGE", b"CONNECT", b"STOMP", b"CONNECTED", b"\n", b"\r\n", b"\r", b":",
     b"\\", b"\\n", b"\\c", b"\\r", b"\\t", b"\0", b"x", b"content-length:",
     b"content-length:0", b"content-length: 4", b"content-length:99999999999999999999",
     b"9", b"\xff", b"\xc3\xa9", b"\xed\xa0\x80", b"\n\n", b"\r\n\r\n", b" ", b"\t",
     b"receipt:r", b"destination:/q"]
)  # fmt: skip
LIMITS = (
    Limits(max_frame_size=60, max_headers=3, max_header_length=16, max_body_size=20,
           max_command_length=8),
    Limits(max_frame_size=2048, max_headers=20, max_header_length=300, max_body_size=1024),
    # Over _JOIN_BELOW (16 KiB) a straddling remainder is parsed in place: hostile input
    # must meet the same checks on that path.
    Limits(max_frame_size=40_000, max_header_length=20_000, max_body_size=30_000),
)  # fmt: skip
hostile = (
    st.binary(max_size=400)
    | st.lists(_pieces, max_size=80).map(b"".join)
    | st.tuples(_pieces, st.integers(1, 3000)).map(lambda t: t[0] * t[1])
    | st.tuples(st.lists(_pieces, max_size=20), st.integers(1, 30_000)).map(
        lambda t: (b"SEND\n" + b"".join(t[0])) + b"y" * t[1] + b"".join(t[0])
    )
)


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    cuts = sorted(c for c in cuts if c <= len(data))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def _feed(p: StompParser, chunk: bytes, limits: Limits) -> list[Frame | Heartbeat]:
    """One feed (plus the drains after connect frames), timed and checked for growth."""
    out: list[Frame | Heartbeat] = []
    events = _timed(p, chunk)
    while events:
        out += events
        last = events[-1]
        events = _timed(p, b"") if isinstance(last, Frame) and last.command in RESUME else []
    # White-box on purpose: what an incomplete frame pins must stay within the frame limit
    # (+2 for a CR LF the parser has not yet classified), whatever the peer sends.
    assert len(p._buf) <= limits.max_frame_size + 2, (len(p._buf), limits)
    return out


def _timed(p: StompParser, chunk: bytes) -> list[Frame | Heartbeat]:
    t0 = time.monotonic()
    try:
        return p.feed(chunk)
    finally:
        assert time.monotonic() - t0 < FEED_SECONDS, f"feed of {len(chunk)} bytes was slow"


@BUDGET
def test_hostile_bytes_only_raise_stomp_errors(examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None)
    @given(
        data=hostile,
        cuts=st.lists(st.integers(0, 4000) | st.integers(0, 70_000), max_size=10),
        version=st.sampled_from(("1.0", "1.1", "1.2")),
        limits=st.sampled_from(LIMITS),
    )
    def run(data: bytes, cuts: list[int], version: str, limits: Limits) -> None:
        p = StompParser(limits)
        p.version = version
        try:
            for chunk in _cut(data, cuts):
                for e in _feed(p, chunk, limits):
                    if isinstance(e, Frame):
                        assert len(e.body) <= limits.max_body_size
                        assert len(e.headers) <= limits.max_headers
                        assert e.command.isprintable() and e.command
                    else:
                        assert e is HEARTBEAT
        except StompError as exc:
            assert exc.message and isinstance(exc.detail, str)
            with pytest.raises(StompError):  # a dead parser stays dead
                p.feed(b"\n")

    run()


_names = st.text(st.characters(codec="utf-8", blacklist_characters="\r"), min_size=1, max_size=12)
_values = st.text(st.characters(codec="utf-8", blacklist_characters="\r"), max_size=30)
_small_bodies = st.binary(max_size=60)
# Over _JOIN_BELOW, a remainder is parsed in place rather than copied: cover both paths.
_large_bodies = st.tuples(st.binary(min_size=1, max_size=16), st.integers(0, 3 * _JOIN_BELOW)).map(
    lambda t: (t[0] * (t[1] // len(t[0]) + 1))[: t[1]]
)
_commands = st.sampled_from(("SEND", "MESSAGE", "SUBSCRIBE", "ACK", "RECEIPT", "ERROR", "BEGIN"))


@st.composite
def _frames(draw: st.DrawFn) -> tuple[bytes, Frame]:
    command = draw(_commands)
    headers = draw(st.dictionaries(_names.filter(lambda n: n != "content-length"), _values,
                                   max_size=5))  # fmt: skip
    body = draw(_small_bodies | _large_bodies)
    mode = draw(st.sampled_from((None, True, False)))
    wire = encode_frame(command, headers, body, "1.2", content_length=mode)
    sent_length = (bool(body) if mode is None else mode) or b"\0" in body
    expect = {**headers, "content-length": str(len(body))} if sent_length else dict(headers)
    return wire, Frame(command, expect, body)


@BUDGET
def test_valid_frames_cut_anywhere_round_trip(examples: int) -> None:
    @settings(
        max_examples=max(20, examples // 3),
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        items=st.lists(_frames(), min_size=1, max_size=4),
        eols=st.lists(st.sampled_from((b"", b"\n", b"\r\n")), min_size=5, max_size=5),
        cuts=st.lists(st.integers(0, 4 * _JOIN_BELOW), max_size=8),
    )
    def run(items: list[tuple[bytes, Frame]], eols: list[bytes], cuts: list[int]) -> None:
        limits = Limits()
        stream = b"".join(eols[i] + wire for i, (wire, _) in enumerate(items))
        whole = StompParser(limits)
        whole.version = "1.2"
        chunked = StompParser(limits)
        chunked.version = "1.2"
        got_whole = [e for e in _feed(whole, stream, limits) if isinstance(e, Frame)]
        got_chunked: list[Frame | Heartbeat] = []
        for chunk in _cut(stream, cuts):
            got_chunked += _feed(chunked, chunk, limits)
        assert got_whole == [f for _, f in items]
        assert [e for e in got_chunked if isinstance(e, Frame)] == got_whole
        assert not chunked._buf, "nothing may stay buffered after complete frames"

    run()
