"""The writes of one burst of input are one journal batch, in order, and a synchronous write
of the burst completes only when that batch is on disk."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from waystation.core.persistence import Persistence
from waystation.core.store.api import Op, delete, put
from waystation.core.store.journal import FileJournal


class HeldJournal:
    """Records each write; its synchronous writes complete when the test says so."""

    def __init__(self, fail: bool = False) -> None:
        self.writes: list[tuple[list[Op], bool]] = []
        self.futs: list[asyncio.Future[None]] = []
        self.fail = fail

    def write(self, ops: Sequence[Op], sync: bool) -> asyncio.Future[None] | None:
        if self.fail:
            raise OSError("disk gone")
        self.writes.append((list(ops), sync))
        if not sync:
            return None
        fut = asyncio.get_running_loop().create_future()
        self.futs.append(fut)
        return fut


def test_a_burst_is_one_batch_in_order_and_waits_for_it() -> None:
    async def main() -> None:
        j, b = HeldJournal(), HeldJournal()
        p = Persistence(j, bindings=b)  # type: ignore[arg-type]
        p.begin()
        first = p.write([put(1, 1, b"a")], True)
        assert p.write([delete(7)], False) is None
        p.begin()  # nested: still the same burst
        second = p.write([put(2, 1, b"b")], True)
        p.end()
        assert j.writes == []  # nothing written before the burst ends
        p.end()
        assert j.writes == [([put(1, 1, b"a"), delete(7), put(2, 1, b"b")], True)]
        assert first is second and first is not None and not first.done()
        j.futs[0].set_result(None)
        await asyncio.sleep(0)
        assert first.done() and first.exception() is None
        # outside a burst: written at once, as before
        p.write([put(3, 1, b"c")], False)
        assert j.writes[-1] == ([put(3, 1, b"c")], False)

    asyncio.run(main())


def test_a_bindings_write_goes_after_what_the_burst_wrote_before_it() -> None:
    async def main() -> None:
        j, b = HeldJournal(), HeldJournal()
        p = Persistence(j, bindings=b)  # type: ignore[arg-type]
        p.begin()
        p.write([delete(5)], True)
        p.write_bindings([delete(9)], True)
        assert j.writes == [([delete(5)], True)]  # flushed before the bindings write
        p.write([put(6, 1, b"x")], False)
        p.end()
        assert j.writes[1] == ([put(6, 1, b"x")], False)
        assert b.writes == [([delete(9)], True)]

    asyncio.run(main())


def test_a_failed_store_fails_every_synchronous_write_of_the_burst() -> None:
    async def main() -> None:
        p = Persistence(HeldJournal(fail=True))  # type: ignore[arg-type]
        p.begin()
        a = p.write([put(1, 1, b"a")], True)
        b = p.write([put(2, 1, b"b")], True)
        p.end()  # does not raise: the waiters hear of it
        assert a is b and a is not None
        with pytest.raises(OSError, match="disk gone"):
            await a
        p.begin()  # nothing waits: logged, not raised
        p.write([delete(1)], False)
        p.end()

    asyncio.run(main())


def test_a_burst_on_the_real_journal_is_recovered_whole(tmp_path: Path) -> None:
    async def main() -> None:
        j = FileJournal(tmp_path, file_size=1 << 20)
        j.open().release()
        p = Persistence(j)
        p.begin()
        done = p.write([put(i, 1, b"m%d" % i) for i in range(1, 6)], True)
        p.write([delete(2)], False)
        p.end()
        assert done is not None
        await done
        await j.close()
        again = FileJournal(tmp_path, file_size=1 << 20)
        rec = again.open()
        try:
            assert sorted(rec.records) == [1, 3, 4, 5]
        finally:
            rec.release()
        await again.close()

    asyncio.run(main())
