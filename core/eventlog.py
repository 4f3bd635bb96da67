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

import collections
import json
import logging
import os
import re
import threading
import time
from pathlib import Path
from time import time_ns as _time_ns
from typing import Any

from waystation.core.events import (
    EVENTS,
    LEGACY_EVENTS,
    SCHEMA_VERSION,
    arrow_schema,
)

log = logging.getLogger("waystation.events")

FORMATS = ("jsonl", "parquet")
_COMPLETE = re.compile(r"^events-(\d+)\.(jsonl|parquet)$")
_PARTIAL = re.compile(r"^\.events-(\d+)\.(jsonl|parquet)\.part$")
_EVENT_SET = frozenset(EVENTS)
_INT64 = 1 << 63
_INT32 = 1 << 31
_MAX_UNKNOWN_KINDS = 64  # distinct unknown event names warned about (bounded memory)

Row = tuple[Any, ...]
# (time ns, kind, message id, address, size, queue, extra): what emit appends
Entry = tuple[int, str, int, str, int, "str | None", dict[str, object]]


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


_js = json.encoder.encode_basestring_ascii  # C, ASCII out


def _jsonl_line(row: Row) -> str:
    """One record as a JSON line, keys in FIELDS order: a fixed template is about 4x faster
    than ``json.dumps`` of a dict, and this runs holding the GIL the event loop needs."""
    v, ts, node, ev, tid, mid, addr, q, proto, sess, size, dur, dc, reason, peer = row
    return (
        f'{{"v":{v},"ts_us":{ts},"node":{_js(node)},"event":{_js(ev)},'
        f'"trace_id":{"null" if tid is None else _js(tid)},"message_id":{mid},'
        f'"address":{_js(addr)},"queue":{"null" if q is None else _js(q)},'
        f'"protocol":{"null" if proto is None else _js(proto)},'
        f'"session":{"null" if sess is None else _js(sess)},"size":{size},'
        f'"durable":{"null" if dur is None else "true" if dur else "false"},'
        f'"delivery_count":{"null" if dc is None else dc},'
        f'"reason":{"null" if reason is None else _js(reason)},'
        f'"peer":{"null" if peer is None else _js(peer)}}}\n'
    )


class _JsonlFile:
    """One JSON object per line, every field present (``null`` when unknown)."""

    ext = "jsonl"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh = open(path, "wb")  # noqa: SIM115 - closed by finish()/abort()
        self._pending: list[bytes] = []
        self.size = 0
        self.rows = 0

    def add(self, row: Row) -> None:
        self.rows += 1
        line = _jsonl_line(row).encode("ascii")
        self._pending.append(line)
        self.size += len(line)

    def flush(self) -> None:
        """Hand what was added to the OS (a process crash keeps it; fsync is on finish)."""
        if self._pending:
            data = b"".join(self._pending)
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
        self._types = [f.type for f in self.schema]
        self._writer = pq.ParquetWriter(str(path), self.schema, compression="snappy")
        self._rows: list[Row] = []
        self._rg = row_group_rows
        self.size = 0
        self.rows = 0

    def add(self, row: Row) -> None:
        self.rows += 1
        self._rows.append(row)
        if len(self._rows) >= self._rg:
            self._write_group()

    def _write_group(self) -> None:
        rows, self._rows = self._rows, []
        pa = self._pa
        cols = list(zip(*rows, strict=True))
        arrays = [pa.array(c, type=t) for c, t in zip(cols, self._types, strict=True)]
        self._writer.write_batch(pa.record_batch(arrays, schema=self.schema))
        self.size = os.path.getsize(self.path)

    def flush(self) -> None:
        """Nothing: a Parquet file is only readable once closed, so rows wait for a full row
        group (bounded by ``row_group_rows``)."""

    def finish(self) -> None:
        if self._rows:
            self._write_group()
        self._writer.close()
        _fsync_path(self.path)

    def abort(self) -> None:
        self._rows = []
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
        self._wake_at = max(1, min(4096, buffer_limit // 4))
        self._wake = threading.Event()
        self._stopping = False
        self._closed = False
        self._file: _JsonlFile | _ParquetFile | None = None
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
        **extra: object,
    ) -> None:
        # the loop's whole cost: a length test, a clock read and one append (~0.4 us)
        buf = self._buf
        n = len(buf)
        if n >= self._limit:
            self._drop()
            return
        buf.append((_time_ns(), kind, message_id, address, size, queue, extra))
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
            batch = [pop() for _ in range(min(len(buf), 8192))]
            self._write(batch)

    def _write(self, batch: list[Entry]) -> None:
        rows = []
        for entry in batch:
            try:
                rows.append(self._row(entry))
            except (TypeError, ValueError, OverflowError) as e:
                self.errors += 1
                self._error(f"event {entry[1]!r} of message {entry[2]!r} not written: {e}")
        if not rows:
            return
        # a failure loses the file being written (its records count as errors); the batch
        # goes on in a new file, but a second failure in one batch gives the batch up rather
        # than hammer a broken disk file by file
        failures = 0
        i = 0
        while i < len(rows):
            try:
                while i < len(rows):
                    f = self._file or self._open()
                    i += 1  # handed to the file: from here it is counted with the file
                    f.add(rows[i - 1])
                    if f.size >= self.max_file_size:
                        self._roll()
                if self._file is not None:
                    self._file.flush()
            except Exception as e:  # noqa: BLE001 - I/O or pyarrow errors
                self._discard()
                self._error(f"writing events: {e!r}")
                failures += 1
                if failures > 1:
                    self.errors += len(rows) - i
                    return

    def _row(self, entry: Entry) -> Row:
        ts_ns, kind, message_id, address, size, queue, extra = entry
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
        # inline type tests: the common case (right types already) costs no calls
        g = extra.get
        tid, proto, sess, peer = g("trace_id"), g("protocol"), g("session"), g("peer")
        durable, dc = g("durable"), g("delivery_count")
        if type(message_id) is not int or not -_INT64 <= message_id < _INT64:
            message_id = _int(message_id, _INT64)
        if type(size) is not int or not -_INT64 <= size < _INT64:
            size = _int(size, _INT64)
        if dc is not None and (type(dc) is not int or not -_INT32 <= dc < _INT32):
            dc = _int(dc, _INT32)
        return (
            SCHEMA_VERSION,
            ts_ns // 1000,
            self.node,
            kind if type(kind) is str else str(kind),
            tid if tid is None or type(tid) is str else str(tid),
            message_id,
            address if type(address) is str else str(address),
            queue if queue is None or type(queue) is str else str(queue),
            proto if proto is None or type(proto) is str else str(proto),
            sess if sess is None or type(sess) is str else str(sess),
            size,
            durable if durable is None or type(durable) is bool else bool(durable),
            dc,
            reason if reason is None or type(reason) is str else str(reason),
            peer if peer is None or type(peer) is str else str(peer),
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
