"""The journal's on-disk format: file headers, batch frames, ops, and a scanner.

Pure byte functions, no I/O, so recovery, compaction and tests share one definition.

A journal file starts with a ``HEADER_SIZE`` header (magic, format version, kind, file
sequence number, CRC).  Batches follow back to back::

    magic u32 | payload length u32 | file seq u64 | crc32 u32 | payload

The CRC covers payload, length and seq, so a damaged header field is caught like a damaged
payload.  The file seq in every batch is what makes a recycled file safe: batches left over
from the file's previous life carry an older seq and are read as "end of data", never as
records.  The payload is a run of ops: ``PUT kind u8 | rid u64 | rtype u32 | len u32 | data``
or ``DELETE kind u8 | rid u64``.

Every write is followed by ``TRAILER`` zero bytes (overwritten by the next write), so the
end of the data is always a zero header even in a recycled file whose old bytes follow.
Bytes that are neither a valid frame nor zeros can then only come from damage.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from waystation.core.store.api import DELETE, PUT, Op

FILE_MAGIC = b"WSJF"
FORMAT_VERSION = 1
KIND_DATA = 1
KIND_FREE = 2
FILE_HDR = struct.Struct("<4sHHQI")
HEADER_SIZE = 32

BATCH_MAGIC = 0xA1D7_5742
BATCH_MAGIC_BYTES = struct.pack("<I", BATCH_MAGIC)
BATCH_HDR = struct.Struct("<IIQI")
LEN_SEQ = struct.Struct("<IQ")
OP_PUT = struct.Struct("<BQII")
OP_DEL = struct.Struct("<BQ")
MAX_PAYLOAD = 0xFFFF_FFFF
TRAILER = bytes(BATCH_HDR.size)


class FileHeader(NamedTuple):
    kind: int
    seq: int


def pack_file_header(kind: int, seq: int) -> bytes:
    head = FILE_HDR.pack(FILE_MAGIC, FORMAT_VERSION, kind, seq, 0)[:-4]
    return (head + struct.pack("<I", zlib.crc32(head))).ljust(HEADER_SIZE, b"\0")


def unpack_file_header(buf: bytes) -> FileHeader | None:
    """The header, or None when it is missing, torn or from another format."""
    if len(buf) < FILE_HDR.size:
        return None
    magic, version, kind, seq, crc = FILE_HDR.unpack_from(buf)
    if magic != FILE_MAGIC or version != FORMAT_VERSION:
        return None
    if zlib.crc32(buf[: FILE_HDR.size - 4]) != crc or kind not in (KIND_DATA, KIND_FREE):
        return None
    return FileHeader(kind, seq)


def encode_ops(ops: Iterable[Op]) -> bytes:
    parts: list[bytes] = []
    for kind, rid, rtype, data in ops:
        if kind == PUT:
            parts.append(OP_PUT.pack(PUT, rid, rtype, len(data)))
            parts.append(data)
        elif kind == DELETE:
            parts.append(OP_DEL.pack(DELETE, rid))
        else:
            raise ValueError(f"unknown op kind {kind}")
    return b"".join(parts)


def batch_crc(payload: bytes | memoryview, seq: int) -> int:
    """CRC32 of payload then (length, seq): the payload part can be computed before the
    batch is placed in a file."""
    return zlib.crc32(LEN_SEQ.pack(len(payload), seq), zlib.crc32(payload))


def frame(payload: bytes, seq: int) -> bytes:
    return BATCH_HDR.pack(BATCH_MAGIC, len(payload), seq, batch_crc(payload, seq)) + payload


RawOp = tuple[int, int, int, bytes]


def decode_ops(payload: bytes | memoryview) -> list[RawOp]:
    """Ops (kind, rid, rtype, data) of a payload whose CRC already checked out; plain tuples
    because recovery makes millions of them.  ValueError if malformed."""
    ops: list[RawOp] = []
    put_unpack, put_size, del_unpack, del_size = (
        OP_PUT.unpack_from,
        OP_PUT.size,
        OP_DEL.unpack_from,
        OP_DEL.size,
    )
    pos, end = 0, len(payload)
    while pos < end:
        kind = payload[pos]
        if kind == PUT:
            _, rid, rtype, n = put_unpack(payload, pos)
            pos += put_size
            ops.append((PUT, rid, rtype, bytes(payload[pos : pos + n])))
            pos += n
        elif kind == DELETE:
            _, rid = del_unpack(payload, pos)
            pos += del_size
            ops.append((DELETE, rid, 0, b""))
        else:
            raise ValueError(f"bad op kind {kind} at payload offset {pos}")
    if pos != end:
        raise ValueError("op overruns its batch")
    return ops


OK, STALE, ZERO, BAD = range(4)


def probe(buf: bytes | bytearray, pos: int, seq: int) -> tuple[int, int]:
    """Classify the bytes at ``pos``: (OK|STALE|ZERO|BAD, frame length when OK or STALE)."""
    if pos + BATCH_HDR.size > len(buf):
        return (ZERO if not buf[pos:].strip(b"\0") else BAD), 0
    magic, length, bseq, crc = BATCH_HDR.unpack_from(buf, pos)
    if magic != BATCH_MAGIC:
        hdr = buf[pos : pos + BATCH_HDR.size]
        return (ZERO if not hdr.strip(b"\0") else BAD), 0
    end = pos + BATCH_HDR.size + length
    if end > len(buf):
        return BAD, 0
    payload = memoryview(buf)[pos + BATCH_HDR.size : end]
    if batch_crc(payload, bseq) != crc:
        return BAD, 0
    return (OK if bseq == seq else STALE), end - pos


@dataclass
class Scan:
    """Where a file's valid batches are, and which byte ranges were damaged."""

    batches: list[tuple[int, int]] = field(default_factory=list)  # (payload start, end)
    end: int = HEADER_SIZE  # just after the last valid batch
    damaged: list[tuple[int, int]] = field(default_factory=list)  # (offset, bytes) mid-file
    tail: tuple[int, int] | None = None  # (offset, bytes) damage followed by nothing valid


def _next_valid(buf: bytes | bytearray, pos: int, seq: int) -> int | None:
    while True:
        pos = buf.find(BATCH_MAGIC_BYTES, pos)
        if pos < 0:
            return None
        if probe(buf, pos, seq)[0] == OK:
            return pos
        pos += 1


def _bad_extent(buf: bytes | bytearray, pos: int) -> int:
    """How many bytes a bad frame at ``pos`` spans (its declared size if plausible)."""
    if pos + BATCH_HDR.size <= len(buf):
        magic, length, _, _ = BATCH_HDR.unpack_from(buf, pos)
        if magic == BATCH_MAGIC:
            return min(BATCH_HDR.size + length, len(buf) - pos)
    gap = buf.find(b"\0" * 64, pos)
    return (len(buf) if gap < 0 else gap) - pos


def scan(buf: bytes | bytearray, seq: int) -> Scan:
    """Find the batches of file ``seq`` in ``buf`` (the whole file, header included).

    Data ends at zeros or at a batch from an earlier life of the file.  A bad frame is
    "tail" damage when no valid batch of this file follows it, else "damaged" (a hole).
    """
    out = Scan()
    pos, size = HEADER_SIZE, len(buf)
    view, unpack, hsize, crc32, lenseq = (
        memoryview(buf),
        BATCH_HDR.unpack_from,
        20,
        zlib.crc32,
        LEN_SEQ.pack,
    )
    while pos < size:
        if pos + hsize <= size:  # the common case inline: a valid batch of this file
            magic, length, bseq, crc = unpack(buf, pos)
            end = pos + hsize + length
            if (
                magic == BATCH_MAGIC
                and bseq == seq
                and end <= size
                and crc32(lenseq(length, seq), crc32(view[pos + hsize : end])) == crc
            ):
                out.batches.append((pos + hsize, end))
                pos = out.end = end
                continue
        status, length = probe(buf, pos, seq)
        if status == OK:
            out.batches.append((pos + BATCH_HDR.size, pos + length))
            pos += length
            out.end = pos
            continue
        nxt = _next_valid(buf, pos + 1, seq)
        if nxt is None:
            if status == BAD:
                out.tail = (pos, _bad_extent(buf, pos))
            break
        out.damaged.append((pos, nxt - pos))
        pos = nxt
    return out
