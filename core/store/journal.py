"""FileJournal: the durable record store on disk (HornetQ-style append-only journal).

Files are pre-created at ``file_size`` by writing zeros and filled with framed, checksummed
batches (format in ``segment``).  ``write`` runs on the event loop and costs an encode, a
CRC and a buffer append; a background thread (``writer``) does the I/O and group commit.
The loop keeps the placement (file and offset of every batch) and the live-record index, so
reclaim and compaction decisions are made at rollover without asking the writer thread:

* reclaim: the oldest data files with no live record are marked free and recycled as spares
  (or deleted beyond what ``min_files`` needs); strictly oldest first, so a delete record is
  never dropped while the put it cancels could still be replayed;
* compaction: with at least ``compact_min_files`` data files and live bytes under
  ``compact_percentage`` % of used bytes, the files so far are rewritten in a thread
  (``compactor``), crash-safe behind a commit marker.
"""

from __future__ import annotations

import asyncio
import math
import os
import zlib
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from waystation.core.store.api import PUT, Op, Recovered, StoreError
from waystation.core.store.files import Layout
from waystation.core.store.index import FileInfo, LiveIndex
from waystation.core.store.reader import RecordReader
from waystation.core.store.recovery import recover
from waystation.core.store.segment import (
    BATCH_HDR,
    BATCH_MAGIC,
    HEADER_SIZE,
    KIND_FREE,
    LEN_SEQ,
    MAX_PAYLOAD,
    OP_PUT,
    encode_ops,
    pack_file_header,
)
from waystation.core.store.timing import Snapshot
from waystation.core.store.writer import Compact, Data, Free, NewFile, Outcome, Writer

MiB = 1 << 20
# the engine's message journal: records larger than this stay in their files at recovery
# until the engine places them (a backlog larger than memory pages as it loads)
LEAVE_ON_DISK_OVER = 256
_put_pack = OP_PUT.pack
_hdr_pack = BATCH_HDR.pack
_lenseq_pack = LEN_SEQ.pack
_crc32 = zlib.crc32
_PUT_SIZE = OP_PUT.size
_HDR_SIZE = BATCH_HDR.size


def follow(dst: asyncio.Future[None], src: asyncio.Future[None]) -> None:
    """Settle ``dst`` as ``src`` was settled (``src.add_done_callback(partial(follow, dst))``)."""
    if dst.done():
        return
    if src.cancelled():
        dst.cancel()
        return
    exc = src.exception()
    if exc is not None:
        dst.set_exception(exc)
    else:
        dst.set_result(None)


class FileJournal:
    """A ``Journal`` in ``directory``; call ``open()`` once, then write from one event loop.

    ``sync=False`` never calls fdatasync: a sync write is acknowledged once it reached the
    OS, which survives ``kill -9`` but not a power cut.  One journal per directory (a lock
    file enforces it).  ``close()`` must be awaited for a clean shutdown.
    """

    def __init__(
        self,
        directory: Path | str,
        *,
        file_size: int = 10 * MiB,
        min_files: int = 2,
        sync: bool = True,
        compact_min_files: int = 10,
        compact_percentage: int = 30,
        prefix: str = "journal",
        ext: str = "wsj",
        leave_on_disk_over: int = -1,
    ) -> None:
        if file_size < HEADER_SIZE + 2 * _HDR_SIZE + 64:
            raise ValueError(f"file_size {file_size} is too small")
        self._layout = Layout(Path(directory), prefix, ext)
        self._file_size = file_size
        # recovery leaves records larger than this in their files (Recovered.read); -1: none
        self._leave_over = leave_on_disk_over
        self._min_files = max(1, min_files)
        self._sync = sync
        self._compact_min_files = compact_min_files
        self._compact_percentage = compact_percentage
        self._w: Writer | None = None
        self._lock = -1  # fd holding the directory lock while open
        self._loop: asyncio.AbstractEventLoop | None = None
        self._index = LiveIndex()
        self._infos: deque[FileInfo] = deque()
        self._cur = FileInfo([0])
        self._seq = 0  # current file seq, its append offset and size (0: no file yet)
        self._off = 0
        self._cap = 0
        self._next_seq = 1
        self._compacting: list[FileInfo] | None = None
        self._rollovers = 0
        self._compact_after = 0  # rollover count before which no compaction starts
        self._batches = 0
        self._bytes = 0
        self._compactions = 0
        self._kick_scheduled = False

    # ---- Journal protocol
    def open(self) -> Recovered:
        if self._w is not None:
            raise StoreError("journal already open")
        d = self._layout.directory
        try:
            d.mkdir(parents=True, exist_ok=True)
            self._lock = self._layout.lock()
        except BlockingIOError as exc:
            raise StoreError(f"journal directory {d} is in use by another journal") from exc
        except OSError as exc:
            raise StoreError(f"cannot open journal directory {d}: {exc}") from exc
        try:
            return self._open()
        except BaseException as exc:
            os.close(self._lock)
            self._lock = -1
            if isinstance(exc, OSError):
                raise StoreError(f"journal recovery failed: {exc}") from exc
            raise

    def _open(self) -> Recovered:
        st = recover(self._layout, self._file_size, self._leave_over)
        self._index = st.index
        self._infos = deque(st.infos)
        self._next_seq = st.next_seq
        current = None
        if st.infos:
            self._cur = st.infos[-1]
            self._seq, self._off, self._cap = self._cur.seqs[0], st.last_end, st.last_cap
            current = (self._seq, self._cap)
        spares, next_free = st.spares, st.next_free
        while len(spares) < self._spare_target():
            path = self._layout.free_path(next_free)
            self._layout.create(path, self._file_size, pack_file_header(KIND_FREE, 0))
            spares.append(path)
            next_free += 1
        self._w = Writer(
            self._layout, self._file_size, self._sync, spares, next_free, current, self._done
        )
        reader = RecordReader(self._layout)
        return Recovered(st.records, st.report, reader.read, reader.close)

    def write(self, ops: Sequence[Op], sync: bool) -> asyncio.Future[None] | None:
        if not sync:
            self._append(ops, None)
            return None
        if self._w is None:
            raise StoreError("journal is not open")
        loop = self._loop
        fut: asyncio.Future[None] = (loop or asyncio.get_running_loop()).create_future()
        self._append(ops, fut)
        return fut

    def write_into(self, ops: Sequence[Op], fut: asyncio.Future[None]) -> None:
        """``write(ops, True)`` that settles ``fut``, the caller's own future, when the batch
        is durable: its callbacks then run one loop turn sooner than if the caller chained
        it to a future of the journal's.  (A journal that wraps this one to change what
        ``write`` does leaves ``write_into`` out: :class:`Persistence` then follows ``write``.)"""
        self._append(ops, fut)

    def _append(self, ops: Sequence[Op], fut: asyncio.Future[None] | None) -> None:
        w = self._w
        if w is None:
            raise StoreError("journal is not open")
        if w.error is not None:
            raise StoreError(str(w.error)) from w.error
        single = len(ops) == 1 and ops[0][0] == PUT
        if single:  # the common case, without a join
            _, rid, rtype, data = ops[0]
            payload = _put_pack(PUT, rid, rtype, len(data)) + data
        else:
            payload = encode_ops(ops)
        plen = len(payload)
        if plen > MAX_PAYLOAD:
            raise ValueError(f"batch of {plen} bytes is too big")
        n = plen + _HDR_SIZE
        crc = _crc32(payload)
        loop = self._loop
        if loop is None:
            loop = self._loop = w.loop = asyncio.get_running_loop()
        with w.lock:
            if self._off + n > self._cap:
                self._rollover(n, w)
            seq = self._seq
            tail = w.tail
            if tail is None:
                tail = w.tail = bytearray()
                w.pending.append(Data(seq, self._off, tail))
            tail += _hdr_pack(BATCH_MAGIC, plen, seq, _crc32(_lenseq_pack(plen, seq), crc))
            tail += payload
            self._off += n
            if fut is not None:
                w.futs.append(fut)
                w.want_sync = True
            if w.idle:
                if fut is None:
                    w.idle = False
                    w.cond.notify()
                elif not self._kick_scheduled:
                    # at the end of this loop turn every sync write of the turn is one group
                    self._kick_scheduled = True
                    loop.call_soon(self._kick)
        fi = self._cur
        fi.used += n
        if single:
            self._index.put(rid, _PUT_SIZE + len(data), fi)
        else:
            index = self._index
            for op in ops:
                if op[0] == PUT:
                    index.put(op[1], _PUT_SIZE + len(op[3]), fi)
                else:
                    index.delete(op[1])
        self._batches += 1
        self._bytes += n

    def _kick(self) -> None:
        """Write this loop turn's group: inline when the writer thread is idle (no thread
        wake-ups), otherwise by waking the thread.  Put off by one turn while the previous
        group's acknowledgements are still on their way out (``Writer.hold``)."""
        w = self._w
        if w is not None and w.hold and w.idle:
            loop = self._loop
            if loop is not None:
                loop.call_soon(self._kick)
                return
        self._kick_scheduled = False
        if w is None or w.run_inline():
            return
        with w.lock:
            if w.idle and (w.pending or w.futs):
                w.idle = False
                w.cond.notify()

    async def flush(self) -> None:
        w = self._w
        if w is None:
            return
        if w.error is not None:
            raise StoreError(str(w.error)) from w.error
        loop = self._loop
        if loop is None:
            loop = self._loop = w.loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with w.lock:
            w.futs.append(fut)
            w.want_sync = True
            if w.idle:
                w.idle = False
                w.cond.notify()
        await fut

    async def close(self) -> None:
        w = self._w
        if w is None:
            return
        try:
            if w.error is None:  # a failed journal has reported its error already
                await self.flush()
        finally:
            w.stop()
            await asyncio.to_thread(w.join)
            self._w = None
            os.close(self._lock)
            self._lock = -1

    def stats(self) -> dict[str, int]:
        w = self._w
        return {
            "batches": self._batches,
            "bytes": self._bytes,
            "fsyncs": w.fsyncs if w else 0,
            "groups": w.groups if w else 0,
            "files": sum(len(fi.seqs) for fi in self._infos),
            "spare_files": len(w.spares) if w else 0,
            "live_records": len(self._index),
            "compactions": self._compactions,
        }

    def timings(self) -> dict[str, Snapshot]:
        """Bucketed fsync durations (seconds) and group-commit sizes (writes), for metrics."""
        w = self._w
        if w is None:
            return {}
        return {"sync_seconds": w.sync_times.snapshot(), "group_writes": w.group_sizes.snapshot()}

    # ---- placement, reclaim, compaction (event loop thread, holding w.lock)
    def _spare_target(self) -> int:
        return max(1, self._min_files - sum(len(fi.seqs) for fi in self._infos))

    def _rollover(self, n: int, w: Writer) -> None:
        self._rollovers += 1
        infos = self._infos
        if self._compacting is None:
            freed: list[int] = []
            while infos and infos[0].refs == 0:
                freed.extend(infos.popleft().seqs)
            if freed:
                w.pending.append(Free(freed))
                w.plain = False
            self._maybe_compact(w)
        size = self._file_size if HEADER_SIZE + n <= self._file_size else HEADER_SIZE + n
        self._seq = self._next_seq
        self._next_seq += 1
        self._off, self._cap = HEADER_SIZE, size
        self._cur = FileInfo([self._seq])
        infos.append(self._cur)
        w.pending.append(NewFile(self._seq, size, self._spare_target()))
        w.plain = False
        w.tail = None

    def _maybe_compact(self, w: Writer) -> None:
        infos = self._infos
        if self._rollovers < self._compact_after:
            return
        if sum(len(fi.seqs) for fi in infos) < self._compact_min_files:
            return
        used = sum(fi.used for fi in infos)
        if sum(fi.live for fi in infos) * 100 >= self._compact_percentage * used:
            return
        cap = self._file_size - HEADER_SIZE
        reserve = 2 * math.ceil(used / cap) + 2 + len(infos)
        old = list(infos)
        w.pending.append(Compact([s for fi in old for s in fi.seqs], self._next_seq, reserve))
        w.plain = False
        self._next_seq += reserve
        self._compacting = old

    def _done(self, outcome: Outcome) -> None:
        """Compactor thread: hand the outcome to the event loop."""
        loop = self._loop
        if loop is not None:
            try:
                loop.call_soon_threadsafe(self._compaction_done, outcome)
            except RuntimeError:
                pass

    def _compaction_done(self, outcome: Outcome) -> None:
        old = self._compacting
        self._compacting = None
        _, result = outcome
        if old is None:
            return
        if result is None:  # failed: keep the old files, try again much later
            self._compact_after = self._rollovers + self._compact_min_files
            return
        for fi in old:
            assert self._infos[0] is fi
            self._infos.popleft()
        group = FileInfo([s for s, _ in result], sum(u for _, u in result))
        group.refs = sum(fi.refs for fi in old)
        group.live = sum(fi.live for fi in old)
        for fi in old:
            fi.fwd = group
        if group.seqs:
            self._infos.appendleft(group)
        self._compactions += 1
