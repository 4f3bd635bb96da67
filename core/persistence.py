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
from collections.abc import Callable
from dataclasses import dataclass, field
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
            ]
        )

    @staticmethod
    def decode(rid: int, data: bytes) -> QueueRecord:
        v = _unpack(data)
        assert isinstance(v, list)
        return QueueRecord(rid, *v)


@dataclass(slots=True)
class RecoveredState:
    """What the store held.  Messages stay undecoded (and large ones in their journal files)
    until :meth:`message` places them, so a backlog far larger than memory can be paged
    as it is loaded; :meth:`release` when done."""

    queues: list[QueueRecord] = field(default_factory=list)
    messages: dict[int, Record] = field(default_factory=dict)  # message id -> its record
    refs: list[tuple[int, int, int, int]] = field(default_factory=list)  # (rid, qid, msg id, count)
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
    _refs: dict[int, int] = field(default_factory=dict)  # references per message

    def message(self, mid: int) -> Message | None:
        """Message ``mid`` for one of its references (None: no such message, or it does
        not decode, which is reported)."""
        shared = self._shared.get(mid)
        if shared is not None:
            shared[1] -= 1
            if shared[1] <= 0:
                del self._shared[mid]
            return shared[0]
        r = self.messages.get(mid)
        if r is None:
            return None
        try:
            msg = Message.decode(self.read(r))
        except StoreError:
            raise
        except Exception as e:  # reported, not loaded; its references are removed
            self.report.corrupt.append(f"record {mid} (type {r.rtype}) does not decode: {e}")
            return None
        refs = self._refs.get(mid, 1)
        if refs > 1:
            self._shared[mid] = [msg, refs - 1]
        return msg


class Persistence:
    """Builds journal batches and counts references per durable message."""

    def __init__(
        self, journal: Journal, enabled: bool = True, bindings: Journal | None = None
    ) -> None:
        self.journal = journal
        self.bindings = bindings if bindings is not None else journal
        self.enabled = enabled
        self.refcounts: dict[int, int] = {}

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
        return self.journal.write(ops, sync)

    def write_bindings(self, ops: list[Op], sync: bool) -> asyncio.Future[None] | None:
        if not ops or not self.enabled:
            return None
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
        records = rec.records
        if self.bindings is not self.journal:
            brec = self.bindings.open()
            try:  # small: read in now, so every record left on disk is the message journal's
                bound = {rid: Record(r.rtype, brec.read(r)) for rid, r in brec.records.items()}
            finally:
                brec.release()
            records = {**bound, **records}
            report = state.report
            report.files += brec.report.files
            report.batches += brec.report.batches
            report.records += brec.report.records
            report.corrupt.extend(f"bindings: {c}" for c in brec.report.corrupt)
            if brec.report.torn_tail:
                report.torn_tail = f"{report.torn_tail}; " if report.torn_tail else ""
                report.torn_tail += f"bindings: {brec.report.torn_tail}"
        max_id = 0
        read = rec.read
        for rid, r in records.items():
            max_id = max(max_id, rid)
            try:
                if r.rtype != RT_MESSAGE:
                    data = read(r)  # what is not a message is small and read now
                if r.rtype == RT_MESSAGE:
                    state.messages[rid] = r  # decoded when placed: see RecoveredState
                elif r.rtype == RT_REF:
                    ref = _unpack(data)
                    assert isinstance(ref, list) and len(ref) == 3
                    state.refs.append((rid, int(ref[0]), int(ref[1]), int(ref[2])))
                elif r.rtype == RT_QUEUE:
                    state.queues.append(QueueRecord.decode(rid, data))
                elif r.rtype == RT_DUPLICATE:
                    dup = _unpack(data)
                    assert isinstance(dup, list) and len(dup) == 2
                    state.duplicates.append((rid, str(dup[0]), dup[1]))
                elif r.rtype == RT_RETAINED:
                    state.retained.append((rid, Message.decode(data)))
                elif r.rtype == RT_STATE:
                    st = _unpack(data)
                    assert isinstance(st, list) and len(st) == 3
                    state.states.append((rid, str(st[0]), str(st[1]), st[2]))
                else:
                    state.report.corrupt.append(f"record {rid}: unknown record type {r.rtype}")
            except StoreError:
                raise
            except Exception as e:  # a record that does not decode is reported, not loaded
                state.report.corrupt.append(f"record {rid} (type {r.rtype}) does not decode: {e}")
        state.max_id = max_id
        for _, _, mid, _ in state.refs:
            if mid in state.messages:
                self.refcounts[mid] = self.refcounts.get(mid, 0) + 1
        state._refs = {mid: n for mid, n in self.refcounts.items() if n > 1}
        state.read, state.release = rec.read, rec.release
        return state
