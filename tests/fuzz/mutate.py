"""Mutations of valid streams, frame by frame, from a seeded ``random.Random``.

A stream is a list of frames (one protocol unit each, as a real encoder wrote it).  One to
four operations change it: bit flips, interesting bytes, truncation, a dropped, swapped or
repeated frame, splicing with another stream, inserted or grown bytes, and a codec's own
``relength`` (a frame whose length field says something else, huge lengths included).
Then the stream is cut into chunks at random places, so the node's parsers also see every
partial read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from random import Random

from fuzz.fuzzkit import BATCH, Batch, Case, Tally, streams

# A frame with its length field changed (None: this frame has none the codec knows).
Relength = Callable[[bytes, Random], bytes | None]

MAX_CASE_BYTES = 256 * 1024  # what one case may send: the node's limits are tested elsewhere
INTERESTING = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0x0A, 0x0D, 0x3A, 0x5C, 0xC0, 0xFE)
HUGE = (0, 1, 7, 8, 255, 256, 65535, 65536, 2**24, 2**31 - 1, 2**31, 2**32 - 1)


def _pick(frames: list[bytes], rng: Random) -> int:
    return rng.randrange(len(frames))


def _flip(frames: list[bytes], rng: Random) -> None:
    i = _pick(frames, rng)
    b = bytearray(frames[i])
    if b:
        for _ in range(rng.choice((1, 1, 2, 4, 8))):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    frames[i] = bytes(b)


def _interesting(frames: list[bytes], rng: Random) -> None:
    i = _pick(frames, rng)
    b = bytearray(frames[i])
    if b:
        b[rng.randrange(len(b))] = rng.choice(INTERESTING)
    frames[i] = bytes(b)


def _truncate(frames: list[bytes], rng: Random) -> None:
    i = _pick(frames, rng)
    frames[i] = frames[i][: rng.randrange(len(frames[i]) + 1)]
    del frames[i + 1 :]


def _drop(frames: list[bytes], rng: Random) -> None:
    if len(frames) > 1:
        del frames[_pick(frames, rng)]


def _swap(frames: list[bytes], rng: Random) -> None:
    i, j = _pick(frames, rng), _pick(frames, rng)
    frames[i], frames[j] = frames[j], frames[i]


def _repeat(frames: list[bytes], rng: Random) -> None:
    i = _pick(frames, rng)
    n = rng.choice((2, 3, 10, 100, 1000))
    n = max(1, min(n, MAX_CASE_BYTES // max(1, len(frames[i]))))
    frames[i + 1 : i + 1] = [frames[i]] * n


def _insert(frames: list[bytes], rng: Random) -> None:
    i = _pick(frames, rng)
    at = rng.randrange(len(frames[i]) + 1)
    junk = rng.randbytes(rng.choice((1, 2, 4, 16, 64)))
    frames[i] = frames[i][:at] + junk + frames[i][at:]


def _grow(frames: list[bytes], rng: Random) -> None:
    """A run of one byte inside a frame: long names, values, lengths of digits."""
    i = _pick(frames, rng)
    at = rng.randrange(len(frames[i]) + 1)
    fill = bytes([frames[i][at - 1] if at and rng.random() < 0.5 else rng.choice(INTERESTING)])
    frames[i] = frames[i][:at] + fill * rng.choice((100, 4096, 65536)) + frames[i][at:]


def _dup_slice(frames: list[bytes], rng: Random) -> None:
    i = _pick(frames, rng)
    f = frames[i]
    a = rng.randrange(len(f) + 1)
    b = rng.randrange(a, len(f) + 1)
    frames[i] = f[:b] + f[a:b] + f[b:]


OPS: tuple[Callable[[list[bytes], Random], None], ...] = (
    _flip, _flip, _flip, _interesting, _interesting, _truncate, _drop, _swap, _repeat,
    _insert, _grow, _dup_slice,
)  # fmt: skip


def mutate(
    frames: Sequence[bytes],
    rng: Random,
    relength: Relength | None = None,
    others: Sequence[Sequence[bytes]] = (),
) -> list[bytes]:
    """A mutated copy of ``frames``: one to four operations (see the module doc)."""
    out = list(frames)
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        if not out:
            break
        roll = rng.random()
        if relength is not None and roll < 0.2:
            i = _pick(out, rng)
            changed = relength(out[i], rng)
            if changed is not None:
                out[i] = changed
        elif others and roll < 0.3:
            other = others[rng.randrange(len(others))]
            out = out[: rng.randrange(len(out) + 1)] + list(other[rng.randrange(len(other)) :])
        else:
            rng.choice(OPS)(out, rng)
    return _capped(out)


def _capped(frames: list[bytes]) -> list[bytes]:
    total, kept = 0, []
    for f in frames:
        if total + len(f) > MAX_CASE_BYTES:
            kept.append(f[: MAX_CASE_BYTES - total])
            break
        total += len(f)
        kept.append(f)
    return kept


def cut(data: bytes, rng: Random, max_cuts: int = 4) -> list[bytes]:
    """``data`` in chunks cut at up to ``max_cuts`` random places."""
    if not data:
        return [b""]
    at = sorted({rng.randrange(1, len(data) + 1) for _ in range(rng.randrange(max_cuts + 1))})
    edges = [0, *at]
    if edges[-1] != len(data):
        edges.append(len(data))
    return [data[a:b] for a, b in zip(edges, edges[1:], strict=False)]


def end_of(rng: Random) -> str:
    return rng.choices(("fin", "idle", "reset"), (5, 3, 2))[0]


def as_case(frames: Sequence[bytes], rng: Random, pause: float = 0.0) -> Case:
    """Frames as one case: cut anywhere, a random ending."""
    return Case(cut(b"".join(frames), rng), end_of(rng), pause)


def stream_batches(
    rng: Random,
    cases: int,
    sessions: Sequence[Sequence[bytes]],
    tally: Tally,
    port: int,
    relength: Relength | None = None,
    mutated: float = 0.75,
    pause: float = 0.0,
) -> Iterator[Batch]:
    """The warm-up batch, then ``cases`` more, in batches of BATCH: each a session picked
    from ``sessions``, mutated (a ``mutated`` share of them), cut and sent to ``port``."""
    for _ in range(cases // BATCH + 1):
        made = []
        for _ in range(BATCH):
            frames = sessions[rng.randrange(len(sessions))]
            if rng.random() < mutated:
                frames = mutate(frames, rng, relength, sessions)
            made.append(as_case(frames, rng, pause))
        yield streams(port, made, tally)
