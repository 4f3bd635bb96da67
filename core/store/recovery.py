"""Opening a journal directory: finish or discard a compaction, sort files, replay batches.

Damage is reported, never loaded: a bad batch at the end of the newest file is a torn
write from a crash (zeroed so a later recovery is not confused by it); any other bad batch
is corruption, listed in the report and logged as an error.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from waystation.core.store.api import PUT, Record, RecoveryReport, StoreError
from waystation.core.store.files import Layout
from waystation.core.store.index import FileInfo, LiveIndex
from waystation.core.store.segment import (
    BATCH_HDR,
    HEADER_SIZE,
    KIND_DATA,
    OP_DEL,
    OP_PUT,
    FileHeader,
    Scan,
    decode_ops,
    scan,
    unpack_file_header,
)

log = logging.getLogger(__name__)


@dataclass
class State:
    """Everything ``FileJournal`` needs to carry on where the last run stopped."""

    records: dict[int, Record]
    report: RecoveryReport
    index: LiveIndex
    infos: list[FileInfo]  # data files, oldest first
    last_end: int = HEADER_SIZE  # append offset in the newest data file
    last_cap: int = 0  # size of the newest data file (0: none)
    spares: list[Path] = field(default_factory=list)
    next_seq: int = 1
    next_free: int = 1


def replay_file(
    buf: bytes,
    seq: int,
    records: dict[int, Record],
    index: LiveIndex | None = None,
    fi: FileInfo | None = None,
    leave_over: int = -1,
) -> tuple[Scan, int]:
    """Apply the valid batches of one file; returns the scan and how many batches applied.
    Records larger than ``leave_over`` bytes (>= 0) are left on disk: only where they are
    is kept (:class:`Record`), so recovery holds no more than one file's bytes at a time."""
    found = scan(buf, seq)
    view = memoryview(buf)
    applied = 0
    for start, end in found.batches:
        try:
            ops = decode_ops(view[start:end])
        except ValueError as exc:  # CRC-valid but undecodable: treat like damage
            found.damaged.append((start, end - start))
            log.error("journal file seq %d: undecodable batch at %d: %s", seq, start, exc)
            continue
        applied += 1
        if fi is not None:
            fi.used += end - start + BATCH_HDR.size
        pos = start  # where the next op starts in the file
        for kind, rid, rtype, data in ops:
            if kind == PUT:
                n = len(data)
                pos += OP_PUT.size
                if 0 <= leave_over < n:
                    records[rid] = Record(rtype, b"", seq, pos, n)
                else:
                    records[rid] = Record(rtype, data)
                pos += n
                if index is not None and fi is not None:
                    index.put(rid, OP_PUT.size + n, fi)
            else:
                pos += OP_DEL.size
                records.pop(rid, None)
                if index is not None:
                    index.delete(rid)
    return found, applied


def _finish_compaction(layout: Layout) -> int:
    """Complete a committed compaction or discard an uncommitted one; returns a seq floor."""
    try:
        marker = layout.read_marker()
    except (ValueError, OSError) as exc:
        raise StoreError(f"compaction marker unreadable: {exc}") from exc
    if marker is None:
        for path in layout.cmp_files():
            log.warning("discarding incomplete compaction output %s", path.name)
            path.unlink()
        return 0
    old_max, new = marker
    for seq in new:
        cmp = layout.cmp_path(seq)
        if cmp.exists():
            os.rename(cmp, layout.data_path(seq))
        elif not layout.data_path(seq).exists():
            raise StoreError(f"compacted file for seq {seq} is missing")
    for path in layout.journal_files():
        hdr = _read_header(path)
        if hdr is not None and hdr.kind == KIND_DATA and hdr.seq <= old_max:
            path.unlink()
    layout.fsync_dir()
    layout.marker_path.unlink()
    layout.fsync_dir()
    log.info("finished an interrupted compaction (files up to seq %d replaced)", old_max)
    return max(new, default=old_max)


def _read_header(path: Path) -> FileHeader | None:
    with open(path, "rb") as f:
        return unpack_file_header(f.read(HEADER_SIZE))


def recover(layout: Layout, file_size: int, leave_over: int = -1) -> State:
    layout.directory.mkdir(parents=True, exist_ok=True)
    for tmp in layout.tmp_files():
        tmp.unlink()
    seq_floor = _finish_compaction(layout)
    data: dict[int, Path] = {}
    spares: list[Path] = []
    report = RecoveryReport()
    for path in layout.journal_files():
        hdr = _read_header(path)
        if hdr is None:  # header writes are single-sector, so this is damage: keep it aside
            msg = f"{path.name}: no valid file header, moved aside as {path.name}.bad"
            log.error("journal corruption: %s", msg)
            report.corrupt.append(msg)
            os.rename(path, path.with_name(path.name + ".bad"))
            continue
        seq_floor = max(seq_floor, hdr.seq)
        if hdr.kind == KIND_DATA:
            if hdr.seq in data:
                raise StoreError(f"{path.name} and {data[hdr.seq].name} share seq {hdr.seq}")
            data[hdr.seq] = path
        elif path.stat().st_size == file_size:
            spares.append(path)
        else:
            path.unlink()
    state = State({}, report, LiveIndex(), [])
    state.next_seq = seq_floor + 1
    for seq, path in data.items():  # names follow headers
        if path != layout.data_path(seq):
            os.rename(path, layout.data_path(seq))
            data[seq] = layout.data_path(seq)
    used_free = [k for k in map(layout.free_index, spares) if k is not None]
    state.next_free = max(used_free, default=0) + 1
    for i, path in enumerate(spares):
        if layout.free_index(path) is None:
            spares[i] = layout.free_path(state.next_free)
            state.next_free += 1
            os.rename(path, spares[i])
    state.spares = spares
    order = sorted(data)
    for seq in order:
        _replay_one(state, data[seq], seq, seq == order[-1], leave_over)
    state.report.files = len(order)
    state.report.records = len(state.records)
    return state


def _replay_one(state: State, path: Path, seq: int, last: bool, leave_over: int) -> None:
    buf = path.read_bytes()
    fi = FileInfo([seq])
    found, applied = replay_file(buf, seq, state.records, state.index, fi, leave_over)
    state.infos.append(fi)
    state.report.batches += applied
    for off, n in found.damaged:
        msg = f"{path.name} at offset {off}: {n} bytes damaged, valid batches follow"
        log.error("journal corruption: %s", msg)
        state.report.corrupt.append(msg)
    if found.tail is not None:
        off, n = found.tail
        if last:
            msg = f"{path.name} at offset {off}: {n} bytes discarded"
            log.warning("journal torn tail (interrupted write): %s", msg)
            state.report.torn_tail = msg
            fd = os.open(path, os.O_RDWR)
            try:
                os.pwrite(fd, bytes(n), off)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        else:
            msg = f"{path.name} at offset {off}: {n} bytes damaged at the end of a full file"
            log.error("journal corruption: %s", msg)
            state.report.corrupt.append(msg)
    if last:
        state.last_end = found.end
        state.last_cap = len(buf)
