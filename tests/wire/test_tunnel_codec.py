"""The tunnel's sans-I/O offsets: duplicates, gaps, lost answers, ordering."""

from __future__ import annotations

import random

import pytest

from waystation.wire.tunnel import (
    DownstreamReceiver,
    DownstreamSender,
    OffsetError,
    Receiver,
    Sender,
    SessionInfo,
    UpstreamReceiver,
    UpstreamSender,
    parse_offset,
)


def test_receiver_takes_new_bytes_and_ignores_repeats():
    r = UpstreamReceiver()
    assert r.accept(0, b"hello") == b"hello"
    assert r.accept(0, b"hello") == b""  # a retried POST
    assert r.accept(3, b"lo world") == b" world"  # overlaps what it has
    assert r.received == 11
    assert r.accept(11, b"") == b""


def test_receiver_refuses_a_gap_and_says_where_to_resume():
    r = Receiver()
    r.accept(0, b"abc")
    with pytest.raises(OffsetError) as e:
        r.accept(5, b"xyz")
    assert e.value.expected == 3
    assert r.received == 3  # unchanged


def test_sender_keeps_bytes_until_acknowledged():
    s = DownstreamSender()
    s.push(b"one")
    s.push(b"two")
    assert s.window() == (0, b"onetwo")
    # the answer was lost: the client polls again with the same ack and gets the same bytes
    s.ack(0)
    assert s.window() == (0, b"onetwo")
    s.ack(3)  # part of it arrived
    assert s.window() == (3, b"two")
    s.push(b"three")
    s.ack(6)
    assert s.window() == (6, b"three")
    assert (s.acked, s.end, s.unacked) == (6, 11, 5)


def test_sender_ignores_stale_acks_and_refuses_acks_beyond_what_was_sent():
    s = Sender()
    s.push(b"abcdef")
    s.ack(4)
    s.ack(2)  # a late request from before: harmless
    assert s.window() == (4, b"ef")
    with pytest.raises(OffsetError) as e:
        s.ack(7)
    assert e.value.expected == 6


def test_sender_window_limit_splits_large_writes():
    s = UpstreamSender()
    s.push(b"x" * 10)
    s.push(b"y" * 10)
    assert s.window(15) == (0, b"x" * 10 + b"y" * 5)
    s.ack(15)
    assert s.window(15) == (15, b"y" * 5)


def test_stream_survives_random_loss_and_duplication_in_order():
    """Requests and answers lost or delivered twice at random: the receiver still gets the
    exact stream, once, in order."""
    rng = random.Random(7)
    sender, receiver = UpstreamSender(), DownstreamReceiver()
    sent = bytearray()
    got = bytearray()
    for i in range(3000):
        if rng.random() < 0.6:
            chunk = f"msg-{i};".encode()
            sender.push(chunk)
            sent += chunk
        offset, body = sender.window(rng.choice((None, 7, 64)))
        if rng.random() < 0.3:
            continue  # the request was lost on the way
        got += receiver.accept(offset, body)
        if rng.random() < 0.2:
            got += receiver.accept(offset, body)  # a proxy delivered it twice
        if rng.random() < 0.3:
            continue  # the answer (the acknowledgement) was lost
        sender.ack(receiver.received)
    while sender.unacked:
        offset, body = sender.window()
        got += receiver.accept(offset, body)
        sender.ack(receiver.received)
    assert bytes(got) == bytes(sent)


def test_parse_offset_is_precise():
    assert parse_offset("0", "ack") == 0
    assert parse_offset("123", "offset") == 123
    for bad, word in ((None, "required"), ("-1", "non-negative"), ("1e3", "non-negative")):
        with pytest.raises(ValueError, match=word):
            parse_offset(bad, "offset")
    with pytest.raises(ValueError, match="offset"):
        parse_offset("9" * 30, "offset")
    with pytest.raises(ValueError):
        parse_offset("١٢", "ack")  # non-ASCII digits
    # 19 digits fit the length check but not a signed 64-bit integer (found by fuzzing)
    assert parse_offset(str(2**63 - 1), "ack") == 2**63 - 1
    for too_big in (str(2**63), "9" * 19):
        with pytest.raises(ValueError, match="ack must be at most"):
            parse_offset(too_big, "ack")


def test_session_info_round_trip_and_validation():
    info = SessionInfo("A" * 22, 10.0, 60.0)
    assert SessionInfo.from_json(info.to_json()) == info
    for bad in ([], {"session": "short"}, {"session": "A" * 22, "response_time": "x"}):
        with pytest.raises(ValueError, match="tunnel open"):
            SessionInfo.from_json(bad)


@pytest.mark.parametrize(
    "field, value",
    [
        ("response_time", "nan"),  # found by fuzzing: float() takes these strings
        ("session_timeout", "-inf"),
        ("response_time", float("inf")),
        ("session_timeout", 0),
        ("response_time", -1.5),
    ],
)
def test_session_info_timing_must_be_finite_and_positive(field, value):
    data = SessionInfo("A" * 22, 10.0, 60.0).to_json() | {field: value}
    with pytest.raises(ValueError, match=f"tunnel open: {field} must be a finite positive"):
        SessionInfo.from_json(data)
