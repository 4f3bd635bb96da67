"""How engine state maps onto journal records, and back on recovery.

Records: a message (its id is the record id), a reference of a message in a durable queue
(with its delivery count), a durable queue definition, a duplicate id, a retained message
and a client's saved state (those three in the bindings journal).  A message record
is deleted together with its last reference, in the same atomic batch.  Queue definitions go
to a separate, small bindings journal (as in HornetQ): they live for long, and in the message
journal every file holding one could never be reclaimed without a compaction.
"""

from __future__ import annotations

import asyncio
import logging
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import msgpack

from waystation.core.message import Message
from waystation.core.store.api import (
    Journal,
    Op,
    Record,
    RecoveryReport,
    StoreError,
    delete,
    in_memory,
    nothing,
    put,
)
from waystation.core.store.journal import follow
from waystation.core.store.recovery import RecordTable

log = logging.getLogger("waystation.persistence")

RT_MESSAGE = 1
RT_REF = 2
RT_QUEUE = 3
RT_DUPLICATE = 4
RT_RETAINED = 5  # (address, encoded message)
RT_STATE = 6  # (scope, key, value)

_pack = msgpack.Packer(use_bin_type=True).pack


def _unpack(data: bytes) -> object:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


@dataclass(slots=True)
class QueueRecord:
    rid: int
    name: str
    address: str
    routing: str
    filter: str | None
    exclusive: bool = False
    max_consumers: int = -1
    auto_created: bool = False
    subscriber: str = ""  # a durable subscription's owner ("user/client-id"); "" for others
    creator: str = ""  # the user whose send or subscription auto-created it ("": the node)

    def encode(self) -> bytes:
        return _pack(
            [
                self.name,
                self.address,
                self.routing,
                self.filter,
                self.exclusive,
                self.max_consumers,
                self.auto_created,
                self.subscriber,
                self.creator,
            ]
        )

    @staticmethod
    def decode(rid: int, data: bytes) -> QueueRecord:
        v = _unpack(data)
        assert isinstance(v, list)
        return QueueRecord(rid, *v)


class MessageTable(Mapping[int, Record]):
    """Recovered message records as columns sorted by id (about 40 bytes a message, not a
    ``Record`` and a dict entry): where each one is in its journal file, or its bytes when
    recovery kept it in memory.  A ``Mapping`` of ``Record`` for callers that want one."""

    __slots__ = ("_mids", "_seqs", "_offs", "_sizes", "_in_memory", "placed", "_sorted", "_next")

    def __init__(self) -> None:
        self._mids = array("q")
        self._seqs = array("q")
        self._offs = array("q")
        self._sizes = array("q")  # 0: kept in memory, in ``_in_memory``
        self._in_memory: dict[int, bytes] = {}
        self.placed = bytearray()  # 1 once a reference of the message was placed
        self._sorted = True
        self._next = 0  # where find looks first

    def add(self, mid: int, seq: int, offset: int, size: int, data: bytes) -> None:
        """Message ``mid`` at ``offset`` in journal file ``seq`` (``size`` > 0), or ``data``."""
        mids = self._mids
        if mids and mid <= mids[-1]:
            self._sorted = False
        mids.append(mid)
        self._seqs.append(seq)
        self._offs.append(offset)
        self._sizes.append(size)
        if size == 0:
            self._in_memory[mid] = data

    def finish(self) -> None:
        """Sort by id (ids come in increasing order, so this is rarely needed)."""
        self.placed = bytearray(len(self._mids))
        if self._sorted:
            return
        order = sorted(range(len(self._mids)), key=self._mids.__getitem__)
        for name in ("_mids", "_seqs", "_offs", "_sizes"):
            col = getattr(self, name)
            setattr(self, name, array(col.typecode, [col[i] for i in order]))
        self._sorted = True

    def find(self, mid: int) -> int:
        """The row of ``mid``, or -1.  References are placed in about message order, so
        the row after the last one found is tried first."""
        mids = self._mids
        i = self._next
        if i < len(mids) and mids[i] == mid:
            self._next = i + 1
            return i
        i = bisect_left(mids, mid)
        if i < len(mids) and mids[i] == mid:
            self._next = i + 1
            return i
        return -1

    def record(self, i: int) -> Record:
        size = self._sizes[i]
        if size == 0:
            return Record(RT_MESSAGE, self._in_memory[self._mids[i]])
        return Record(RT_MESSAGE, b"", self._seqs[i], self._offs[i], size)

    def ids(self) -> array[int]:
        return self._mids

    def __getitem__(self, mid: int) -> Record:
        i = self.find(mid)
        if i < 0:
            raise KeyError(mid)
        return self.record(i)

    def __contains__(self, mid: object) -> bool:
        return isinstance(mid, int) and self.find(mid) >= 0

    def __iter__(self) -> Iterator[int]:
        return iter(self._mids)

    def __len__(self) -> int:
        return len(self._mids)


class RefTable:
    """Recovered references ``(rid, queue id, message id, delivery count)`` as columns,
    iterated in rid order (the order they were made) without a tuple per reference held."""

    __slots__ = ("_rids", "_qids", "_mids", "_counts", "_sorted")

    def __init__(self) -> None:
        self._rids = array("q")
        self._qids = array("q")
        self._mids = array("q")
        self._counts = array("q")
        self._sorted = True

    def append(self, rid: int, qid: int, mid: int, count: int) -> None:
        rids = self._rids
        if rids and rid <= rids[-1]:
            self._sorted = False
        rids.append(rid)
        self._qids.append(qid)
        self._mids.append(mid)
        self._counts.append(count)

    def finish(self) -> None:
        if self._sorted:
            return
        order = sorted(range(len(self._rids)), key=self._rids.__getitem__)
        for name in ("_rids", "_qids", "_mids", "_counts"):
            col = getattr(self, name)
            setattr(self, name, array(col.typecode, [col[i] for i in order]))
        self._sorted = True

    def message_ids(self) -> array[int]:
        return self._mids

    def __iter__(self) -> Iterator[tuple[int, int, int, int]]:
        return zip(self._rids, self._qids, self._mids, self._counts, strict=True)

    def __len__(self) -> int:
        return len(self._rids)


@dataclass(slots=True)
class RecoveredState:
    """What the store held.  Messages stay undecoded (and large ones in their journal files)
    until :meth:`message` places them, so a backlog far larger than memory can be paged
    as it is loaded; :meth:`release` when done.  Messages and references are kept as
    compact columns: a backlog of millions costs tens of bytes a message here."""

    queues: list[QueueRecord] = field(default_factory=list)
    messages: MessageTable = field(default_factory=MessageTable)  # message id -> its record
    refs: RefTable = field(default_factory=RefTable)  # (rid, qid, msg id, count), rid order
    duplicates: list[tuple[int, str, str | bytes]] = field(
        default_factory=list
    )  # (rid, address, id)
    retained: list[tuple[int, Message]] = field(default_factory=list)  # (rid, message)
    states: list[tuple[int, str, str, object]] = field(default_factory=list)  # (rid, scope, key, v)
    max_id: int = 0
    report: RecoveryReport = field(default_factory=RecoveryReport)
    read: Callable[[Record], bytes] = in_memory
    release: Callable[[], None] = nothing
    # a message with several references, decoded once: [message, references still to place]
    _shared: dict[int, list[Any]] = field(default_factory=dict)
    _refs: dict[int, int] = field(default_factory=dict)  # references per message, when > 1

    def message(self, mid: int) -> Message | None:
        """Message ``mid`` for one of its references (None: no such message, or it does
        not decode, which is reported)."""
        shared = self._shared.get(mid)
        if shared is not None:
            shared[1] -= 1
            if shared[1] <= 0:
                del self._shared[mid]
            return shared[0]
        table = self.messages
        i = table.find(mid)
        if i < 0:
            return None
        r = table.record(i)
        try:
            msg = Message.decode(self.read(r))
        except StoreError:
            raise
        except Exception as e:  # reported, not loaded; its references are removed
            self.report.corrupt.append(f"record {mid} (type {r.rtype}) does not decode: {e}")
            return None
        table.placed[i] = 1
        refs = self._refs.get(mid, 1)
        if refs > 1:
            self._shared[mid] = [msg, refs - 1]
        return msg

    def unplaced(self) -> Iterator[int]:
        """Ids of the messages none of whose references was placed (orphans to delete)."""
        placed = self.messages.placed
        for i, mid in enumerate(self.messages.ids()):
            if not placed[i]:
                yield mid


class Persistence:
    """Builds journal batches and counts references per durable message."""

    def __init__(
        self, journal: Journal, enabled: bool = True, bindings: Journal | None = None
    ) -> None:
        self.journal = journal
        self.bindings = bindings if bindings is not None else journal
        self.enabled = enabled
        self.refcounts: dict[int, int] = {}
        # the writes of one burst of input (begin() .. end()), gathered into one journal
        # batch: one record header, checksum, lock and future instead of one per message
        self._burst: list[Op] | None = None
        self._burst_fut: asyncio.Future[None] | None = None
        self._depth = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        # settles the burst's own future when durable (FileJournal): no chained future, so
        # the acknowledgements go out one loop turn sooner
        self._write_into: Callable[[list[Op], asyncio.Future[None]], None] | None = getattr(
            journal, "write_into", None
        )

    # -- batches --------------------------------------------------------------------------
    @staticmethod
    def message_op(msg: Message, encoded: bytes) -> Op:
        """``encoded`` is ``msg.encode()``, done by the caller before anything changed."""
        return put(msg.id, RT_MESSAGE, encoded)

    def ref_op(self, rid: int, qid: int, msg: Message, delivery_count: int) -> Op:
        self.refcounts[msg.id] = self.refcounts.get(msg.id, 0) + 1
        return put(rid, RT_REF, _pack((qid, msg.id, delivery_count)))

    @staticmethod
    def delivery_count_op(rid: int, qid: int, msg: Message, delivery_count: int) -> Op:
        return put(rid, RT_REF, _pack((qid, msg.id, delivery_count)))

    def unref_ops(self, rid: int, msg: Message, ops: list[Op]) -> None:
        ops.append(delete(rid))
        left = self.refcounts.get(msg.id, 1) - 1
        if left <= 0:
            self.refcounts.pop(msg.id, None)
            ops.append(delete(msg.id))
        else:
            self.refcounts[msg.id] = left

    @staticmethod
    def queue_op(rec: QueueRecord) -> Op:
        return put(rec.rid, RT_QUEUE, rec.encode())

    @staticmethod
    def duplicate_op(rid: int, address: str, dup_id: str | bytes) -> Op:
        return put(rid, RT_DUPLICATE, _pack((address, dup_id)))

    @staticmethod
    def retained_op(rid: int, msg: Message) -> Op:
        return put(rid, RT_RETAINED, msg.encode())

    @staticmethod
    def state_op(rid: int, scope: str, key: str, value: object) -> Op:
        return put(rid, RT_STATE, _pack((scope, key, value)))

    def write(self, ops: list[Op], sync: bool) -> asyncio.Future[None] | None:
        if not ops or not self.enabled:
            return None
        burst = self._burst
        if burst is None:
            return self.journal.write(ops, sync)
        burst.extend(ops)  # in order; written at end()
        if not sync:
            return None
        fut = self._burst_fut
        if fut is None:
            loop = self._loop
            if loop is None:  # kept: get_running_loop() makes a getpid() system call
                loop = self._loop = asyncio.get_running_loop()
            fut = self._burst_fut = loop.create_future()
        return fut

    def begin(self) -> None:
        """Gather every write until the matching :meth:`end` into one journal batch: the
        writes of one burst of input, made on the loop without a pause, keep their order and
        each synchronous one completes when the batch is on disk.  Nestable."""
        if self._depth == 0:
            self._burst = []
        self._depth += 1

    def end(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._write_burst()
            self._burst = None

    def _write_burst(self) -> None:
        ops, fut = self._burst, self._burst_fut
        self._burst_fut = None
        if not ops:
            return
        self._burst = []
        try:
            if fut is not None and self._write_into is not None:
                self._write_into(ops, fut)
                return
            done = self.journal.write(ops, fut is not None)
        except Exception as e:  # the store failed: every synchronous write of the burst fails
            if fut is None:  # nothing waits (acknowledgements): redelivered after a restart
                log.error("store write of %d operations failed: %s", len(ops), e)
            else:
                fut.set_exception(e)
            return
        if fut is not None:
            if done is None:
                fut.set_result(None)
            else:
                done.add_done_callback(partial(follow, fut))

    def write_bindings(self, ops: list[Op], sync: bool) -> asyncio.Future[None] | None:
        if not ops or not self.enabled:
            return None
        if self._burst:  # what the burst wrote so far goes first, as it was made first
            self._write_burst()
        return self.bindings.write(ops, sync)

    async def flush(self) -> None:
        await self.journal.flush()
        if self.bindings is not self.journal:
            await self.bindings.flush()

    async def close(self) -> None:
        await self.journal.close()
        if self.bindings is not self.journal:
            await self.bindings.close()

    # -- recovery -------------------------------------------------------------------------
    def recover(self) -> RecoveredState:
        rec = self.journal.open()
        state = RecoveredState(report=rec.report)
        if self.bindings is not self.journal:
            brec = self.bindings.open()
            try:  # small: read in now, so every record left on disk is the message journal's
                bound = {rid: Record(r.rtype, brec.read(r)) for rid, r in brec.records.items()}
            finally:
                brec.release()
            report = state.report
            report.files += brec.report.files
            report.batches += brec.report.batches
            report.records += brec.report.records
            report.corrupt.extend(f"bindings: {c}" for c in brec.report.corrupt)
            if brec.report.torn_tail:
                report.torn_tail = f"{report.torn_tail}; " if report.torn_tail else ""
                report.torn_tail += f"bindings: {brec.report.torn_tail}"
            max_id = self._load(state, bound, rec.read, 0)
            del bound
        else:
            max_id = 0
        max_id = self._load(state, rec.records, rec.read, max_id)
        rec.records.clear()  # the journal's own table: no longer needed
        state.max_id = max_id
        state.messages.finish()
        state.refs.finish()
        refcounts = self.refcounts
        messages = state.messages
        for mid in state.refs.message_ids():
            if mid in refcounts:
                refcounts[mid] += 1
            elif messages.find(mid) >= 0:
                refcounts[mid] = 1
        state._refs = {mid: n for mid, n in refcounts.items() if n > 1}
        state.read, state.release = rec.read, rec.release
        return state

    @staticmethod
    def _load(
        state: RecoveredState,
        records: Mapping[int, Record],
        read: Callable[[Record], bytes],
        max_id: int,
    ) -> int:
        """Sort records into ``state``; returns the highest record id seen."""
        messages = state.messages
        if isinstance(records, RecordTable):  # columns: no Record per message
            for rid, rtype, seq, off, size in records.raw():
                if rid > max_id:
                    max_id = rid
                if rtype == RT_MESSAGE:  # decoded when placed: see RecoveredState
                    if seq:
                        messages.add(rid, seq, off, size, b"")
                    else:  # small, in memory
                        messages.add(rid, 0, 0, 0, records.inline(off, size))
                else:  # small (in memory) but for the odd large one
                    if seq:
                        data = read(Record(rtype, b"", seq, off, size))
                    else:
                        data = records.inline(off, size)
                    _load_other(state, rid, rtype, data)
            return max_id
        for rid, r in records.items():
            if rid > max_id:
                max_id = rid
            if r.rtype == RT_MESSAGE:
                messages.add(rid, r.seq, r.offset, r.size, r.data)
            else:
                _load_other(state, rid, r.rtype, read(r))
        return max_id


def _load_other(state: RecoveredState, rid: int, rtype: int, data: bytes) -> None:
    """A record that is not a message: small, so read and decoded now."""
    try:
        if rtype == RT_REF:
            ref = _unpack(data)
            assert isinstance(ref, list) and len(ref) == 3
            state.refs.append(rid, int(ref[0]), int(ref[1]), int(ref[2]))
        elif rtype == RT_QUEUE:
            state.queues.append(QueueRecord.decode(rid, data))
        elif rtype == RT_DUPLICATE:
            dup = _unpack(data)
            assert isinstance(dup, list) and len(dup) == 2
            state.duplicates.append((rid, str(dup[0]), dup[1]))
        elif rtype == RT_RETAINED:
            state.retained.append((rid, Message.decode(data)))
        elif rtype == RT_STATE:
            st = _unpack(data)
            assert isinstance(st, list) and len(st) == 3
            state.states.append((rid, str(st[0]), str(st[1]), st[2]))
        else:
            state.report.corrupt.append(f"record {rid}: unknown record type {rtype}")
    except StoreError:
        raise
    except Exception as e:  # a record that does not decode is reported, not loaded
        state.report.corrupt.append(f"record {rid} (type {rtype}) does not decode: {e}")
