"""Fuzzing SockJS framing (gateway/http/sockjs/framing.py): client payloads in, frames out.

Properties: any client payload (bytes or text, HTTP or WebSocket form) gives a list of
strings or a PayloadError with the spec's wording, never another exception (an unhandled
one becomes a bare 500 over HTTP and tears down a WebSocket handler); a payload of strings
round-trips; every ``a`` frame the server writes decodes back to the same messages, is valid
UTF-8 and carries no raw character that browsers or proxies mangle.

The default run is a bounded budget (seconds); ``-m fuzz`` runs the long budget.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from waystation.gateway.http.sockjs.framing import (
    PayloadError,
    close,
    decode_payload,
    messages,
    to_bytes,
)

LONG = [pytest.mark.fuzz, pytest.mark.timeout(3600)]  # opt in: -m fuzz
BUDGET = pytest.mark.parametrize(
    "examples",
    [pytest.param(200, id="quick"), pytest.param(30_000, id="long", marks=LONG)],
)
MANGLED = re.compile("[\x00-\x1f\u200c-\u200f\u2028-\u202f\u2060-\u206f\ud800-\udfff\ufff0-\uffff]")
ANY_CHAR = st.characters(codec=None, categories=None)  # lone surrogates included
_json_pieces = st.sampled_from(
    ['[', ']', '"', '\\', '\\u', 'd800', ',', '1', 'null', '{', '}', ':', ' ', 'a', '\\"',
     '\ud800', '\x00', 'é', '[[', '"x"']
)  # fmt: skip


def _decode(raw: bytes | str, single_ok: bool) -> list[str] | None:
    try:
        got = decode_payload(raw, single_ok)
    except PayloadError as e:
        assert str(e) in ("Payload expected.", "Broken JSON encoding."), str(e)
        return None
    assert isinstance(got, list) and all(isinstance(m, str) for m in got)
    return got


@BUDGET
def test_any_payload_gives_messages_or_payload_error(examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None)
    @given(
        raw=st.binary(max_size=200)
        | st.text(ANY_CHAR, max_size=100)
        | st.lists(_json_pieces, max_size=60).map("".join)
        | st.tuples(st.sampled_from(("[", '["', "[[", "{", '{"a":')), st.integers(1, 5000)).map(
            lambda t: t[0] * t[1]
        ),
        as_bytes=st.booleans(),
        single_ok=st.booleans(),
    )
    def run(raw: bytes | str, as_bytes: bool, single_ok: bool) -> None:
        if as_bytes and isinstance(raw, str):
            raw = raw.encode("utf-8", "surrogatepass")
        got = _decode(raw, single_ok)
        if got is not None:
            try:
                chunks = to_bytes(got)
            except PayloadError as e:
                assert "surrogate" in str(e)
                assert any(MANGLED.search(m) and re.search("[\ud800-\udfff]", m) for m in got)
            else:
                assert chunks == [m.encode() for m in got]

    run()


@BUDGET
def test_string_arrays_round_trip(examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None)
    @given(
        texts=st.lists(st.text(ANY_CHAR, max_size=20), max_size=6),
        ascii_only=st.booleans(),
        single=st.booleans(),
    )
    def run(texts: list[str], ascii_only: bool, single: bool) -> None:
        if single and texts:  # the WebSocket transport also takes one bare JSON string
            assert decode_payload(json.dumps(texts[0], ensure_ascii=ascii_only), True) == [texts[0]]
        payload = json.dumps(texts, ensure_ascii=ascii_only)
        assert decode_payload(payload) == texts
        if ascii_only:
            assert decode_payload(payload.encode()) == texts

    run()


@BUDGET
def test_server_frames_decode_back_and_are_safe_on_the_wire(examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None)
    @given(
        texts=st.lists(st.text(ANY_CHAR, max_size=30), max_size=6),
        code=st.integers(1000, 4999),
        reason=st.text(ANY_CHAR, max_size=30),
    )
    def run(texts: list[str], code: int, reason: str) -> None:
        frame = messages(texts)
        assert frame.startswith("a")
        assert json.loads(frame[1:]) == texts
        assert not MANGLED.search(frame), "a character proxies mangle went out raw"
        frame.encode("utf-8")  # no lone surrogate reaches the wire
        closing = close(code, reason)
        assert closing.startswith("c") and json.loads(closing[1:]) == [code, reason]
        closing.encode("utf-8")

    run()


@pytest.mark.parametrize("depth", [996, 5_000, 60_000])
@pytest.mark.parametrize("single_ok", [False, True])
def test_deeply_nested_payload_is_refused_as_broken_json(depth: int, single_ok: bool) -> None:
    """SockJS payloads are flat: nesting must be refused with the spec's error, not escape
    as RecursionError (the JSON decoder's recursion limit is reached near 1,000 levels,
    well within ``max_send_size``)."""
    for raw in ("[" * depth, "[" * depth + "]" * depth, ('{"a":' * depth).encode()):
        with pytest.raises(PayloadError, match="Broken JSON encoding"):
            decode_payload(raw, single_ok)
