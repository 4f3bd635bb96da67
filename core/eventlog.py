"""The rolling event log: lifecycle records written by a background thread, never by the loop.

``emit`` (called on the event loop) only takes a timestamp and appends one small tuple to an
in-memory buffer.  A writer thread drains the buffer, turns the entries into fixed-schema
records (:data:`waystation.core.events.FIELDS`) and writes them as JSON Lines or Parquet.

Bounded: the buffer holds at most ``buffer_limit`` entries.  When the writer falls behind (a
slow or stalled disk, more events than it can serialise), further events are **dropped**, not
queued: ``dropped`` counts them and a warning is logged at most every ``warn_interval``
seconds.  The loop never blocks and memory never grows past the limit (plus one Parquet row
group being assembled by the writer).  A record that cannot be converted or written (a value
out of range, a full disk) is counted in ``errors`` and logged, rate-limited; the thread goes on.

Files: ``events-000001.jsonl`` / ``events-000001.parquet`` ..., one number sequence per folder.
The file being written is ``.events-NNNNNN.<ext>.part`` (hidden, so Spark and globs on
``events-*`` skip it); it is fsynced and renamed to its final name when it reaches
``max_file_size``, when it is ``roll_interval`` old, and on ``close()``.  Only complete files
carry the final name, and at most ``max_files`` of them are kept (the oldest are deleted).  A
crash leaves at most the one ``.part`` file: on the next start a JSON Lines one is cut back
to its last complete line and renamed (its records are kept), a Parquet one (unreadable
without its footer) is deleted with a warning; numbering resumes after the highest number
found.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import json
import logging
import os
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from time import time_ns as _time_ns
from typing import TYPE_CHECKING, Any, Union

from waystation.core.events import (
    EVENTS,
    LEGACY_EVENTS,
    SCHEMA_VERSION,
    arrow_schema,
)

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("waystation.events")

FORMATS = ("jsonl", "parquet")
_COMPLETE = re.compile(r"^events-(\d+)\.(jsonl|parquet)$")
_PARTIAL = re.compile(r"^\.events-(\d+)\.(jsonl|parquet)\.part$")
_EVENT_SET = frozenset(EVENTS)
_INT64 = 1 << 63
_INT32 = 1 << 31
_MAX_UNKNOWN_KINDS = 64  # distinct unknown event names warned about (bounded memory)

_BATCH = 16384  # entries the writer converts at a time

# (time ns, kind, message id, address, size, queue, trace id, durable, other extra fields)
Entry = tuple[int, str, int, str, int, "str | None", object, object, dict[str, object]]
_NONE: dict[str, object] = {}  # the extra fields of most entries (never written to)
# a batch by column, in FIELDS order without the constant ``v`` and ``node``: ts_us, event,
# trace_id, message_id, address, queue, protocol, session, size, durable, delivery_count,
# reason, peer
Columns = tuple[Sequence[Any], ...]
Row = tuple[Any, ...]  # one record in the order of Columns
Encoded = Union[tuple[list[str], list[int]], "pa.RecordBatch"]  # what a file's add() takes


class EventLogError(Exception):
    """The event log cannot be set up (bad folder, unknown format, pyarrow missing)."""


def _int(v: object, bound: int) -> int:
    i = int(v)  # type: ignore[call-overload]
    if not -bound <= i < bound:
        raise ValueError(f"{i} out of range")
    return i


def _fsync_path(path: Path) -> None:
    """fsync a folder (after a rename) or a file written by a library that hides its fd."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- file formats (used by the writer thread only) ---------------------------------------------
#
# The writer shares the GIL with the event loop, so its per-record Python work is what the loop
# pays for.  A batch is therefore handled column by column: one ``zip(*batch)`` transposes it,
# each column is converted by a C-level ``map`` (or one pyarrow call), and type and range checks
# are done per column, not per value.  Only a batch with an odd value (a wrong type, a legacy
# event name, an out-of-range number) takes the exact per-record path (:meth:`EventLog._row`).

_js = json.encoder.encode_basestring_ascii  # C, ASCII out: len(text) == len(bytes)
_NULL = "null"
_JSON_BOOL = {None: _NULL, True: "true", False: "false"}
_to_us = (1000).__rfloordiv__  # ns -> us


class _Odd(Exception):
    """A batch the column path cannot take as it is: it goes the per-record way."""


def _check_ints(col: Sequence[Any], bound: int, nullable: bool = False) -> None:
    """Every value a plain int within ``-bound..bound-1`` (None too if ``nullable``): three
    C-level passes over the column instead of a test per value."""
    types = set(map(type, col))
    if nullable and type(None) in types:
        types.discard(type(None))
        col = [v for v in col if v is not None]
    if types and (types != {int} or min(col) < -bound or max(col) >= bound):
        raise _Odd


def _js_nullable(col: Sequence[object]) -> list[str]:
    if col.count(None) == len(col):
        return [_NULL] * len(col)
    return [_NULL if v is None else _js(v) for v in col]  # type: ignore[arg-type]


class _JsonlFile:
    """One JSON object per line, every field present (``null`` when unknown)."""

    ext = "jsonl"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = open(path, "wb")  # noqa: SIM115 - closed by finish()/abort()
        self._pending: list[str] = []
        self.size = 0
        self.rows = 0

    @staticmethod
    def encode(cols: Columns, node: str) -> tuple[list[str], list[int]]:
        """The lines of a batch (``node`` JSON-encoded) and their running byte total; raises
        on a value that is not of its column's type (the per-record path cleans those)."""
        ts, kinds, tid, mid, addr, queue, proto, sess, size, dur, dc, reason, peer = cols
        _check_ints(mid, _INT64)
        _check_ints(size, _INT64)
        _check_ints(dc, _INT32, nullable=True)
        v = SCHEMA_VERSION
        # one f-string per record over pre-encoded columns: the cheapest per-record work
        # found (a %-template or a dict through json.dumps cost 1.5-4x as much)
        lines = [
            f'{{"v":{v},"ts_us":{a},"node":{node},"event":{b},"trace_id":{c},'
            f'"message_id":{d},"address":{e},"queue":{f},"protocol":{g},"session":{h},'
            f'"size":{i},"durable":{j},"delivery_count":{k},"reason":{m},"peer":{n}}}\n'
            for a, b, c, d, e, f, g, h, i, j, k, m, n in zip(
                ts,
                map(_js, kinds),
                _js_nullable(tid),
                mid,
                map(_js, addr),
                _js_nullable(queue),
                _js_nullable(proto),
                _js_nullable(sess),
                size,
                map(_JSON_BOOL.__getitem__, dur),
                [_NULL if x is None else x for x in dc],
                _js_nullable(reason),
                _js_nullable(peer),
                strict=True,
            )
        ]
        return lines, list(itertools.accumulate(map(len, lines)))

    def add(self, data: tuple[list[str], list[int]], start: int, limit: int) -> int:
        """Take lines from ``start`` up to the one that brings the file to ``limit`` bytes;
        return where it stopped.  Nothing is written before :meth:`flush`."""
        lines, total = data
        base = total[start - 1] if start else 0
        end = min(len(lines), bisect.bisect_left(total, base + limit - self.size) + 1)
        self._pending.extend(lines[start:end])
        self.size += total[end - 1] - base
        self.rows += end - start
        return end

    def write(self) -> None:
        """Nothing: lines are handed to the OS once per batch, by :meth:`flush`."""

    def flush(self) -> None:
        """Hand what was added to the OS (a process crash keeps it; fsync is on finish)."""
        if self._pending:
            data = "".join(self._pending).encode("ascii")
            self._pending.clear()
            self._fh.write(data)
            self._fh.flush()

    def finish(self) -> None:
        self.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()

    def abort(self) -> None:
        self._pending.clear()
        try:
            self._fh.close()
        except OSError:
            pass


class _ParquetFile:
    """Rows collected into row groups of ``row_group_rows``; readable only once finished."""

    ext = "parquet"

    def __init__(self, path: Path, row_group_rows: int) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self._pa = pa
        self.path = path
        self.schema = arrow_schema()
        self._writer = pq.ParquetWriter(str(path), self.schema, compression="snappy")
        self._staged: list[pa.RecordBatch] = []
        self._staged_rows = 0
        self._rg = row_group_rows
        self.size = 0
        self.rows = 0

    @staticmethod
    def encode(cols: Columns, schema: pa.Schema, node: str) -> pa.RecordBatch:
        """A batch as one record batch: one pyarrow conversion per column, which also checks
        types and ranges (raises on a value that does not fit)."""
        import pyarrow as pa

        n = len(cols[0])
        ts, kinds, tid, mid, addr, queue, proto, sess, size, dur, dc, reason, peer = cols
        arrays = [
            pa.repeat(pa.scalar(SCHEMA_VERSION, pa.int16()), n),
            pa.array(ts, pa.int64()),
            pa.repeat(pa.scalar(node, pa.string()), n),
        ]
        for col, f in zip(cols[1:], list(schema)[3:], strict=True):
            a = pa.array(col, f.type)
            if a.null_count and not f.nullable:
                raise _Odd
            arrays.append(a)
        return pa.record_batch(arrays, schema=schema)

    def add(self, data: pa.RecordBatch, start: int, limit: int) -> int:
        """Stage rows from ``start`` up to a full row group; return where it stopped."""
        end = min(data.num_rows, start + self._rg - self._staged_rows)
        self._staged.append(data.slice(start, end - start))
        self._staged_rows += end - start
        self.rows += end - start
        return end

    def write(self) -> None:
        """Write the staged rows if they make a full row group."""
        if self._staged_rows >= self._rg:
            self._write_group()

    def _write_group(self) -> None:
        table = self._pa.Table.from_batches(self._staged, schema=self.schema)
        self._staged = []
        self._staged_rows = 0
        self._writer.write_table(table, row_group_size=table.num_rows)
        self.size = os.path.getsize(self.path)

    def flush(self) -> None:
        """Nothing: a Parquet file is only readable once closed, so rows wait for a full row
        group (bounded by ``row_group_rows``)."""

    def finish(self) -> None:
        if self._staged_rows:
            self._write_group()
        self._writer.close()
        _fsync_path(self.path)

    def abort(self) -> None:
        self._staged = []
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001 - the file is given up anyway
            pass


# --- the log -----------------------------------------------------------------------------------


class EventLog:
    """An :class:`~waystation.core.events.EventSink` writing rolling files off the loop.

    ``emit`` and ``close`` are for the event loop's thread; everything else happens on the
    writer thread.  See the module docstring for the drop policy and the file life cycle.
    """

    def __init__(
        self,
        directory: Path | str,
        node: str,
        *,
        format: str = "jsonl",
        max_file_size: int = 64 * 1024 * 1024,
        max_files: int = 24,
        roll_interval: float = 3600.0,
        buffer_limit: int = 100_000,
        flush_interval: float = 0.2,
        close_timeout: float = 30.0,
        warn_interval: float = 10.0,
    ) -> None:
        if format not in FORMATS:
            raise EventLogError(f"unknown event log format {format!r}; use one of {FORMATS}")
        if max_file_size < 1 or max_files < 1 or buffer_limit < 1 or roll_interval <= 0:
            raise EventLogError(
                "max_file_size, max_files, buffer_limit and roll_interval must be positive"
            )
        if format == "parquet":
            try:
                import pyarrow.parquet  # noqa: F401
            except ImportError as e:
                raise EventLogError(f"the parquet event log needs pyarrow: {e}") from None
        self.dir = Path(directory)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise EventLogError(f"cannot create event log folder {self.dir}: {e}") from None
        self.node = node
        self.format = format
        self.max_file_size = max_file_size
        self.max_files = max_files
        self.roll_interval = roll_interval
        self.buffer_limit = buffer_limit
        self.flush_interval = flush_interval
        self.close_timeout = close_timeout
        self.warn_interval = warn_interval
        # a row group is about 1/256 of a file: several groups per file, bounded memory
        self.row_group_rows = max(16, min(65536, max_file_size // 256))

        # emitted = written + in the current file + buffered + dropped + errors
        self.written = 0  # records in completed files (writer thread)
        self.dropped = 0  # events refused because the buffer was full (loop thread)
        self.errors = 0  # records lost to conversion or I/O errors (writer thread)
        self.rolled = 0  # files completed (writer thread)
        self._dropped_warned = 0
        self._last_drop_warn = -1e18
        self._last_error_warn = -1e18
        self._unknown_kinds: set[str] = set()

        self._buf: collections.deque[Entry] = collections.deque()
        self._limit = buffer_limit
        self._wake_at = max(1, min(_BATCH, buffer_limit // 4))
        self._wake = threading.Event()
        self._stopping = False
        self._closed = False
        self._file: _JsonlFile | _ParquetFile | None = None
        self._node_js = _js(node)
        self._schema = arrow_schema() if format == "parquet" else None
        self._opened_at = 0.0
        self._seq = self._recover()
        self._thread = threading.Thread(target=self._run, name="waystation-eventlog", daemon=True)
        self._thread.start()

    # --- loop side -------------------------------------------------------------------------

    def emit(
        self,
        kind: str,
        message_id: int,
        address: str,
        size: int,
        queue: str | None = None,
        *,
        trace_id: object = None,
        durable: object = None,
        **extra: object,
    ) -> None:
        # the loop's whole cost: a length test, a clock read and one append.  The two fields
        # every message event has are named parameters, so ``extra`` is usually empty and not
        # kept: fewer objects for the loop to allocate and for the GC to walk
        buf = self._buf
        n = len(buf)
        if n >= self._limit:
            self._drop()
            return
        buf.append(
            (_time_ns(), kind, message_id, address, size, queue, trace_id, durable, extra or _NONE)
        )
        if n >= self._wake_at and not self._wake.is_set():
            self._wake.set()

    def _drop(self) -> None:
        self.dropped += 1
        if self._closed:
            return
        now = time.monotonic()
        if now - self._last_drop_warn >= self.warn_interval:
            self._last_drop_warn = now
            log.warning(
                "event log %s: writer behind, %d events dropped (buffer_limit %d; %d in all)",
                self.dir,
                self.dropped - self._dropped_warned,
                self.buffer_limit,
                self.dropped,
            )
            self._dropped_warned = self.dropped

    def close(self) -> None:
        """Write everything buffered, fsync and rename the current file; later events are
        dropped.  Waits at most ``close_timeout`` seconds for the writer."""
        if self._closed:
            return
        self._closed = True
        self._limit = 0  # emit drops from now on, without a separate test on its path
        self._stopping = True
        self._wake.set()
        self._thread.join(self.close_timeout)
        if self._thread.is_alive():
            log.error(
                "event log %s: writer did not finish within %.0f s; the current file stays "
                "a .part file",
                self.dir,
                self.close_timeout,
            )
        if self.dropped or self.errors:
            log.warning(
                "event log %s closed: %d written, %d dropped (buffer full), %d lost to errors",
                self.dir,
                self.written,
                self.dropped,
                self.errors,
            )

    def stats(self) -> dict[str, int]:
        """Counters for metrics: written, dropped, errors, files rolled, buffered now."""
        return {
            "written": self.written,
            "dropped": self.dropped,
            "errors": self.errors,
            "rolled": self.rolled,
            "buffered": len(self._buf),
        }

    # --- start-up ---------------------------------------------------------------------------

    def _recover(self) -> int:
        """Complete or remove a crashed run's ``.part`` file; return the highest number used."""
        top = 0
        for p in self.dir.iterdir():
            m = _COMPLETE.match(p.name)
            if m:
                top = max(top, int(m.group(1)))
                continue
            m = _PARTIAL.match(p.name)
            if not m:
                continue
            seq, ext = int(m.group(1)), m.group(2)
            top = max(top, seq)
            final = self.dir / f"events-{seq:06d}.{ext}"
            try:
                if ext == "jsonl" and self._cut_to_last_line(p):
                    os.replace(p, final)
                    log.info("event log: recovered %s from an interrupted run", final.name)
                else:
                    size = p.stat().st_size
                    p.unlink()
                    if size:
                        log.warning(
                            "event log: removed %s (%d bytes) left unfinished by an "
                            "interrupted run",
                            p.name,
                            size,
                        )
            except OSError as e:
                log.warning("event log: cannot recover %s: %s", p, e)
        self._prune()
        return top

    @staticmethod
    def _cut_to_last_line(path: Path) -> bool:
        """Truncate after the last newline; False if no complete line is left."""
        with open(path, "rb+") as fh:
            end = fh.seek(0, os.SEEK_END)
            pos = end
            while pos > 0:
                step = min(65536, pos)
                fh.seek(pos - step)
                chunk = fh.read(step)
                i = chunk.rfind(b"\n")
                if i >= 0:
                    keep = pos - step + i + 1
                    if keep != end:
                        fh.truncate(keep)
                    os.fsync(fh.fileno())
                    return True
                pos -= step
        return False

    # --- writer thread -----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            stopping = self._stopping  # read before draining: every earlier emit is drained
            try:
                self._drain()
                if (
                    self._file is not None
                    and time.monotonic() - self._opened_at >= self.roll_interval
                ):
                    self._roll()
            except Exception as e:  # noqa: BLE001 - the thread must survive anything
                self._error(f"writer: {e!r}")
            if stopping:
                break
        try:
            self._roll()
        except Exception as e:  # noqa: BLE001
            self._error(f"closing the last file: {e!r}")

    def _drain(self) -> None:
        buf = self._buf
        pop = buf.popleft
        while buf:
            batch = [pop() for _ in range(min(len(buf), _BATCH))]
            self._write(batch)

    def _write(self, batch: list[Entry]) -> None:
        try:
            data = self._encode(self._columns(batch))
        except Exception:  # noqa: BLE001 - an odd value somewhere: the exact, slower way
            data = self._encode_each(batch)
            if data is None:
                return
        n = len(data[0]) if isinstance(data, tuple) else data.num_rows
        # a failure loses the file being written (its records count as errors); the batch
        # goes on in a new file, but a second failure in one batch gives the batch up rather
        # than hammer a broken disk file by file
        failures = 0
        i = 0
        while i < n:
            try:
                while i < n:
                    f = self._file or self._open()
                    i = f.add(data, i, self.max_file_size)  # counted with the file from here
                    f.write()
                    if f.size >= self.max_file_size:
                        self._roll()
                if self._file is not None:
                    self._file.flush()
            except Exception as e:  # noqa: BLE001 - I/O or pyarrow errors
                self._discard()
                self._error(f"writing events: {e!r}")
                failures += 1
                if failures > 1:
                    self.errors += n - i
                    return

    def _columns(self, batch: list[Entry]) -> Columns:
        """A batch as columns (``v`` and ``node`` left out: they are constant), straight
        from the entries; :class:`_Odd` for a batch with a name that needs mapping."""
        ts, kinds, mid, addr, size, queue, tid, dur, extras = zip(*batch, strict=True)
        if not _EVENT_SET.issuperset(kinds):
            raise _Odd
        proto: Sequence[Any]
        sess: Sequence[Any]
        dc: Sequence[Any]
        reason: Sequence[Any]
        peer: Sequence[Any]
        if extras.count(_NONE) == len(extras):  # == on dicts: every one empty
            proto = sess = dc = reason = peer = (None,) * len(extras)
        else:
            proto = [x.get("protocol") for x in extras]
            sess = [x.get("session") for x in extras]
            dc = [x.get("delivery_count") for x in extras]
            reason = [x.get("reason") for x in extras]
            peer = [x.get("peer") for x in extras]
        return (
            list(map(_to_us, ts)), kinds, tid, mid, addr, queue, proto, sess, size, dur, dc,
            reason, peer,
        )  # fmt: skip

    def _encode(self, cols: Columns) -> Encoded:
        if self.format == "jsonl":
            return _JsonlFile.encode(cols, self._node_js)
        return _ParquetFile.encode(cols, self._schema, self.node)

    def _encode_each(self, batch: list[Entry]) -> Encoded | None:
        """Record by record: each value converted as its field needs, a record that cannot be
        counted in ``errors`` and left out."""
        rows = []
        for entry in batch:
            try:
                rows.append(self._row(entry))
            except (TypeError, ValueError, OverflowError) as e:
                self.errors += 1
                self._error(f"event {entry[1]!r} of message {entry[2]!r} not written: {e}")
        if not rows:
            return None
        try:
            return self._encode(tuple(map(list, zip(*rows, strict=True))))
        except Exception as e:  # noqa: BLE001 - not expected once cleaned
            self.errors += len(rows)
            self._error(f"events not written: {e!r}")
            return None

    def _row(self, entry: Entry) -> Row:
        """One entry as a row of :data:`Columns`, every value of its field's type."""
        ts_ns, kind, message_id, address, size, queue, tid, durable, extra = entry
        reason = extra.get("reason")
        if kind not in _EVENT_SET:
            legacy = LEGACY_EVENTS.get(kind)
            if legacy is not None:
                kind = legacy[0]
                if reason is None:
                    reason = legacy[1]
            elif kind not in self._unknown_kinds and len(self._unknown_kinds) < _MAX_UNKNOWN_KINDS:
                self._unknown_kinds.add(kind)
                log.warning("event log: unknown event name %r written as given", kind)
        g = extra.get
        proto, sess, peer, dc = g("protocol"), g("session"), g("peer"), g("delivery_count")
        return (
            ts_ns // 1000,
            str(kind),
            None if tid is None else str(tid),
            _int(message_id, _INT64),
            str(address),
            None if queue is None else str(queue),
            None if proto is None else str(proto),
            None if sess is None else str(sess),
            _int(size, _INT64),
            None if durable is None else bool(durable),
            None if dc is None else _int(dc, _INT32),
            None if reason is None else str(reason),
            None if peer is None else str(peer),
        )

    def _open(self) -> _JsonlFile | _ParquetFile:
        self._seq += 1
        tmp = self.dir / f".events-{self._seq:06d}.{self.format}.part"
        if self.format == "jsonl":
            self._file = _JsonlFile(tmp)
        else:
            self._file = _ParquetFile(tmp, self.row_group_rows)
        self._opened_at = time.monotonic()
        return self._file

    def _roll(self) -> None:
        """Complete the current file (flush, fsync, rename, fsync the folder) and prune."""
        f = self._file
        if f is None:
            return
        final = self.dir / f"events-{self._seq:06d}.{f.ext}"
        try:
            f.finish()
            os.replace(f.path, final)
        except BaseException:
            self._discard()
            raise
        self._file = None
        self.written += f.rows
        self.rolled += 1
        try:
            _fsync_path(self.dir)
        except OSError as e:
            self._error(f"fsync of the folder after completing {final.name}: {e!r}")
        self._prune()

    def _discard(self) -> None:
        """Give up the current file after an error: its records count as lost."""
        f = self._file
        if f is None:
            return
        self._file = None
        self.errors += f.rows
        f.abort()
        try:
            f.path.unlink()
        except OSError:
            pass

    def _prune(self) -> None:
        files: list[tuple[int, Path]] = []
        for p in self.dir.iterdir():
            m = _COMPLETE.match(p.name)
            if m:
                files.append((int(m.group(1)), p))
        files.sort()
        for _, old in files[: max(0, len(files) - self.max_files)]:
            try:
                old.unlink()
            except OSError as e:
                log.warning("event log: cannot remove old file %s: %s", old, e)

    def _error(self, what: str) -> None:
        now = time.monotonic()
        if now - self._last_error_warn >= self.warn_interval:
            self._last_error_warn = now
            log.error("event log %s: %s (%d lost so far)", self.dir, what, self.errors)


class JsonlEventLog(EventLog):
    """The event log in JSON Lines (``events-NNNNNN.jsonl``)."""

    def __init__(self, directory: Path | str, node: str, **kwargs: Any) -> None:
        super().__init__(directory, node, format="jsonl", **kwargs)


class ParquetEventLog(EventLog):
    """The event log in Parquet (``events-NNNNNN.parquet``, schema ``arrow_schema()``)."""

    def __init__(self, directory: Path | str, node: str, **kwargs: Any) -> None:
        super().__init__(directory, node, format="parquet", **kwargs)


def open_event_log(
    directory: Path | str, node: str, format: str = "jsonl", **kwargs: Any
) -> EventLog:
    """An :class:`EventLog` in ``format`` (``jsonl`` or ``parquet``)."""
    return EventLog(directory, node, format=format, **kwargs)
