"""The durable store's interface: a record journal with atomic, group-committed batches.

The engine persists everything as records keyed by a 64-bit id: ``put`` adds or replaces a
record, ``delete`` removes it.  One ``write`` call is one atomic batch: after a crash either
all of its operations are recovered or none.  ``write(..., sync=True)`` returns a future that
resolves once the batch is on disk; batches written in the same few milliseconds share one
fsync (group commit), done off the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

PUT = 1
DELETE = 2


class Op(NamedTuple):
    kind: int  # PUT or DELETE
    rid: int
    rtype: int = 0  # the engine's record type (message, reference, queue, duplicate id ...)
    data: bytes = b""


# ``Op(...)`` runs the NamedTuple's constructor as interpreted Python even in the compiled
# build (twice for every durable message); ``tuple.__new__`` makes the same object in C
_new = tuple.__new__


def put(rid: int, rtype: int, data: bytes) -> Op:
    return _new(Op, (PUT, rid, rtype, data))


def delete(rid: int) -> Op:
    return _new(Op, (DELETE, rid, 0, b""))


@dataclass(frozen=True, slots=True)
class Record:
    """A live record.  A large one recovered from a journal file may be left on disk
    (``size`` > 0: its data is ``size`` bytes at ``offset`` in file ``seq``), so a restart
    with a backlog far larger than memory does not read it all in at once: see
    :attr:`Recovered.read`."""

    rtype: int
    data: bytes
    seq: int = 0
    offset: int = 0
    size: int = 0


def in_memory(record: Record) -> bytes:
    """A record's data when it was never left on disk (journals that keep nothing there)."""
    return record.data


def nothing() -> None:
    return None


@dataclass(slots=True)
class RecoveryReport:
    """What recovery found; problems are listed, never silently skipped."""

    files: int = 0
    batches: int = 0
    records: int = 0
    torn_tail: str | None = None  # e.g. "journal-000007.wsj at offset 123: 57 bytes discarded"
    corrupt: list[str] = field(default_factory=list)  # damage before the tail (data lost!)

    @property
    def clean(self) -> bool:
        return self.torn_tail is None and not self.corrupt


@dataclass(slots=True)
class Recovered:
    records: dict[int, Record]  # live records in the order they were first put
    report: RecoveryReport
    # a record's data, read from its file when recovery left it there; valid until
    # ``release`` and before the first write (a compaction may move records)
    read: Callable[[Record], bytes] = in_memory
    release: Callable[[], None] = nothing


class StoreError(Exception):
    """The store cannot continue (disk full, I/O error, corruption found at open).
    ``outcome_unknown``: the failed writes may or may not be on disk (they could not be
    taken back), so a client must not be told "not persisted"."""

    def __init__(self, message: str, *, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class Journal(Protocol):
    def open(self) -> Recovered:
        """Recover the live records (blocking; call once before the first write)."""

    def write(self, ops: Sequence[Op], sync: bool) -> asyncio.Future[None] | None:
        """Append one atomic batch. Must be called from the event loop thread.

        With ``sync`` the returned future resolves when the batch is durable (or fails with
        StoreError); without it the batch is written soon, and None is returned.
        """

    async def flush(self) -> None:
        """Wait until every batch written so far is durable."""

    async def close(self) -> None:
        """Flush, stop the writer and close files."""

    def stats(self) -> dict[str, int]:
        """Counters: batches, bytes, fsyncs, files, live records, compactions."""


class MemoryJournal:
    """A journal for ``persistence = false``: nothing written, nothing recovered."""

    def open(self) -> Recovered:
        return Recovered({}, RecoveryReport())

    def write(self, ops: Sequence[Op], sync: bool) -> asyncio.Future[None] | None:
        if not sync:
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def flush(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def stats(self) -> dict[str, int]:
        return {}
