"""Compaction: rewrite the live records of the oldest journal files into fresh files.

Runs in its own thread while new batches go on to files with higher seqs.  The output gets
seqs reserved between the old files and the new ones, so replay order is "compacted state,
then everything written since".  Crash safety comes from a commit marker:

1. write ``*.cmp`` files and fsync them (a crash here: recovery deletes them);
2. write the marker naming the old range and the new seqs (the commit point);
3. rename ``*.cmp`` into place, delete the old files, fsync the directory;
4. delete the marker (a crash before this: recovery redoes step 3).
"""

from __future__ import annotations

import os

from waystation.core.store.api import PUT, Record
from waystation.core.store.files import Layout
from waystation.core.store.recovery import replay_file
from waystation.core.store.segment import (
    BATCH_HDR,
    HEADER_SIZE,
    KIND_DATA,
    OP_PUT,
    frame,
    pack_file_header,
)

BATCH_LIMIT = 1 << 20


class CommittedError(Exception):
    """Compaction failed after its commit point: the directory needs recovery."""


def _batches(records: dict[int, Record], limit: int) -> list[bytes]:
    """Payloads of put ops in record order, each at most ``limit`` unless one op is bigger."""
    out: list[bytes] = []
    parts: list[bytes] = []
    size = 0
    for rid, rec in records.items():
        n = OP_PUT.size + len(rec.data)
        if parts and size + n > limit:
            out.append(b"".join(parts))
            parts, size = [], 0
        parts.append(OP_PUT.pack(PUT, rid, rec.rtype, len(rec.data)))
        parts.append(rec.data)
        size += n
    if parts:
        out.append(b"".join(parts))
    return out


def _pack(payloads: list[bytes], cap: int) -> list[list[bytes]]:
    """Group payloads into files greedily; a payload bigger than a file gets its own."""
    files: list[list[bytes]] = []
    cur: list[bytes] = []
    used = 0
    for p in payloads:
        n = BATCH_HDR.size + len(p)
        if cur and used + n > cap:
            files.append(cur)
            cur, used = [], 0
        cur.append(p)
        used += n
    if cur:
        files.append(cur)
    return files


def compact(
    layout: Layout, file_size: int, old_seqs: list[int], first_seq: int, max_files: int
) -> list[tuple[int, int]]:
    """Replace files ``old_seqs`` by compacted files; returns [(seq, bytes of batches)]."""
    records: dict[int, Record] = {}
    for seq in old_seqs:
        replay_file(layout.data_path(seq).read_bytes(), seq, records)
    cap = file_size - HEADER_SIZE
    limit = min(BATCH_LIMIT, cap - BATCH_HDR.size)
    groups = _pack(_batches(records, limit), cap)
    if len(groups) > max_files:
        raise RuntimeError(f"compaction needs {len(groups)} files, {max_files} reserved")
    written: list[tuple[int, int]] = []
    try:
        for i, payloads in enumerate(groups):
            seq = first_seq + i
            body = b"".join(frame(p, seq) for p in payloads)
            fd = os.open(layout.cmp_path(seq), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                data = memoryview(pack_file_header(KIND_DATA, seq) + body)
                while data:
                    data = data[os.write(fd, data) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            written.append((seq, len(body)))
        layout.fsync_dir()
        layout.write_marker(max(old_seqs), [s for s, _ in written])
    except Exception:  # roll back (a crash instead leaves this to recovery)
        layout.marker_path.unlink(missing_ok=True)
        for seq, _ in written:
            layout.cmp_path(seq).unlink(missing_ok=True)
        if len(groups) > len(written):
            layout.cmp_path(first_seq + len(written)).unlink(missing_ok=True)
        raise
    try:
        for seq, _ in written:
            os.rename(layout.cmp_path(seq), layout.data_path(seq))
        for seq in old_seqs:
            os.unlink(layout.data_path(seq))
        layout.fsync_dir()
        layout.marker_path.unlink()
        layout.fsync_dir()
    except OSError as exc:
        raise CommittedError(str(exc)) from exc
    return written
