"""Opening a journal directory: finish or discard a compaction, sort files, replay batches.

Damage is reported, never loaded: a bad batch at the end of the newest file is a torn
write from a crash (zeroed so a later recovery is not confused by it); any other bad batch
is corruption, listed in the report and logged as an error.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import compress
from pathlib import Path
from typing import Any

from waystation.core.store.api import DELETE, PUT, Record, RecoveryReport, StoreError
from waystation.core.store.files import Layout
from waystation.core.store.index import Columns, FileInfo, LiveIndex
from waystation.core.store.segment import (
    BATCH_HDR,
    HEADER_SIZE,
    KIND_DATA,
    OP_DEL,
    OP_PUT,
    FileHeader,
    RawOp,
    Scan,
    decode_ops,
    scan,
    unpack_file_header,
)

log = logging.getLogger(__name__)
_KEEP = bytes([1, 0]) + bytes(254)  # dropped-row flags -> kept-row flags
_PUT_SIZE, _DEL_SIZE = OP_PUT.size, OP_DEL.size
_put_unpack, _del_unpack = OP_PUT.unpack_from, OP_DEL.unpack_from
Raw = tuple[int, int, int, int, bytes]  # type, file, offset, size (0: in memory), bytes


class RecordTable(dict[int, Record]):
    """The live records of a journal that leaves large records on disk, in rid order.

    The file being replayed keeps its records in the dict itself; :meth:`freeze` then
    moves them into :class:`Columns` (rid -> type, file, offset, size; a small record's
    bytes go to one bytearray, file 0), about 40 bytes a record instead of a ``Record``,
    its ints and a dict entry (about 200), so replaying a backlog of millions of records
    does not hold millions of objects.  ``Record`` objects are made as they are read.
    """

    __slots__ = ("_cur", "_cols", "_blob")

    def __init__(self) -> None:
        super().__init__()  # stays empty: the records are in _cur and _cols
        self._cur: dict[int, Raw] = {}  # the file being replayed: rid -> raw record
        self._cols = Columns("qqqq")
        self._blob = bytearray()

    # ---- replay
    def put_raw(self, rid: int, rtype: int, seq: int, off: int, size: int, data: bytes) -> None:
        """A record at ``off`` in file ``seq`` (``size`` > 0), or in memory (``data``)."""
        if rid <= self._cols.max and (i := self._cols.find(rid)) >= 0:
            self._cols.drop(i)
        self._cur[rid] = (rtype, seq, off, size, data)

    def discard(self, rid: int) -> None:
        if self._cur.pop(rid, None) is None and (i := self._cols.find(rid)) >= 0:
            self._cols.drop(i)

    def freeze(self) -> None:
        blob = self._blob
        rows: list[tuple[int, ...]] = []
        for rid, (rtype, seq, off, size, data) in sorted(self._cur.items()):
            if size:
                rows.append((rid, rtype, seq, off, size))
            else:
                rows.append((rid, rtype, 0, len(blob), len(data)))
                blob += data
        self._cur.clear()
        self._cols.add(rows)

    def raw(self) -> Iterator[tuple[int, int, int, int, int]]:
        """Live records as (rid, type, file, offset, size) in rid order; file 0: the bytes
        are in memory, see :meth:`inline`."""
        self.freeze()
        return self._cols.rows()  # type: ignore[return-value]

    def inline(self, off: int, size: int) -> bytes:
        return bytes(memoryview(self._blob)[off : off + size])

    # ---- dict[int, Record]
    def _record(self, rtype: int, seq: int, off: int, size: int) -> Record:
        if seq == 0:
            return Record(rtype, self.inline(off, size))
        return Record(rtype, b"", seq, off, size)

    def _row(self, i: int) -> Record:
        c = self._cols.cols
        return self._record(c[0][i], c[1][i], c[2][i], c[3][i])

    @staticmethod
    def _of(raw: Raw) -> Record:
        rtype, seq, off, size, data = raw
        return Record(rtype, b"", seq, off, size) if size else Record(rtype, data)

    def __setitem__(self, rid: int, r: Record) -> None:
        self.put_raw(rid, r.rtype, r.seq, r.offset, r.size, r.data)

    def pop(self, rid: int, default: Any = None) -> Any:
        raw = self._cur.pop(rid, None)
        if raw is not None:
            return self._of(raw)
        i = self._cols.find(rid)
        if i < 0:
            return default
        r = self._row(i)
        self._cols.drop(i)
        return r

    def __getitem__(self, rid: int) -> Record:
        raw = self._cur.get(rid)
        if raw is not None:
            return self._of(raw)
        i = self._cols.find(rid)
        if i < 0:
            raise KeyError(rid)
        return self._row(i)

    def get(self, rid: int, default: Any = None) -> Any:
        try:
            return self[rid]
        except KeyError:
            return default

    def __contains__(self, rid: object) -> bool:
        return rid in self._cur or (isinstance(rid, int) and self._cols.find(rid) >= 0)

    def __len__(self) -> int:
        return len(self._cur) + self._cols.live

    def items(self) -> Iterator[tuple[int, Record]]:  # type: ignore[override]
        for rid, rtype, seq, off, size in self.raw():
            yield rid, self._record(rtype, seq, off, size)

    def __iter__(self) -> Iterator[int]:
        self.freeze()
        return compress(self._cols.keys, self._cols.gone.translate(_KEEP))

    def keys(self) -> Iterator[int]:  # type: ignore[override]
        return iter(self)

    def values(self) -> Iterator[Record]:  # type: ignore[override]
        return (r for _, r in self.items())

    def clear(self) -> None:
        self._cur.clear()
        self._cols = Columns("qqqq")
        self._blob = bytearray()


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
    buf: bytes | bytearray,
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
    table = records if isinstance(records, RecordTable) and leave_over >= 0 else None
    for start, end in found.batches:
        try:
            if table is not None:
                _apply_left(view[start:end], start, seq, leave_over, table, index, fi)
            else:
                _apply(decode_ops(view[start:end]), start, seq, leave_over, records, index, fi)
        except ValueError as exc:  # CRC-valid but undecodable: treat like damage
            found.damaged.append((start, end - start))
            log.error("journal file seq %d: undecodable batch at %d: %s", seq, start, exc)
            continue
        applied += 1
        if fi is not None:
            fi.used += end - start + BATCH_HDR.size
    return found, applied


def _apply(
    ops: list[RawOp],
    pos: int,
    seq: int,
    leave_over: int,
    records: dict[int, Record],
    index: LiveIndex | None,
    fi: FileInfo | None,
) -> None:
    """Apply one decoded batch that starts at ``pos`` in file ``seq``."""
    for kind, rid, rtype, data in ops:
        if kind == PUT:
            n = len(data)
            pos += _PUT_SIZE
            if 0 <= leave_over < n:
                records[rid] = Record(rtype, b"", seq, pos, n)
            else:
                records[rid] = Record(rtype, data)
            pos += n
            if index is not None and fi is not None:
                index.put(rid, _PUT_SIZE + n, fi)
        else:
            pos += _DEL_SIZE
            records.pop(rid, None)
            if index is not None:
                index.delete(rid)


def _apply_left(
    payload: memoryview,
    start: int,
    seq: int,
    leave_over: int,
    table: RecordTable,
    index: LiveIndex | None,
    fi: FileInfo | None,
) -> None:
    """Apply one batch (payload at ``start`` in file ``seq``) into a record table, copying
    only the data of records kept in memory: a large record is never copied out of the
    file buffer.  The batch is checked whole first (ValueError: none of it applied)."""
    ops: list[tuple[int, int, int, int, int]] = []  # kind, rid, type, data offset, size
    pos, end = 0, len(payload)
    while pos < end:
        kind = payload[pos]
        if kind == PUT:
            _, rid, rtype, n = _put_unpack(payload, pos)
            pos += _PUT_SIZE
            ops.append((PUT, rid, rtype, pos, n))
            pos += n
        elif kind == DELETE:
            _, rid = _del_unpack(payload, pos)
            pos += _DEL_SIZE
            ops.append((DELETE, rid, 0, 0, 0))
        else:
            raise ValueError(f"bad op kind {kind} at payload offset {pos}")
    if pos != end:
        raise ValueError("op overruns its batch")
    for kind, rid, rtype, off, n in ops:
        if kind == PUT:
            if leave_over < n:
                table.put_raw(rid, rtype, seq, start + off, n, b"")
            else:
                table.put_raw(rid, rtype, 0, 0, 0, bytes(payload[off : off + n]))
            if index is not None and fi is not None:
                index.put(rid, _PUT_SIZE + n, fi)
        else:
            table.discard(rid)
            if index is not None:
                index.delete(rid)


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
    records = RecordTable() if leave_over >= 0 else {}
    state = State(records, report, LiveIndex(), [])
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
    buf = bytearray()  # one buffer for every file: no 10 MiB garbage per file
    for seq in order:
        buf = _replay_one(state, data[seq], seq, seq == order[-1], leave_over, buf)
    state.report.files = len(order)
    state.report.records = len(state.records)
    return state


def _read_into(path: Path, buf: bytearray) -> bytearray:
    """The file's bytes, in ``buf`` when it has the file's size (data files mostly do)."""
    with open(path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if len(buf) != size:
            buf = bytearray(size)
        view, got = memoryview(buf), 0
        while got < size:
            n = f.readinto(view[got:])
            if not n:
                raise StoreError(f"{path.name} shrank while it was read")
            got += n
        view.release()
    return buf


def _replay_one(
    state: State, path: Path, seq: int, last: bool, leave_over: int, buf: bytearray
) -> bytearray:
    buf = _read_into(path, buf)
    fi = FileInfo([seq])
    found, applied = replay_file(buf, seq, state.records, state.index, fi, leave_over)
    cap = len(buf)
    state.index.freeze()  # this file's records into compact columns
    if isinstance(state.records, RecordTable):
        state.records.freeze()
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
        state.last_cap = cap
    return buf
