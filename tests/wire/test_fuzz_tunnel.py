"""Fuzzing the HTTP tunnel's offset bookkeeping (wire/tunnel.py) with hostile offsets.

A peer (or a proxy in between) may replay, drop, reorder or invent offsets.  Properties:
``parse_offset`` turns any text into a bounded non-negative int or a ValueError naming the
parameter; the receiver's output is always exactly a prefix of the sent stream, whatever
offsets and bodies arrive; a refused offset (OffsetError) changes no state and names the
offset to resume from; the sender keeps exactly the unacknowledged bytes.

The default run is a bounded budget (seconds); ``-m fuzz`` runs the long budget.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from waystation.wire.tunnel import (
    MAX_OFFSET,
    MAX_OFFSET_DIGITS,
    SESSION_ID,
    TOKEN,
    OffsetError,
    Receiver,
    Sender,
    SessionInfo,
    parse_offset,
)

LONG = [pytest.mark.fuzz, pytest.mark.timeout(3600)]  # opt in: -m fuzz
BUDGET = pytest.mark.parametrize(
    "examples",
    [pytest.param(200, id="quick"), pytest.param(10_000, id="long", marks=LONG)],
)


@BUDGET
def test_parse_offset_any_text(examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None)
    @given(
        value=st.none()
        | st.text(max_size=40)
        | st.integers(-(10**25), 10**25).map(str)
        | st.from_regex(r"\A[0-9 +_\-]{0,25}\Z")
    )
    @example(value="9" * MAX_OFFSET_DIGITS)  # 19 digits, above 2**63 - 1: was accepted
    @example(value=str(MAX_OFFSET))
    def run(value: str | None) -> None:
        try:
            n = parse_offset(value, "ack")
        except ValueError as e:
            assert "ack" in str(e) and len(str(e)) < 500  # names the parameter; echo of 40 chars
            return
        assert value is not None and value.isascii() and value.isdigit()
        assert n == int(value) and 0 <= n <= MAX_OFFSET

    run()


_op = st.one_of(
    st.tuples(st.just("push"), st.binary(min_size=1, max_size=50)),
    st.tuples(st.just("deliver"), st.sampled_from((None, 1, 7, 64)), st.booleans()),
    st.tuples(st.just("forge"), st.integers(-5, 200) | st.integers(0, 10**20), st.integers(0, 30)),
    st.tuples(st.just("ack"), st.booleans()),
    st.tuples(st.just("forge_ack"), st.integers(-5, 10**20)),
)


@BUDGET
def test_offsets_replayed_dropped_and_forged(examples: int) -> None:
    @settings(max_examples=max(20, examples // 2), deadline=None, database=None)
    @given(ops=st.lists(_op, max_size=60))
    def run(ops: list[tuple[object, ...]]) -> None:
        sender, receiver = Sender(), Receiver()
        sent = bytearray()
        got = bytearray()
        in_flight: list[tuple[int, bytes]] = []  # requests a proxy may replay late
        for op in ops:
            kind = op[0]
            if kind == "push":
                data = op[1]
                assert isinstance(data, bytes)
                sender.push(data)
                sent += data
            elif kind == "deliver":
                limit, replay = op[1], op[2]
                assert limit is None or isinstance(limit, int)
                offset, body = sender.window(limit)
                assert offset == sender.acked
                assert body == bytes(sent[offset : offset + (limit or len(sent))])
                in_flight.append((offset, body))
                offset, body = in_flight[0] if replay else in_flight[-1]
                before = receiver.received
                try:
                    got += receiver.accept(offset, body)
                except OffsetError as e:  # a forged ack skipped bytes the receiver lacks
                    assert offset > before and e.expected == before
                    assert receiver.received == before
            elif kind == "forge":
                # Any offset; the body is what the stream really holds there (a late replay
                # cut anywhere), or bytes past what was sent when the offset leaves a hole.
                at, size = op[1], op[2]
                assert isinstance(at, int) and isinstance(size, int)
                at = max(0, at)
                before = receiver.received
                hole = at > before
                body = b"?" * (size + 1) if hole else bytes(sent[at : at + size])
                try:
                    got += receiver.accept(at, body)
                except OffsetError as e:
                    assert at > before and e.expected == before
                    assert receiver.received == before
                    continue
                assert at <= before
            elif kind == "ack":
                if op[1] and receiver.received <= sender.end:
                    sender.ack(receiver.received)
            else:
                claim = op[1]
                assert isinstance(claim, int)
                acked, end, unacked = sender.acked, sender.end, sender.unacked
                try:
                    sender.ack(claim)
                except OffsetError as e:
                    assert claim > end and e.expected == end
                    assert (sender.acked, sender.end, sender.unacked) == (acked, end, unacked)
                    continue
                assert sender.acked == max(acked, claim)
            # The invariants, whatever happened:
            assert bytes(got) == bytes(sent[: len(got)]), "receiver output is a prefix"
            assert receiver.received == len(got)
            assert sender.unacked == sender.end - sender.acked
            assert sender.window()[1] == bytes(sent[sender.acked : sender.end])

    run()


@BUDGET
def test_session_info_from_any_json(examples: int) -> None:
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=10,
    )
    fields = st.fixed_dictionaries(
        {},
        optional={
            "session": st.text(max_size=30) | st.from_regex(SESSION_ID, fullmatch=True),
            "token": st.text(max_size=50) | st.from_regex(TOKEN, fullmatch=True),
            "response_time": json_values,
            "session_timeout": json_values,
        },
    )

    @settings(max_examples=examples, deadline=None, database=None)
    @given(data=json_values | fields)
    @example(data={"session": "A" * 22, "response_time": "nan", "session_timeout": 60})
    @example(data={"session": "A" * 22, "response_time": 10, "session_timeout": "-inf"})
    def run(data: object) -> None:
        try:
            info = SessionInfo.from_json(data)
        except ValueError as e:
            assert str(e).startswith("tunnel open:")
            return
        assert isinstance(data, dict) and info.session == data["session"]
        assert info.token in ("", data.get("token"))
        for seconds in (info.response_time, info.session_timeout):
            assert math.isfinite(seconds) and seconds > 0

    run()
