"""WebSocket framing fuzzed against a real node: raw frames on /stomp, /mqtt and /amqp.

Each case is an upgrade request (now and then mangled: version, key, subprotocol) and then
frames written here, not by a client library, so they can be anything: the messages of a
stompgen, mqttgen or amqpgen session, whole or fragmented, with pings and pongs between
and a close at the end; or, drawn by hypothesis, what a client must never send: reserved
opcodes, RSV bits, unmasked frames, control frames over 125 bytes or fragmented,
continuations with nothing to continue, a new message inside a fragmented one, lengths
that are not minimal, over the message limit, with the top bit set or longer than what
follows, text that is not UTF-8, close frames with one byte, reserved codes or a reason
that is not UTF-8.  Half of the cases are also mutated (mutate.py, whose ``relength`` here
rewrites a frame's payload length).  The node stays up, answers the bystander and a fresh
websockets client's STOMP login after every batch, and frees what the fuzz took."""

from __future__ import annotations

import base64
import os
import struct
from collections.abc import Iterator
from random import Random

from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from fuzz import amqpgen, mqttgen, stompgen
from fuzz.campaign import check, fuzz, fuzz_seed
from fuzz.fuzzkit import BATCH, Batch, Case, FuzzNode, Tally, budget, draw, pool, streams
from fuzz.mutate import HUGE, cut, end_of, mutate
from waystation.wire.mqtt import MQTT_5, MQTT_311

CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
PATHS = {"stomp": ("/stomp", "v12.stomp", TEXT), "mqtt": ("/mqtt", "mqtt", BINARY),
         "amqp": ("/amqp", "amqp", BINARY)}  # fmt: skip


def frame(
    opcode: int,
    payload: bytes,
    fin: bool = True,
    rsv: int = 0,
    masked: bool = True,
    length: int | None = None,
    wide: bool = False,
) -> bytes:
    """One frame (RFC 6455 5.2); ``length`` overrides the payload length field, ``wide``
    uses the 64-bit form whatever the length."""
    n = len(payload) if length is None else length
    head = bytes([(0x80 if fin else 0) | (rsv & 7) << 4 | (opcode & 0xF)])
    bit = 0x80 if masked else 0
    if n < 126 and not wide:
        head += bytes([bit | n])
    elif n < 65536 and not wide:
        head += bytes([bit | 126]) + struct.pack(">H", n)
    else:
        head += bytes([bit | 127]) + struct.pack(">Q", n & (2**64 - 1))
    if not masked:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i & 3] for i, b in enumerate(payload))


def upgrade(path: str, subprotocol: str | None, port: int, version: str = "13") -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Upgrade: websocket",
             "Connection: Upgrade", f"Sec-WebSocket-Key: {key}",
             f"Sec-WebSocket-Version: {version}"]  # fmt: skip
    if subprotocol:
        lines.append(f"Sec-WebSocket-Protocol: {subprotocol}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _message(rng: Random, opcode: int, data: bytes) -> list[bytes]:
    """``data`` as one message: one frame, or fragments with control frames between."""
    if rng.random() < 0.6 or len(data) < 2:
        return [frame(opcode, data)]
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 3))))
    parts = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    out = []
    for i, part in enumerate(parts):
        out.append(frame(opcode if i == 0 else CONT, part, fin=i == len(parts) - 1))
        if rng.random() < 0.3:
            out.append(frame(rng.choice((PING, PONG)), rng.randbytes(rng.randrange(126))))
    return out


def _kind(opcode: int, data: bytes) -> int:
    """STOMP goes as text when it is UTF-8 (as browsers send it), else as binary."""
    if opcode == TEXT:
        try:
            data.decode()
        except UnicodeDecodeError:
            return BINARY
    return opcode


def _close(rng: Random) -> bytes:
    code = rng.choice((1000, 1001, 1002, 3000, 4999))
    return frame(CLOSE, struct.pack(">H", code) + b"bye")


# -- what a client must never send, drawn by hypothesis --------------------------------------
_payload = st.binary(max_size=200)
_hostile = st.one_of(
    st.builds(
        lambda op, p: frame(op, p), st.sampled_from([3, 4, 5, 6, 7, 0xB, 0xC, 0xF]), _payload
    ),
    st.builds(lambda r, p: frame(TEXT, p, rsv=r), st.integers(1, 7), _payload),
    st.builds(lambda p: frame(BINARY, p, masked=False), _payload),
    st.builds(
        lambda op, n: frame(op, b"c" * n),
        st.sampled_from([PING, PONG, CLOSE]),
        st.integers(126, 70_000),
    ),  # fmt: skip
    st.builds(
        lambda op, p: frame(op, p, fin=False),
        st.sampled_from([PING, PONG, CLOSE]),
        st.binary(max_size=20),
    ),  # fmt: skip
    st.builds(lambda p, fin: frame(CONT, p, fin=fin), _payload, st.booleans()),
    st.builds(lambda p: frame(TEXT, p, fin=False) + frame(BINARY, p), _payload),
    st.builds(lambda p: frame(TEXT, p, wide=True), st.binary(max_size=10)),
    st.builds(
        lambda n: frame(BINARY, b"x" * 10, length=n),
        st.sampled_from([16 * 2**20 + 1, 2**31, 2**63, 2**64 - 1, 1000]),
    ),  # fmt: skip
    st.builds(
        lambda p: frame(TEXT, p),
        st.sampled_from([b"\xff\xfe", b"\xed\xa0\x80", b"\xc3", b"ok\xc0\xaf", "é".encode()[:1]]),
    ),  # fmt: skip
    st.builds(
        lambda p: frame(CLOSE, p),
        st.sampled_from(
            [
                b"\x03",
                b"\x00\x00",
                b"\x03\xe7",
                b"\x03\xed",
                b"\x03\xee",
                b"\x13\x88",
                b"\x03\xe8\xff\xfe",
            ]
        ),
    ),  # fmt: skip
)


def relength(unit: bytes, rng: Random) -> bytes | None:
    """A frame's payload length field rewritten (huge values included)."""
    if len(unit) < 2 or unit.startswith(b"GET "):
        return None
    n = rng.choice(HUGE + (2**63, 2**64 - 1, len(unit) + 1))
    b1 = unit[1] & 0x80
    if unit[1] & 0x7F == 126:
        body = unit[4:]
    elif unit[1] & 0x7F == 127:
        body = unit[10:]
    else:
        body = unit[2:]
    if n < 126:
        return unit[:1] + bytes([b1 | n]) + body
    if n < 65536:
        return unit[:1] + bytes([b1 | 126]) + struct.pack(">H", n) + body
    return unit[:1] + bytes([b1 | 127]) + struct.pack(">Q", n) + body


def batches(seed: int, cases: int, tally: Tally, node: FuzzNode) -> Iterator[Batch]:
    rng = Random(seed)
    n = pool(cases)
    sessions = {
        "stomp": stompgen.sessions(rng, n, seed),
        "mqtt": mqttgen.sessions(MQTT_311, rng, n // 2, seed)
        + mqttgen.sessions(MQTT_5, rng, n // 2, seed),
        "amqp": [amqpgen.record(p) for p in draw(amqpgen.plans(), n // 4, seed)],
    }
    hostile = draw(_hostile, n, seed)
    port = node.http_port
    for _ in range(cases // BATCH + 1):
        made = []
        for _ in range(BATCH):
            proto = rng.choice(("stomp", "stomp", "mqtt", "amqp"))
            path, sub, opcode = PATHS[proto]
            sub_or_none: str | None = sub
            roll = rng.random()
            if roll < 0.05:
                sub_or_none = rng.choice((None, "v10.stomp", "bogus", "mqtt, amqp, v12.stomp"))
            head = upgrade(
                path, sub_or_none, port, "13" if roll > 0.02 else rng.choice(("8", "", "99"))
            )
            data = b"".join(rng.choice(sessions[proto]))
            units = [head]
            for piece in cut(data, rng, 3):  # each piece a message
                units += _message(rng, _kind(opcode, piece), piece)
                if rng.random() < 0.15:
                    units.append(rng.choice(hostile))
            if rng.random() < 0.5:
                units.append(_close(rng))
            if rng.random() < 0.5:
                units = [head, *mutate(units[1:], rng, relength)]
            made.append(Case([units[0], *cut(b"".join(units[1:]), rng)], end_of(rng), 0, True))
        yield streams(port, made, tally)


async def probe(node: FuzzNode) -> None:
    """A fresh websockets client: STOMP login and a receipt on /stomp."""
    url = f"ws://127.0.0.1:{node.http_port}/stomp"
    async with connect(url, subprotocols=[Subprotocol("v12.stomp")]) as ws:
        login = {"accept-version": "1.2", "host": "localhost", "login": stompgen.USER,
                 "passcode": stompgen.PASSWORD}  # fmt: skip
        await ws.send(stompgen.encode_frame("CONNECT", login).decode())
        assert str(await ws.recv()).startswith("CONNECTED"), "no CONNECTED"
        await ws.send(stompgen.encode_frame("DISCONNECT", {"receipt": "r"}).decode())
        assert str(await ws.recv()).startswith("RECEIPT"), "no RECEIPT"


@budget(default=800, long=20_000)
def test_websocket_node_survives_fuzz(tmp_path, run, cases: int) -> None:
    node = FuzzNode(tmp_path / "n").start()
    try:
        seed, tally = fuzz_seed(), Tally()
        work = batches(seed, cases, tally, node)
        report = run(fuzz(node, "websocket", seed, work, lambda: probe(node), tally), 3 * 3600)
        check(report, node)
    finally:
        node.stop()
