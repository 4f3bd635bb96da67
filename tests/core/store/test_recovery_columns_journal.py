"""Recovery that leaves records on disk and keeps compact columns recovers exactly what a
full in-memory replay recovers, keeps pinning the right files afterwards, and gives the
engine its references in id order with every message placed once."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from waystation.core.message import Message
from waystation.core.persistence import RT_MESSAGE, Persistence, QueueRecord
from waystation.core.store.api import Op, delete, put
from waystation.core.store.journal import FileJournal

FILE = 8192


def workload(seed: int) -> list[list[Op]]:
    """Batches of puts (small and large), rewrites and deletes, ids mostly increasing."""
    rnd = random.Random(seed)
    live: list[int] = []
    out: list[list[Op]] = []
    rid = 1 << 30
    for _ in range(600):
        ops: list[Op] = []
        for _ in range(rnd.randint(1, 3)):
            r = rnd.random()
            if r < 0.55 or not live:
                rid += rnd.randint(1, 4)
                new = rid if rnd.random() < 0.95 else rid - rnd.randint(1, 400)
                ops.append(put(new, rnd.randint(1, 6), bytes([new % 256]) * rnd.randint(0, 900)))
                live.append(new)
            elif r < 0.7:
                old = rnd.choice(live)
                ops.append(put(old, 2, b"v%d" % rnd.getrandbits(30)))
            else:
                ops.append(delete(live.pop(rnd.randrange(len(live)))))
        out.append(ops)
    return out


def contents(path: Path, leave: int) -> tuple[dict[int, tuple[int, bytes]], int]:
    j = FileJournal(path, file_size=FILE, leave_on_disk_over=leave)
    rec = j.open()
    try:
        got = {rid: (r.rtype, rec.read(r)) for rid, r in rec.records.items()}
        rec.release()
        return got, j.stats()["live_records"]
    finally:
        asyncio.run(j.close())


def test_a_column_replay_recovers_what_a_full_replay_recovers(tmp_path):
    async def write() -> None:
        j = FileJournal(tmp_path, file_size=FILE, compact_min_files=1000)
        j.open()
        for ops in workload(7):
            j.write(ops, False)
        await j.close()

    asyncio.run(write())
    full, full_live = contents(tmp_path, -1)
    left, left_live = contents(tmp_path, 64)
    assert len(full) > 100
    assert left == full
    assert left_live == full_live == len(full)
    assert list(left) == sorted(full)  # the column table hands records out in id order


def test_records_recovered_into_columns_still_pin_their_files(tmp_path):
    """Deleting every recovered record after a restart lets every old file be reclaimed;
    rewriting some first moves their pins to new files, so reclaim waits for them."""

    async def write() -> None:
        j = FileJournal(tmp_path, file_size=FILE, compact_min_files=1000)
        j.open()
        for ops in workload(3):
            j.write(ops, False)
        await j.close()

    asyncio.run(write())
    full, _ = contents(tmp_path, -1)

    async def drain() -> None:
        j = FileJournal(tmp_path, file_size=FILE, compact_min_files=1000, leave_on_disk_over=64)
        rec = j.open()
        rec.release()
        files_before = j.stats()["files"]
        ids = sorted(full)
        for rid in ids[::3]:
            j.write([put(rid, 2, b"again")], False)
        for rid in ids:
            j.write([delete(rid)], False)
        for i in range(200):  # roll over a few times: reclaim happens at rollover
            j.write([put(1 + i, 1, b"f" * 300), delete(1 + i)], False)
        await j.flush()
        assert j.stats()["live_records"] == 0
        assert j.stats()["files"] < files_before / 4
        await j.close()

    asyncio.run(drain())
    assert contents(tmp_path, 64)[0] == {}
    assert contents(tmp_path, -1)[0] == {}


def test_references_come_back_in_id_order_and_orphans_are_listed(tmp_path):
    async def write() -> None:
        j = FileJournal(tmp_path / "j", file_size=FILE)
        b = FileJournal(tmp_path / "b", file_size=FILE)
        p = Persistence(j, bindings=b)
        j.open()
        b.open()
        p.write_bindings([p.queue_op(QueueRecord(5, "q", "q", "ANYCAST", None))], True)
        m1 = Message(1000, "q", b"one" * 200, {"k": 1}, durable=True)
        m2 = Message(900, "q", b"two", {"k": 2}, durable=True)  # an older id, written later
        orphan = Message(950, "q", b"orphan" * 100, durable=True)
        ops = [p.message_op(m1, m1.encode()), p.ref_op(2002, 5, m1, 0)]
        ops += [p.message_op(m2, m2.encode()), p.ref_op(2001, 5, m2, 3)]
        ops += [p.ref_op(1999, 5, m1, 1)]  # m1 is in the queue twice
        ops += [p.message_op(orphan, orphan.encode())]
        ops += [p.duplicate_op(3000, "q", "d" * 100)]  # not a message, and left on disk
        await p.write(ops, True)
        await p.close()

    asyncio.run(write())
    j = FileJournal(tmp_path / "j", file_size=FILE, leave_on_disk_over=64)
    b = FileJournal(tmp_path / "b", file_size=FILE)
    p = Persistence(j, bindings=b)
    state = p.recover()
    try:
        assert [q.name for q in state.queues] == ["q"]
        assert list(state.refs) == [(1999, 5, 1000, 1), (2001, 5, 900, 3), (2002, 5, 1000, 0)]
        placed = [state.message(mid) for _, _, mid, _ in state.refs]
        assert [m.body if m else None for m in placed] == [b"one" * 200, b"two", b"one" * 200]
        assert placed[0] is placed[2]  # decoded once for both of its references
        assert placed[0] is not None and placed[0].properties == {"k": 1}
        assert list(state.unplaced()) == [950]
        assert p.refcounts == {1000: 2, 900: 1}  # an orphan has no references to count
        assert state.messages[950].rtype == RT_MESSAGE and state.messages[950].size > 0
        assert state.duplicates == [(3000, "q", "d" * 100)]
        assert state.max_id == 3000
    finally:
        state.release()
        asyncio.run(p.close())
