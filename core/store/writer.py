"""The journal's background writer thread: group commit and file management.

The event loop places encoded batches (it knows every file's size, so it decides offsets and
rollovers) and appends them with file commands to ``pending`` under ``cond``.  The writer
takes everything pending at once, writes it, calls fdatasync once for the whole group when
any batch in it asked for sync, and settles all the group's futures with one
``call_soon_threadsafe``.  While it works, new batches pile up and share the next fsync.

While fdatasync is quick, the event loop writes and syncs a group itself (:meth:`run_inline`)
whatever its size: synchronous producers wait for their acknowledgements, so the loop has
nothing to do during that fsync anyway, and handing the group to the thread costs two thread
wake-ups (and the thread's wait for the GIL) per group, 60 us to milliseconds each on a busy
machine.  After a group is settled on the loop, the next inline fsync waits until two loop
turns have passed (:attr:`Writer.hold`), so the acknowledgements just released reach their
sockets first instead of waiting behind that fsync.

After an I/O error the writer stops writing: the error fails the group's futures and every
later write (disk full or failing: the node must report it, not pretend).  What the failed
group had already written is taken back first (its first batch header overwritten with the
zero trailer and synced), so "not persisted" is the truth after a restart too; when even that
cannot be made durable the error says the outcome is unknown.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from waystation.core.store.api import StoreError
from waystation.core.store.compactor import CommittedError, compact
from waystation.core.store.files import Layout
from waystation.core.store.segment import KIND_DATA, KIND_FREE, TRAILER, pack_file_header
from waystation.core.store.timing import GROUP_BOUNDS, SYNC_BOUNDS, Buckets

log = logging.getLogger(__name__)

# fsyncs slower than this (a busy or slow disk) are never done on the event loop thread
INLINE_SYNC_LIMIT = 0.001
_TRAILER_SIZE = len(TRAILER)
_clock = time.monotonic


@dataclass(slots=True)
class Data:
    seq: int
    off: int
    buf: bytearray


@dataclass(slots=True)
class NewFile:
    seq: int
    size: int
    spare_target: int


@dataclass(slots=True)
class Free:
    seqs: list[int]


@dataclass(slots=True)
class Compact:
    old_seqs: list[int]
    first_seq: int
    max_files: int


Command = Data | NewFile | Free | Compact
# (old seqs, [(new seq, used bytes)] or None on failure)
Outcome = tuple[list[int], list[tuple[int, int]] | None]


def _settle(futs: list[asyncio.Future[None]], err: BaseException | None) -> None:
    for f in futs:
        if not f.done():
            if err is None:
                f.set_result(None)
            else:
                f.set_exception(err)


class Writer:
    """Owns the file descriptors; the event loop only touches the hand-off fields below."""

    def __init__(
        self,
        layout: Layout,
        file_size: int,
        sync: bool,
        spares: list[Path],
        next_free: int,
        current: tuple[int, int] | None,
        on_compacted: Callable[[Outcome], None],
    ) -> None:
        self.layout = layout
        self.file_size = file_size
        self.sync = sync
        self.spares = spares
        self.next_free = next_free
        self.on_compacted = on_compacted
        # hand-off with the event loop, guarded by lock (cond's lock, taken bare for speed)
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.pending: list[Command] = []
        self.plain = True  # pending holds nothing but Data (the loop clears it for the rest)
        self.tail: bytearray | None = None  # buffer of the last Data still in pending
        self.futs: list[asyncio.Future[None]] = []
        self.want_sync = False
        self.idle = False
        # groups settled on the loop less than two turns ago: the loop's next inline fsync
        # waits until the callbacks that send their acknowledgements have run
        self.hold = 0
        self.closing = False
        self.error: StoreError | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        # writer-thread state
        self.fds: dict[int, int] = {}
        self.caps: dict[int, int] = {}
        self.dirty: set[int] = set()
        self.fsyncs = 0
        self.groups = 0
        self.sync_ewma = 0.0  # seconds an fdatasync takes lately
        self.sync_times = Buckets(SYNC_BOUNDS)  # every fdatasync (metrics read them)
        self.group_sizes = Buckets(GROUP_BOUNDS)  # writes settled per synced group
        self.replenish = False  # a rollover used a spare: make the next one ahead of time
        if current is not None:
            seq, cap = current
            self.fds[seq] = os.open(layout.data_path(seq), os.O_RDWR)
            self.caps[seq] = cap
        self._compactor: threading.Thread | None = None
        self._writer_thread = threading.Thread(target=self._run, name="journal-writer", daemon=True)
        self._writer_thread.start()

    # ---- called from the event loop
    def stop(self) -> None:
        with self.cond:
            self.closing = True
            self.cond.notify()

    def join(self) -> None:
        self._writer_thread.join()
        if self._compactor is not None:
            self._compactor.join()

    def run_inline(self) -> bool:
        """Event loop thread: write and sync what is pending here, sparing two thread
        wake-ups per group.  Only while the writer thread is idle, the group holds nothing
        but data and recent fsyncs were quick; returns False to leave it to the thread."""
        with self.lock:
            if not self.idle or self.closing or self.error is not None:
                return False
            futs = self.futs
            if not self.pending and not futs:
                return True
            if self.sync_ewma > INLINE_SYNC_LIMIT or not self.plain:
                return False
            items, self.pending, self.tail = self.pending, [], None
            self.futs = []
            want_sync, self.want_sync = self.want_sync, False
            err: StoreError | None = None
            written: list[Data] = []
            try:
                for item in items:
                    written.append(item)  # type: ignore[arg-type]  # (a partial write too)
                    self._write(item)  # type: ignore[arg-type]
                if want_sync and self.sync:
                    self._sync_dirty()
                    self.group_sizes.observe(len(futs))
            except Exception as exc:
                err = self.error = self._failed(exc, written)
            self.groups += 1
        if futs:
            if err is None:
                for f in futs:  # _settle, inlined: this runs once per group
                    if not f.done():
                        f.set_result(None)
            else:
                _settle(futs, err)
            self._hold()
        return True

    def _hold(self) -> None:
        """Event loop thread, just after settling a group: the futures' callbacks run in the
        next loop turn and queue the acknowledgements, which are written in the turn after;
        an inline fsync in between would keep them back for its whole duration."""
        loop = self.loop
        if loop is not None:
            self.hold += 1
            loop.call_soon(loop.call_soon, self._unhold)

    def _unhold(self) -> None:
        self.hold -= 1

    def _settle_on_loop(self, futs: list[asyncio.Future[None]], err: BaseException | None) -> None:
        _settle(futs, err)
        self._hold()

    # ---- writer thread
    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.pending and not self.futs and not self.closing:
                    self.idle = True
                    self.cond.wait()
                self.idle = False
                items, self.pending, self.tail = self.pending, [], None
                self.plain = True
                futs, self.futs = self.futs, []
                want_sync, self.want_sync = self.want_sync, False
                closing = self.closing
            err = self.error
            if err is None:
                written: list[Data] = []
                try:
                    for item in items:
                        if type(item) is Data:
                            written.append(item)  # before: a partial write is undone too
                        self._apply(item)
                    if want_sync and self.sync:
                        self._sync_dirty()
                        self.group_sizes.observe(len(futs))
                except Exception as exc:  # OSError mostly; anything else must not hang waiters
                    err = self._failed(exc, written)
                    with self.cond:
                        self.error = err
            self.groups += 1
            if futs and self.loop is not None:
                try:
                    self.loop.call_soon_threadsafe(self._settle_on_loop, futs, err)
                except RuntimeError:  # loop closed: nobody is waiting any more
                    pass
            if closing and not items and not futs:
                break
            if err is None and self.replenish and not self.spares and not closing:
                self._replenish()
        self._shutdown()

    def _failed(self, exc: BaseException, written: list[Data]) -> StoreError:
        """The error for a group that failed; its writes are undone first when possible."""
        log.error("journal disabled: %r", exc)
        try:
            for item in written:  # recovery stops at a zero header: the group is gone
                os.pwrite(self.fds[item.seq], TRAILER, item.off)
            for seq in {item.seq for item in written}:
                os.fdatasync(self.fds[seq])
        except Exception as undo:
            log.error("journal: undoing the failed writes failed too: %r", undo)
            return StoreError(f"journal write failed, outcome unknown: {exc}", outcome_unknown=True)
        self.dirty.difference_update(item.seq for item in written)
        return StoreError(f"journal write failed: {exc}")

    def _apply(self, item: Command) -> None:
        if isinstance(item, Data):
            self._write(item)
        elif isinstance(item, NewFile):
            self._new_file(item)
        elif isinstance(item, Free):
            self._free(item.seqs)
        else:
            self._start_compaction(item)

    def _write(self, item: Data) -> None:
        seq = item.seq
        fd = self.fds[seq]
        end = item.off + len(item.buf)
        # the zero trailer marks the end of data for the next recovery
        room = self.caps[seq] - end
        trailer = TRAILER if room >= _TRAILER_SIZE else TRAILER[: max(0, room)]
        n = os.pwritev(fd, [item.buf, trailer], item.off)
        if n < len(item.buf) + len(trailer):  # short write: finish it
            rest = memoryview(bytes(item.buf) + trailer)[n:]
            off = item.off + n
            while rest:
                k = os.pwrite(fd, rest, off)
                rest, off = rest[k:], off + k
        self.dirty.add(seq)

    def _sync_dirty(self) -> None:
        dirty = self.dirty
        for seq in sorted(dirty) if len(dirty) > 1 else dirty:
            t0 = _clock()
            os.fdatasync(self.fds[seq])
            took = _clock() - t0
            self.sync_ewma = 0.8 * self.sync_ewma + 0.2 * took
            self.sync_times.observe(took)
            self.fsyncs += 1
        dirty.clear()

    def _new_file(self, item: NewFile) -> None:
        if self.sync:  # older files durable first: recovery then sees a prefix of batches
            self._sync_dirty()
        for seq in list(self.fds):
            os.close(self.fds.pop(seq))
            del self.caps[seq]
        self.dirty.clear()
        path = self.layout.data_path(item.seq)
        header = pack_file_header(KIND_DATA, item.seq)
        if item.size == self.file_size and self.spares:
            spare = self.spares.pop()  # the most recently freed: likely still cached
            fd = os.open(spare, os.O_RDWR)
            os.pwrite(fd, header + TRAILER, 0)
            os.rename(spare, path)
        else:
            self.layout.create(path, item.size, header)
            fd = os.open(path, os.O_RDWR)
        self.fds[item.seq] = fd
        self.caps[item.seq] = item.size
        self.dirty.add(item.seq)
        while len(self.spares) > item.spare_target:
            self.spares.pop(0).unlink()
        self.replenish = True

    def _free(self, seqs: list[int]) -> None:
        """Durably mark reclaimed files free before reusing or deleting them, so their old
        records can never come back, even if the files that deleted them go next."""
        if self.sync:
            self._sync_dirty()
        for seq in seqs:
            path = self.layout.data_path(seq)
            fd = self.fds.pop(seq, None)
            self.caps.pop(seq, None)
            self.dirty.discard(seq)
            if fd is None:
                fd = os.open(path, os.O_RDWR)
            try:
                os.pwrite(fd, pack_file_header(KIND_FREE, seq), 0)
                if self.sync:
                    t0 = time.monotonic()
                    os.fdatasync(fd)
                    self.sync_times.observe(time.monotonic() - t0)
                    self.fsyncs += 1
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            if size == self.file_size:
                spare = self.layout.free_path(self.next_free)
                self.next_free += 1
                os.rename(path, spare)
                self.spares.append(spare)
            else:
                path.unlink()

    def _replenish(self) -> None:
        """Keep one spare ready so a rollover never waits for a file to be created."""
        self.replenish = False  # once per rollover, even when it fails (disk full)
        spare = self.layout.free_path(self.next_free)
        try:
            self.layout.create(spare, self.file_size, pack_file_header(KIND_FREE, 0))
        except OSError as exc:
            log.warning("could not pre-create journal file %s: %s", spare.name, exc)
            return
        self.next_free += 1
        self.spares.append(spare)

    def _start_compaction(self, item: Compact) -> None:
        if self._compactor is not None:
            self._compactor.join()
        self._compactor = threading.Thread(
            target=self._compact, args=(item,), name="journal-compactor", daemon=True
        )
        self._compactor.start()

    def _compact(self, item: Compact) -> None:
        result: list[tuple[int, int]] | None = None
        try:
            result = compact(
                self.layout, self.file_size, item.old_seqs, item.first_seq, item.max_files
            )
        except CommittedError as exc:
            log.error("compaction failed after commit, journal disabled: %s", exc)
            with self.cond:
                self.error = StoreError(f"compaction failed after commit: {exc}")
        except Exception as exc:
            log.error("compaction failed, old files kept: %s", exc)
        self.on_compacted((item.old_seqs, result))

    def _shutdown(self) -> None:
        if self.error is None and self.sync:
            try:
                self._sync_dirty()
            except OSError as exc:
                log.error("journal final sync failed: %s", exc)
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
