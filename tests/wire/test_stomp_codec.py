"""Tests for the sans-I/O STOMP codec: round-trips, chunking, limits, every error path, fuzz."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from waystation.wire.stomp import (
    HEARTBEAT,
    HEARTBEAT_BYTES,
    Frame,
    Heartbeat,
    Limits,
    StompError,
    StompParser,
    encode_frame,
    encode_message,
)

Event = Frame | Heartbeat
VERSIONS = ("1.0", "1.1", "1.2")
COMMANDS = ("SEND", "MESSAGE", "SUBSCRIBE", "ACK", "NACK", "RECEIPT", "ERROR", "BEGIN")


def parser(version: str = "1.2", **limits: int) -> StompParser:
    p = StompParser(Limits(**limits))
    p.version = version
    return p


def feed_all(p: StompParser, chunks: list[bytes]) -> list[Event]:
    """Feed every chunk, draining what the parser holds back after a connect frame."""
    out: list[Event] = []
    for chunk in chunks:
        events = p.feed(chunk)
        while events:
            out += events
            last = events[-1]
            events = p.feed(b"") if isinstance(last, Frame) and last.command in (
                "CONNECT", "STOMP", "CONNECTED") else []  # fmt: skip
    return out


def expected(command: str, headers: dict[str, str], body: bytes) -> Frame:
    """What the parser yields for encode_frame(command, headers, body)."""
    return Frame(command, {**headers, "content-length": str(len(body))} if body else headers, body)


def frames(events: list[Event]) -> list[Frame]:
    return [e for e in events if isinstance(e, Frame)]


def one(data: bytes, version: str = "1.2", **limits: int) -> Frame:
    (frame,) = frames(feed_all(parser(version, **limits), [data]))
    return frame


def error(data: bytes | list[bytes], version: str = "1.2", **limits: int) -> StompError:
    p = parser(version, **limits)
    with pytest.raises(StompError) as info:
        feed_all(p, data if isinstance(data, list) else [data])
    with pytest.raises(StompError):  # the parser stays dead
        p.feed(b"SEND\n\n\0")
    return info.value


# ---------------------------------------------------------------- strategies

_chars = st.characters(exclude_categories=["Cs"])
_specials = st.sampled_from([":", "\n", "\r", "\\", "\\n", "\\c", "é", "✓", "\x00", " "])
text = st.lists(_chars | _specials, max_size=12).map("".join)
names = text.filter(lambda s: s != "" and s != "content-length")
bodies = st.binary(max_size=64) | st.sampled_from([b"", b"\0", b"a\0b\0", b"\n\n\0\r\n"])


def safe_for(version: str, command: str, name: str, value: str) -> bool:
    """Whether a header can round-trip exactly in this version (see the codec docstring)."""
    if version == "1.0" or command in ("CONNECT", "CONNECTED"):
        return not any(c in name + value for c in "\r\n") and ":" not in name
    if version == "1.1":
        return not value.endswith("\r")
    return True


def to_crlf(frame: bytes) -> bytes:
    """The same frame with CRLF line endings in its head."""
    head, blank, rest = frame.partition(b"\n\n")
    return head.replace(b"\n", b"\r\n") + b"\r\n\r\n" + rest


@st.composite
def frame_specs(draw: st.DrawFn, version: str) -> tuple[str, dict[str, str], bytes]:
    command = draw(st.sampled_from(COMMANDS + ("CONNECT",)))
    raw = draw(st.dictionaries(names, text, max_size=5))
    headers = {k: v for k, v in raw.items() if safe_for(version, command, k, v)}
    return command, headers, draw(bodies)


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data())
def test_round_trip(version: str, data: st.DataObject) -> None:
    command, headers, body = data.draw(frame_specs(version))
    frame = one(encode_frame(command, headers, body, version), version)
    assert frame == expected(command, headers, body)
    assert list(frame.headers) == list(
        expected(command, headers, body).headers
    )  # received order kept


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data())
def test_arbitrary_chunking_gives_same_events(version: str, data: st.DataObject) -> None:
    specs = data.draw(st.lists(frame_specs(version), min_size=1, max_size=5))
    eols = data.draw(st.lists(st.sampled_from([b"", b"\n", b"\r\n", b"\n\r\n"]), min_size=6))
    crlf = data.draw(st.lists(st.booleans(), min_size=5, max_size=5))
    encoded = [encode_frame(*s, version=version) for s in specs]
    encoded = [to_crlf(e) if crlf[i] else e for i, e in enumerate(encoded)]
    stream = b"".join(eols[i] + e for i, e in enumerate(encoded))
    stream += eols[len(specs)]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    whole = feed_all(parser(version), [stream])
    assert feed_all(parser(version), chunks) == whole
    assert frames(whole) == [expected(*s) for s in specs]
    assert whole.count(HEARTBEAT) == sum(e.count(b"\n") for e in eols[: len(specs) + 1])


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None)
@given(
    dest=text.filter(lambda s: "\r" not in s and "\n" not in s),
    mid=text.filter(lambda s: "\r" not in s and "\n" not in s),
    extra=st.dictionaries(names.filter(lambda s: not set(s) & set("\r\n:")), text, max_size=3),
    body=bodies,
    ack=st.none() | st.just("ack-1"),
)
def test_encode_message_matches_encode_frame(
    version: str, dest: str, mid: str, extra: dict[str, str], body: bytes, ack: str | None
) -> None:
    fixed = [("destination", dest), ("message-id", mid), ("subscription", "s-1")]
    if ack is not None:
        fixed.append(("ack", ack))
    fast = encode_message(dest, mid, "s-1", body, extra, ack, version)
    assert fast == encode_frame("MESSAGE", [*fixed, *extra.items()], body, version)
    frame = one(fast, version)
    assert frame.body == body and frame.headers["subscription"] == "s-1"
    if version != "1.0":
        assert frame.headers["destination"] == dest and frame.headers["message-id"] == mid


# ---------------------------------------------------------------- fuzz

_pieces = st.sampled_from(
    [b"SEND", b"CONNECT", b"\n", b"\r\n", b"\r", b":", b"\\", b"\\n", b"\\t", b"\0", b"x",
     b"content-length:", b"content-length:3", b"5", b"\xff", b"\xc3\xa9", b"\n\n", b" "]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=200) | st.lists(_pieces, max_size=40).map(b"".join),
    cuts=st.lists(st.integers(0, 200), max_size=6),
    version=st.sampled_from(VERSIONS),
)
def test_fuzz_only_stomp_errors(data: bytes, cuts: list[int], version: str) -> None:
    p = parser(version, max_command_length=8, max_header_length=16, max_headers=3,
               max_body_size=20, max_frame_size=60)  # fmt: skip
    cuts = sorted(c for c in cuts if c <= len(data))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    try:
        events = feed_all(p, chunks)
    except StompError as exc:
        assert exc.message
        return
    for e in events:
        assert e is HEARTBEAT or (isinstance(e, Frame) and len(e.body) <= 20)


# ---------------------------------------------------------------- parsing rules


def test_crlf_frame_and_mixed_line_endings() -> None:
    frame = one(b"SEND\r\ndestination:/q\r\nreceipt:7\n\r\nhi\0")
    assert frame == Frame("SEND", {"destination": "/q", "receipt": "7"}, b"hi")
    assert one(b"SEND\ndestination:/q\r\n\nhi\0").headers == {"destination": "/q"}
    assert one(b"SEND\r\n\r\n\0") == Frame("SEND", {}, b"")


def test_heartbeats_one_event_per_eol_even_split_mid_crlf() -> None:
    p = parser()
    assert p.feed(b"\n\r\n\n") == [HEARTBEAT] * 3
    assert p.feed(b"\r") == []
    assert p.feed(b"\nSEND\n\nx\0\n") == [HEARTBEAT, Frame("SEND", {}, b"x"), HEARTBEAT]
    assert Heartbeat() is HEARTBEAT and HEARTBEAT_BYTES == b"\n"


def test_first_header_wins_and_only_first_colon_splits() -> None:
    frame = one(b"SEND\nfoo:1\nbar:a:b:c\nfoo:2\n\n\0", "1.0")
    assert frame.headers == {"foo": "1", "bar": "a:b:c"}
    assert list(frame.headers) == ["foo", "bar"]


def test_duplicate_with_bad_escape_is_still_an_error() -> None:
    assert error(b"SEND\nx:1\nx:\\t\n\n\0").message == "undefined escape sequence \\t"


def test_unescaping_per_version() -> None:
    raw = b"SEND\na\\cb:1\\n2\\\\3\\c\n\n\0"
    assert one(raw, "1.0").headers == {"a\\cb": "1\\n2\\\\3\\c"}
    assert one(raw, "1.1").headers == {"a:b": "1\n2\\3:"}
    assert one(b"SEND\nk:a\\rb\n\n\0", "1.2").headers == {"k": "a\rb"}
    assert error(b"SEND\nk:a\\rb\n\n\0", "1.1").message == "undefined escape sequence \\r"


def test_version_1_0_keeps_value_whitespace() -> None:
    assert one(b"SEND\n key : v \n\n\0", "1.0").headers == {" key ": " v "}


@pytest.mark.parametrize("command", ["CONNECT", "STOMP", "CONNECTED"])
def test_connect_frames_are_never_unescaped(command: str) -> None:
    frame = one(command.encode() + b"\nlogin:a\\nb\npasscode:x\\t\n\n\0", "1.2")
    assert frame.headers == {"login": "a\\nb", "passcode": "x\\t"}


def test_parser_pauses_after_connect_so_the_version_can_be_set() -> None:
    p = StompParser()
    events = p.feed(b"CONNECT\naccept-version:1.2\n\n\0SEND\nk:a\\nb\n\n\0")
    assert [e.command for e in frames(events)] == ["CONNECT"]
    p.version = "1.2"
    assert p.feed(b"") == [Frame("SEND", {"k": "a\nb"}, b"")]


def test_body_without_content_length_runs_to_first_nul() -> None:
    p = parser()
    assert p.feed(b"SEND\n\nab") == []
    assert p.feed(b"c\0d") == [Frame("SEND", {}, b"abc")]
    assert p.feed(b"\n\n\0") == [Frame("d", {}, b"")]


def test_content_length_body_may_hold_nuls_and_padding_is_allowed() -> None:
    assert one(b"SEND\ncontent-length: 3 \n\n\0\0\0\0").body == b"\0\0\0"
    assert one(b"SEND\ncontent-length:0\n\n\0").body == b""


def test_large_bodies_over_many_chunks() -> None:
    body = bytes(range(256)) * 8192  # 2 MiB, finished in place in the buffer
    data = encode_frame("SEND", {"destination": "/q"}, body) + b"SEND\n\nz\0"
    p = parser()
    got: list[Event] = []
    for i in range(0, len(data), 65536):
        got += p.feed(data[i : i + 65536])
    assert got == [expected("SEND", {"destination": "/q"}, body), Frame("SEND", {}, b"z")]
    text = b"SEND\n\n" + b"t" * 300_000
    p = parser()
    assert not any(p.feed(text[i : i + 1000]) for i in range(0, len(text), 1000))
    assert p.feed(b"\0") == [Frame("SEND", {}, b"t" * 300_000)]


def test_accepts_bytearray_and_memoryview() -> None:
    p = parser()
    assert p.feed(bytearray(b"SEND\n\nx")) == []
    assert p.feed(memoryview(b"\0")) == [Frame("SEND", {}, b"x")]


# ---------------------------------------------------------------- error paths


def test_command_errors() -> None:
    too_long = "command line exceeds max_command_length (8 bytes)"
    assert error(b"ABCDEFGHI\n\n\0", max_command_length=8).message == too_long
    assert one(b"ABCDEFGH\r\n\n\0", max_command_length=8).command == "ABCDEFGH"
    assert error(b"X" * 50, max_command_length=8).message == too_long  # no EOL yet
    assert error(b"SE\x01ND\n\n\0").message == "invalid command line"
    assert error(b"S\xc3\xa9ND\n\n\0").message == "invalid command line"
    assert error(b"\rSEND\n\n\0").message == "invalid command line"
    assert one(b"FOO\n\n\0").command == "FOO"  # unknown commands are the session's job


def test_header_syntax_errors() -> None:
    exc = error(b"SEND\nnocolon\n\n\0")
    assert exc.message == "malformed header line" and "nocolon" in exc.detail
    assert error(b"SEND\n:value\n\n\0").message == "malformed header line"
    assert error(b"SEND\nk:v\\t\n\n\0", "1.1").message == "undefined escape sequence \\t"
    assert error(b"SEND\nk\\x:v\n\n\0", "1.2").message == "undefined escape sequence \\x"
    assert error(b"SEND\nk:v\\\n\n\0", "1.2").message == "undefined escape sequence \\"
    assert error(b"SEND\nk:\xff\n\n\0").message == "header is not valid UTF-8"


def test_header_limits_are_enforced_early() -> None:
    too_long = "header line exceeds max_header_length (16 bytes)"
    assert error(b"SEND\nk:" + b"v" * 15 + b"\n\n\0", max_header_length=16).message == too_long
    assert one(b"SEND\nk:" + b"v" * 14 + b"\r\n\n\0", max_header_length=16).headers
    # no EOL in sight yet: fails as soon as the buffered line is over the limit
    assert error([b"SEND\nk:", b"v" * 20], max_header_length=16).message == too_long
    many = b"SEND\n" + b"h:1\n" * 4
    assert error(many, max_headers=3).message == "too many headers: more than max_headers (3)"
    assert one(b"SEND\n" + b"h:1\n" * 3 + b"\n\0", max_headers=3).headers == {"h": "1"}
    unterminated = [b"SEND\n"] + [b"h%d:1\n" % i for i in range(40)]
    exc = error(unterminated, max_frame_size=100)
    assert exc.message == "frame exceeds max_frame_size (100 bytes)"


def test_content_length_errors() -> None:
    for bad in (b"abc", b"-1", b"1.5", b"", b"+3", b"\xd9\xa5"):  # last: Arabic-Indic 5
        exc = error(b"SEND\nreceipt:r9\ncontent-length:" + bad + b"\n\n\0")
        assert exc.message == "invalid content-length header"
        assert exc.receipt_id == "r9"
    exc = error(b"SEND\ncontent-length:3\n\nabcd\0")
    assert exc.message == "frame not terminated by NUL after content-length bytes"


def test_body_and_frame_limits_are_enforced_early() -> None:
    head = b"SEND\nreceipt:r1\ncontent-length:%d\n\n"
    exc = error(head % 101, max_body_size=100)  # before any body byte arrives
    assert exc.message == "content-length 101 exceeds max_body_size (100 bytes)"
    assert exc.receipt_id == "r1"
    assert one(head % 100 + b"x" * 100 + b"\0", max_body_size=100).body == b"x" * 100
    exc = error(head % 90, max_frame_size=100)
    assert exc.message == "frame exceeds max_frame_size (100 bytes)"
    # without content-length: fails once the unterminated body passes the limit
    assert error([b"SEND\n\n", b"x" * 101], max_body_size=100).message == (
        "body exceeds max_body_size (100 bytes)"
    )
    assert error([b"SEND\n\n", b"x" * 100], max_frame_size=100).message == (
        "frame exceeds max_frame_size (100 bytes)"
    )
    assert one(b"SEND\n\n" + b"x" * 93 + b"\0", max_frame_size=100).body == b"x" * 93


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
@pytest.mark.parametrize(
    ("head", "limits", "message"),
    [
        (
            b"SEND|a:1|b:2|c:3|d:4",
            {"max_headers": 3},
            "too many headers: more than max_headers (3)",
        ),
        (
            b"SEND|a:\\c|b:2|c:3|d:4",
            {"max_headers": 3},
            "too many headers: more than max_headers (3)",
        ),
        (
            b"SEND|a:1|b:" + b"x" * 80,
            {"max_frame_size": 60},
            "frame exceeds max_frame_size (60 bytes)",
        ),
        (b"SEND|k:\\n|nocolon", {}, "malformed header line"),
        (b"SEND|k:\xc3", {}, "header is not valid UTF-8"),
        (b"SEND|k:\\c|x\\t:1", {}, "undefined escape sequence \\t"),
    ],
)
def test_errors_with_either_line_ending(
    eol: bytes, head: bytes, limits: dict[str, int], message: str
) -> None:
    """One-shot heads take the fast path, split ones the general one; both must agree."""
    data = head.replace(b"|", eol) + eol + eol + b"\0"
    assert error(data, "1.2", **limits).message == message
    assert error([data[:7], data[7:]], "1.2", **limits).message == message


def test_full_crlf_frames_with_headers() -> None:
    frame = one(b"SEND\r\na:1\r\nb:x\ry\r\nb:2\r\n\r\nbody\0")
    assert frame == Frame("SEND", {"a": "1", "b": "x\ry"}, b"body")
    # a LF blank line before the CRLF one ends the head there
    assert one(b"SEND\r\na:1\n\nb:2\r\n\r\n\0").body == b"b:2\r\n\r\n"
    assert one(b"SEND\r\n\r\nb:2\r\n\r\n\0").headers == {}


def test_reprs_and_version() -> None:
    assert repr(HEARTBEAT) == "HEARTBEAT"
    assert repr(Frame("SEND", {"a": "1"}, b"x")) == "Frame('SEND', {'a': '1'}, b'x')"
    assert StompParser().version == "1.0"
    assert Frame("SEND", {}) != "SEND"


def test_dead_parser_keeps_failing() -> None:
    p = parser()
    with pytest.raises(StompError):
        p.feed(b"SEND\nbad\n\n\0")
    with pytest.raises(StompError, match="closed"):
        p.feed(b"")


# ---------------------------------------------------------------- encoding


def test_encode_content_length_rules() -> None:
    assert encode_frame("SEND", {"destination": "/q"}) == b"SEND\ndestination:/q\n\n\0"
    assert encode_frame("SEND", {"content-length": "99"}, b"ab") == (
        b"SEND\ncontent-length:2\n\nab\0"
    )
    assert encode_frame("SEND", {}, b"ab", content_length=False) == b"SEND\n\nab\0"
    assert encode_frame("SEND", {}, b"a\0", content_length=False) == (
        b"SEND\ncontent-length:2\n\na\0\0"
    )
    assert encode_frame("SEND", {}, b"", content_length=True) == b"SEND\ncontent-length:0\n\n\0"
    assert encode_message("/q", "m1", "s1", b"hi", content_length=False) == (
        b"MESSAGE\ndestination:/q\nmessage-id:m1\nsubscription:s1\n\nhi\0"
    )


def test_encode_escaping_per_version() -> None:
    hdr = [("a:b", "x\\y\nz\r")]
    assert encode_frame("SEND", hdr, version="1.2") == b"SEND\na\\cb:x\\\\y\\nz\\r\n\n\0"
    assert encode_frame("SEND", hdr, version="1.1") == b"SEND\na\\cb:x\\\\y\\nz\r\n\n\0"
    assert encode_frame("SEND", hdr, version="1.0") == b"SEND\na_b:x\\y z \n\n\0"
    assert encode_frame("CONNECTED", hdr, version="1.2") == b"CONNECTED\na_b:x\\y z \n\n\0"
    assert encode_frame("MESSAGE", [("k", "é")]) == "MESSAGE\nk:é\n\n\0".encode()


def test_encode_keeps_duplicates_and_parser_keeps_first() -> None:
    data = encode_frame("SEND", [("k", "1"), ("k", "2")])
    assert data == b"SEND\nk:1\nk:2\n\n\0"
    assert one(data).headers == {"k": "1"}


def test_extra_headers_cannot_override_message_headers() -> None:
    data = encode_message("/q", "m1", "s1", b"", {"destination": "/evil"}, "a1", "1.2")
    assert one(data).headers == {"destination": "/q", "message-id": "m1",
                                 "subscription": "s1", "ack": "a1"}  # fmt: skip


def test_unsupported_version_is_rejected() -> None:
    with pytest.raises(ValueError):
        encode_frame("SEND", {}, b"", "2.0")
    with pytest.raises(ValueError):
        encode_message("/q", "1", "s", b"", version="2.0")
    with pytest.raises(ValueError):
        StompParser().version = "1.3"


def test_interop_with_stomp_py_frames() -> None:
    su = pytest.importorskip("stomp.utils")
    data = encode_frame("MESSAGE", {"destination": "/q", "message-id": "m:1", "x": "a\nb\\"}, b"hi")
    theirs = su.parse_frame(data[:-1])  # its transport strips the NUL
    assert (theirs.cmd, theirs.body) == ("MESSAGE", b"hi")
    assert theirs.headers == {"destination": "/q", "message-id": "m:1", "x": "a\nb\\",
                              "content-length": "2"}  # fmt: skip
    sent = su.Frame("SEND", {"destination": "/q", "content-length": 3, "receipt": "r1"}, b"a\0b")
    ours = one(b"".join(su.convert_frame(sent)))
    assert ours == Frame(
        "SEND", {"content-length": "3", "destination": "/q", "receipt": "r1"}, b"a\0b"
    )


# ---------------------------------------------------------------- throughput (printed only)


def test_throughput_printed(capsys: pytest.CaptureFixture[str]) -> None:
    """CPU time, so a busy machine skews it less; see the report for careful figures."""
    n = 20_000
    send = encode_frame("SEND", {"destination": "/queue/orders", "receipt": "r-1"}, b"x" * 32)
    stream = send * n
    start = time.process_time()
    p = parser()
    got = sum(len(p.feed(stream[i : i + 65536])) for i in range(0, len(stream), 65536))
    parse_rate = n / (time.process_time() - start)
    assert got == n
    start = time.process_time()
    for _ in range(n):
        encode_message("/queue/orders", "m-1", "sub-0", b"x" * 32, None, None, "1.2")
    encode_rate = n / (time.process_time() - start)
    with capsys.disabled():
        print(f"\nSTOMP parse {parse_rate:,.0f} SEND/s, encode {encode_rate:,.0f} MESSAGE/s")


@pytest.mark.parametrize("size", [1, 7, 1000, 4096, 70_000])
def test_big_frames_in_any_chunking_match_one_shot(size: int) -> None:
    """Heads and bodies bigger than the join threshold are finished in place in the buffer."""
    big_head = {f"h{i}": "v" * 1000 for i in range(20)}
    stream = b"".join([
        encode_frame("SEND", big_head, b"b" * 40_000),
        b"\n",
        encode_frame("SEND", {"k": "a\\c"}, b"t" * 40_000, content_length=False),
        encode_frame("CONNECT", {"login": "x"}),
        b"\r\n",
        encode_frame("MESSAGE", {"destination": "/q"}, b"m\0"),
    ])  # fmt: skip
    whole = feed_all(parser(), [stream])
    assert [f.command for f in frames(whole)] == ["SEND", "SEND", "CONNECT", "MESSAGE"]
    assert feed_all(parser(), [stream[i : i + size] for i in range(0, len(stream), size)]) == whole


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
@pytest.mark.parametrize("rid", ["1", "r-77", "a:b", "line\nbreak", "back\\slash", "ünï"])
def test_encode_receipt_matches_encode_frame(version, rid):
    from waystation.wire.stomp import encode_receipt

    assert encode_receipt(rid, version) == encode_frame(
        "RECEIPT", {"receipt-id": rid}, b"", version
    )
