"""Group commit on the event loop: a turn's synchronous writes share one fsync whatever their
number, the caller's own future is settled (no chained future), and the next group's fsync
waits until the acknowledgements of the group just settled have gone out.  Nothing is ever
settled before its fdatasync returned."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from gatedjournal import GatedJournal

from waystation.core.persistence import Persistence
from waystation.core.store.api import put
from waystation.core.store.journal import FileJournal


class SyncLog:
    """Replaces os.fdatasync with a quick stand-in (this disk's speed must not decide where
    the journal syncs): counts calls and notes which thread made them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self.threads: list[int] = []
        self.events: list[str] = []  # "sync", in order with what the test notes
        self.on_sync: Callable[[], object] | None = None

        def fake(fd: int) -> None:
            os.fstat(fd)  # still a valid descriptor
            self.calls += 1
            self.threads.append(threading.get_ident())
            self.events.append("sync")
            if self.on_sync is not None:
                hook, self.on_sync = self.on_sync, None
                hook()

        monkeypatch.setattr(os, "fdatasync", fake)


async def idle_journal(path: Path) -> FileJournal:
    """An open journal with a data file (the first write makes it, on the writer thread)
    whose writer thread is waiting for work."""
    j = FileJournal(path)
    j.open()
    w = j._w
    assert w is not None
    first = j.write([put(1 << 40, 1, b"first")], True)
    assert first is not None
    await first
    for _ in range(500):
        if w.idle:
            return j
        await asyncio.sleep(0.001)
    raise AssertionError("the writer thread never went idle")


def test_many_writes_of_one_turn_share_one_fsync_on_the_loop(
    tmp_path: Path, run, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = SyncLog(monkeypatch)

    async def main() -> None:
        j = await idle_journal(tmp_path)
        before = log.calls
        futs = [j.write([put(i, 1, b"m%d" % i)], True) for i in range(16)]
        assert all(f is not None and not f.done() for f in futs)
        await asyncio.gather(*futs)  # type: ignore[arg-type]
        assert log.calls - before == 1  # one group, one fsync
        assert log.threads[-1] == threading.get_ident()  # on the loop: no thread hand-off
        await j.close()

    run(main())


def test_write_into_settles_the_callers_own_future_after_the_fsync(
    tmp_path: Path, run, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = SyncLog(monkeypatch)

    async def main() -> None:
        j = await idle_journal(tmp_path)
        p = Persistence(j)
        p.begin()
        fut = p.write([put(1, 1, b"a")], True)
        p.end()
        assert fut is not None and not fut.done()
        before = log.calls
        seen: list[int] = []
        fut.add_done_callback(lambda f: seen.append(log.calls))
        loop = asyncio.get_running_loop()

        def turn(n: int) -> None:  # marks the loop turns after the fsync
            log.events.append(f"turn {n}")
            if n < 3:
                loop.call_soon(turn, n + 1)

        log.on_sync = lambda: loop.call_soon(turn, 1)
        fut.add_done_callback(lambda f: log.events.append("callback"))
        await fut
        await asyncio.sleep(0)
        assert seen == [before + 1]  # settled once its batch was synced, not before
        # its callbacks run in the first turn after the fsync: no future chained in between
        last_sync = len(log.events) - 1 - log.events[::-1].index("sync")
        assert log.events[last_sync + 1 : last_sync + 3] == ["turn 1", "callback"]
        await j.close()
        reopened = FileJournal(tmp_path)
        assert reopened.open().records[1].data == b"a"

    run(main())


def test_a_journal_without_write_into_is_followed_through_write(tmp_path: Path, run) -> None:
    async def main() -> None:
        j = GatedJournal(tmp_path)
        j.open()
        p = Persistence(j)
        p.begin()
        fut = p.write([put(1, 1, b"a")], True)
        p.end()
        assert fut is not None
        await asyncio.sleep(0.05)  # long enough for the fsync itself
        assert not fut.done()
        j.gate.set()
        await asyncio.wait_for(fut, 5)
        await j.close()

    run(main())


def test_acknowledgements_of_a_group_go_out_before_the_next_groups_fsync(
    tmp_path: Path, run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a protocol session does it: the write's future completes, its callback queues the
    acknowledgement, and the acknowledgement is written a loop turn later.  A write that
    came in meanwhile is synced only after that."""
    log = SyncLog(monkeypatch)

    async def main() -> None:
        j = await idle_journal(tmp_path)
        loop = asyncio.get_running_loop()
        second: list[asyncio.Future[None] | None] = []
        # a write arriving while the first group's fsync runs (its turn: before the
        # first future's callbacks)
        log.on_sync = lambda: loop.call_soon(
            lambda: second.append(j.write([put(2, 1, b"b")], True))
        )
        first = j.write([put(1, 1, b"a")], True)
        assert first is not None
        first.add_done_callback(lambda f: loop.call_soon(log.events.append, "ack 1"))
        await first
        for _ in range(100):
            if second and second[0] is not None and second[0].done():
                break
            await asyncio.sleep(0)
        assert second and second[0] is not None and second[0].done()
        assert log.events[-3:] == ["sync", "ack 1", "sync"]
        await j.close()

    run(main())
