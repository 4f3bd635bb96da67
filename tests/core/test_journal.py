"""FileJournal: record semantics, files on disk, reclaim, compaction, group commit, I/O errors."""

from __future__ import annotations

import asyncio
import errno
import os
import re
import subprocess
from pathlib import Path

import pytest

from waystation.core.store.api import Op, Record, StoreError, delete, put
from waystation.core.store.journal import FileJournal
from waystation.core.store.segment import (
    BATCH_MAGIC_BYTES,
    HEADER_SIZE,
    KIND_DATA,
    KIND_FREE,
    unpack_file_header,
)

SMALL = 4096


async def commit(j: FileJournal, ops: list[Op]) -> None:
    """A sync write, awaited."""
    fut = j.write(ops, True)
    assert fut is not None
    await fut


def headers(d: Path) -> dict[str, tuple[int, int]]:
    """file name -> (kind, seq) of every journal file."""
    out = {}
    for p in sorted(d.glob("journal-*.wsj")):
        h = unpack_file_header(p.read_bytes()[:HEADER_SIZE])
        assert h is not None, p
        out[p.name] = (h.kind, h.seq)
    return out


def data_files(d: Path) -> list[str]:
    return [n for n, (kind, _) in headers(d).items() if kind == KIND_DATA]


async def reopen(d: Path, **kw: int) -> tuple[FileJournal, dict[int, Record]]:
    j = FileJournal(d, **kw)  # type: ignore[arg-type]
    rec = j.open()
    assert rec.report.clean, rec.report
    return j, rec.records


def test_put_replace_delete_survive_reopen(tmp_path: Path, run) -> None:
    async def main() -> None:
        j, recs = await reopen(tmp_path)
        assert recs == {}
        await commit(j, [put(1, 7, b"one")])
        await commit(j, [put(2, 7, b"two")])
        await commit(j, [put(3, 8, b"three")])
        await commit(j, [put(2, 9, b"TWO")])  # replace keeps the first-put position
        await commit(j, [delete(1)])
        await commit(j, [delete(42)])  # deleting an unknown id is harmless
        assert j.stats()["live_records"] == 2
        await j.close()
        j, recs = await reopen(tmp_path)
        assert list(recs.items()) == [(2, Record(9, b"TWO")), (3, Record(8, b"three"))]
        await commit(j, [put(1, 7, b"again")])  # a re-put goes to the end
        await j.close()
        j, recs = await reopen(tmp_path)
        assert list(recs) == [2, 3, 1]
        assert recs[1] == Record(7, b"again")
        await j.close()

    run(main())


def test_multi_op_batch_and_non_sync_writes(tmp_path: Path, run) -> None:
    async def main() -> None:
        j, _ = await reopen(tmp_path)
        await commit(j, [put(i, 1, b"x%d" % i) for i in range(10)])
        assert j.write([put(100, 2, b"a"), delete(3), delete(4), put(3, 5, b"b")], False) is None
        await j.flush()
        await j.close()
        j, recs = await reopen(tmp_path)
        assert list(recs) == [0, 1, 2, 5, 6, 7, 8, 9, 100, 3]
        assert recs[3] == Record(5, b"b") and recs[100] == Record(2, b"a")
        await j.close()

    run(main())


def test_invalid_ops_are_rejected_before_anything_is_written(tmp_path: Path, run) -> None:
    async def main() -> None:
        j, _ = await reopen(tmp_path)
        with pytest.raises((ValueError, OverflowError, Exception)):
            j.write([put(1, 1, b"ok"), put(-5, 1, b"bad id")], True)
        await commit(j, [put(2, 1, b"fine")])
        await j.close()
        j, recs = await reopen(tmp_path)
        assert list(recs) == [2]
        await j.close()

    run(main())


def test_rollover_preallocated_files_and_order(tmp_path: Path, run) -> None:
    async def main() -> None:
        j, _ = await reopen(tmp_path, file_size=SMALL, min_files=3, compact_min_files=1000)
        assert len(headers(tmp_path)) == 3  # pre-created spares
        assert all(k == KIND_FREE for k, _ in headers(tmp_path).values())
        for i in range(200):
            fut = j.write([put(i, 1, b"%05d" % i + bytes(40))], i % 10 == 0)
            if fut is not None:
                await fut
        for i in range(0, 200, 3):  # replacements land in later files
            j.write([put(i, 2, b"new")], False)
        await j.close()
        names = data_files(tmp_path)
        assert len(names) > 3
        for name in headers(tmp_path):
            assert re.fullmatch(r"journal-(\d{12}|free-\d{6})\.wsj", name), name
            assert (tmp_path / name).stat().st_size == SMALL
        seqs = [headers(tmp_path)[n][1] for n in names]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        j, recs = await reopen(tmp_path, file_size=SMALL, compact_min_files=1000)
        assert list(recs) == list(range(200))
        assert recs[3] == Record(2, b"new") and recs[4].data.startswith(b"00004")
        await j.close()

    run(main())


def test_batch_bigger_than_a_file_gets_its_own_file(tmp_path: Path, run) -> None:
    async def main() -> None:
        j, _ = await reopen(tmp_path, file_size=SMALL)
        await commit(j, [put(1, 1, b"small")])
        big = os.urandom(3 * SMALL)
        await commit(j, [put(2, 1, big), put(3, 1, b"with it")])
        await commit(j, [put(4, 1, b"after")])
        await j.close()
        sizes = sorted((tmp_path / n).stat().st_size for n in data_files(tmp_path))
        assert sizes[:2] == [SMALL, SMALL] and sizes[2] > 3 * SMALL
        j, recs = await reopen(tmp_path, file_size=SMALL)
        assert list(recs) == [1, 2, 3, 4] and recs[2].data == big
        await j.close()

    run(main())


def test_reclaim_recycles_oldest_dead_files_and_keeps_min_files(tmp_path: Path, run) -> None:
    async def main() -> None:
        kw = {"file_size": SMALL, "min_files": 4, "compact_min_files": 1000}
        j, _ = await reopen(tmp_path, **kw)
        await commit(j, [put(0, 1, b"pinned")])  # keeps the first file alive
        rid = 1
        for _ in range(30):  # each round fills about a file, then deletes it again
            for _ in range(40):
                j.write([put(rid, 1, bytes(60))], False)
                rid += 1
            j.write([delete(r) for r in range(rid - 40, rid)], False)
        await j.flush()
        assert j.stats()["files"] > 20  # nothing reclaimable behind the pinned file
        await commit(j, [delete(0)])
        for _ in range(3 * SMALL // 100):  # roll over a few more files to trigger reclaim
            j.write([put(rid, 1, bytes(60))], False)
            j.write([delete(rid)], False)
            rid += 1
        await commit(j, [put(99_999, 1, b"last")])
        st = j.stats()
        assert st["files"] <= 2, st
        await j.close()
        names = headers(tmp_path)
        assert len(names) == 4  # data files plus spares: min_files in all
        j, recs = await reopen(tmp_path, **kw)
        assert list(recs) == [99_999]  # no deleted record came back from a reclaimed file
        await j.close()

    run(main())


def test_first_put_order_survives_reclaim_of_the_first_file(tmp_path: Path, run) -> None:
    async def main() -> None:
        kw = {"file_size": SMALL, "min_files": 1, "compact_min_files": 1000}
        j, _ = await reopen(tmp_path, **kw)
        await commit(j, [put(1, 1, b"A v1")])  # file 1
        rid = 100
        for _ in range(3):  # fill and kill a few files' worth of filler
            for _ in range(40):
                j.write([put(rid, 1, bytes(80))], False)
                j.write([delete(rid)], False)
                rid += 1
            if rid == 140:
                j.write([put(2, 1, b"C")], False)  # a later file
        await commit(j, [put(1, 2, b"A v2")])  # A replaced in a later file still
        for _ in range(120):  # roll over again: now every older file could be reclaimed
            j.write([put(rid, 1, bytes(80))], False)
            j.write([delete(rid)], False)
            rid += 1
        await j.flush()
        await j.close()
        j, recs = await reopen(tmp_path, **kw)
        assert list(recs.items()) == [(1, Record(2, b"A v2")), (2, Record(1, b"C"))]
        await j.close()

    run(main())


def test_recycled_file_keeps_stale_batches_but_they_never_load(tmp_path: Path, run) -> None:
    async def main() -> None:
        kw = {"file_size": SMALL, "min_files": 1, "compact_min_files": 1000}
        j, _ = await reopen(tmp_path, **kw)
        for i in range(30):
            j.write([put(i, 1, b"old-%03d" % i + bytes(80))], False)
        j.write([delete(i) for i in range(30)], False)
        await commit(j, [put(5000, 1, b"new" + bytes(100))])  # rolls over: recycles
        assert j.stats()["files"] == 1
        await j.close()
        stale = [
            n for n in data_files(tmp_path) if b"old-" in (tmp_path / n).read_bytes()[HEADER_SIZE:]
        ]
        assert stale, "expected a recycled file still holding old batches"
        j, recs = await reopen(tmp_path, **kw)
        assert list(recs) == [5000] and recs[5000].data.startswith(b"new")
        await j.close()

    run(main())


def _churn(j: FileJournal, rounds: int, keys: int, size: int) -> None:
    for r in range(rounds):
        for k in range(keys):
            j.write([put(k, r, b"%d:%d:" % (k, r) + bytes(size))], False)
        j.write([delete(k) for k in range(keys) if (k + r) % 3 == 0], False)


def test_compaction_rewrites_live_records_and_survives_reopen(tmp_path: Path, run) -> None:
    async def main() -> None:
        kw = {"file_size": 8192, "compact_min_files": 4, "compact_percentage": 50}
        j, _ = await reopen(tmp_path, **kw)
        await commit(j, [put(1_000_000, 1, b"first")])
        _churn(j, rounds=40, keys=20, size=50)
        await j.flush()
        for _ in range(200):
            if j.stats()["compactions"] >= 1 and j._compacting is None:
                break
            await asyncio.sleep(0.01)
        st = j.stats()
        assert st["compactions"] >= 1, st
        expected = {1_000_000: Record(1, b"first")}
        for k in range(20):
            if (k + 39) % 3:
                expected[k] = Record(39, b"%d:%d:" % (k, 39) + bytes(50))
        await commit(j, [put(2_000_000, 1, b"after")])
        expected[2_000_000] = Record(1, b"after")
        await j.close()
        assert not list(tmp_path.glob("*.cmp")) and not (tmp_path / "journal.compact").exists()
        assert len(data_files(tmp_path)) < 10
        j, recs = await reopen(tmp_path, **kw)
        assert recs == expected
        assert list(recs)[0] == 1_000_000 and list(recs)[-1] == 2_000_000
        await j.close()

    run(main())


def test_group_commit_shares_fsyncs_and_never_acks_early(
    tmp_path: Path, run, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: set[bytes] = set()
    durable: set[bytes] = set()
    real_pwritev, real_fdatasync = os.pwritev, os.fdatasync

    def pwritev(fd: int, bufs: list[bytes], off: int) -> int:
        written.update(re.findall(rb"tok-\d{4}", b"".join(bytes(b) for b in bufs)))
        return real_pwritev(fd, bufs, off)

    def fdatasync(fd: int) -> None:
        before = set(written)
        real_fdatasync(fd)
        durable.update(before)

    monkeypatch.setattr(os, "pwritev", pwritev)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    early: list[int] = []

    async def main() -> None:
        j, _ = await reopen(tmp_path)
        await commit(j, [put(0, 0, b"warm-up")])
        base = j.stats()["fsyncs"]

        async def one(i: int) -> None:
            await asyncio.sleep(0)
            await commit(j, [put(i, 1, b"tok-%04d" % i)])
            if b"tok-%04d" % i not in durable:
                early.append(i)

        await asyncio.gather(*(one(i) for i in range(1, 101)))
        used = j.stats()["fsyncs"] - base
        await j.close()
        assert not early, f"acknowledged before fsync: {early}"
        assert 1 <= used <= 20, used

    run(main())


def test_sync_false_never_fsyncs(tmp_path: Path, run, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(os, "fdatasync", lambda fd: calls.append(fd))

    async def main() -> None:
        j, _ = await reopen(tmp_path, sync=False, file_size=SMALL)
        for i in range(100):
            await commit(j, [put(i, 1, bytes(100))])
        await j.close()

    run(main())
    assert calls == []


def test_io_error_fails_the_batch_and_every_later_write(
    tmp_path: Path, run, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        j, _ = await reopen(tmp_path)
        await commit(j, [put(1, 1, b"fine")])

        def full(*a: object) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "pwritev", full)
        with pytest.raises(StoreError, match="No space"):
            await commit(j, [put(2, 1, b"lost")])
        with pytest.raises(StoreError):
            j.write([put(3, 1, b"refused")], False)
        with pytest.raises(StoreError):
            await j.flush()
        await j.close()
        monkeypatch.undo()
        j, recs = await reopen(tmp_path)
        assert list(recs) == [1]
        await j.close()

    run(main())


def test_a_batch_reported_not_persisted_is_not_there_after_restart(
    tmp_path: Path, run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write reached the page cache, then the sync failed (a full disk): the client is
    told "not persisted", so recovery must not bring the batch back (a retry would double it)."""

    async def main() -> None:
        j, _ = await reopen(tmp_path)
        await commit(j, [put(1, 1, b"fine")])
        real = os.fdatasync
        failures = iter([OSError(errno.ENOSPC, "No space left on device")])

        def sync_once_failing(fd: int) -> None:
            err = next(failures, None)
            if err is not None:
                raise err
            real(fd)

        monkeypatch.setattr(os, "fdatasync", sync_once_failing)
        with pytest.raises(StoreError, match="No space") as info:
            await commit(j, [put(2, 1, b"refused")])
        assert not info.value.outcome_unknown
        await j.close()
        monkeypatch.undo()
        j, recs = await reopen(tmp_path)
        assert list(recs) == [1]
        await j.close()

    run(main())


def test_when_the_failed_batch_cannot_be_taken_back_the_outcome_is_unknown(
    tmp_path: Path, run, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        j, _ = await reopen(tmp_path)
        await commit(j, [put(1, 1, b"fine")])

        def never(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "fdatasync", never)
        with pytest.raises(StoreError, match="outcome unknown") as info:
            await commit(j, [put(2, 1, b"maybe")])
        assert info.value.outcome_unknown
        await j.close()

    run(main())


def test_full_tmpfs_fails_with_store_error(tmp_path: Path, run) -> None:
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mnt)], capture_output=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:

        async def main() -> None:
            j, _ = await reopen(mnt, file_size=32 * 1024, min_files=2)
            with pytest.raises(StoreError):
                for i in range(10_000):
                    await commit(j, [put(i, 1, bytes(500))])
            with pytest.raises(StoreError):
                j.write([put(0, 1, b"x")], True)
            await j.close()

        run(main())
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_write_needs_open_and_a_directory_is_opened_once(tmp_path: Path, run) -> None:
    j = FileJournal(tmp_path / "a" / "b")
    with pytest.raises(StoreError):
        j.write([put(1, 1, b"")], True)
    j.open()
    assert (tmp_path / "a" / "b").is_dir()
    with pytest.raises(StoreError):
        j.open()
    other = FileJournal(tmp_path / "a" / "b")
    with pytest.raises(StoreError, match="in use"):  # one journal per directory
        other.open()
    run(j.close())
    other.open()
    run(other.close())


def test_batch_magic_is_present_in_files(tmp_path: Path, run) -> None:
    async def main() -> None:
        j, _ = await reopen(tmp_path, file_size=SMALL)
        await commit(j, [put(1, 1, b"abc")])
        await j.close()
        (name,) = data_files(tmp_path)
        raw = (tmp_path / name).read_bytes()
        assert raw[HEADER_SIZE : HEADER_SIZE + 4] == BATCH_MAGIC_BYTES
        assert raw[-100:] == bytes(100)  # the rest of the pre-allocated file is still zeros

    run(main())


def test_recovery_can_leave_large_records_on_disk(tmp_path):
    """A restart with a backlog larger than memory: large records stay in their files until
    read, small ones are in memory, and a replaced or deleted record is never offered."""
    small, big = b"s" * 10, bytes(range(256)) * 8

    async def write() -> None:
        j = FileJournal(tmp_path, file_size=SMALL)
        j.open()
        await j.write([put(1, 1, big), put(2, 2, small), put(3, 1, big)], True)
        await j.write([put(3, 1, b"x" * 300), delete(1)], True)
        await j.close()

    asyncio.run(write())
    j = FileJournal(tmp_path, file_size=SMALL, leave_on_disk_over=256)
    rec = j.open()
    try:
        assert list(rec.records) == [2, 3]
        two, three = rec.records[2], rec.records[3]
        assert two == Record(2, small) and rec.read(two) == small
        assert three.data == b"" and three.size == 300 and rec.read(three) == b"x" * 300
        rec.release()
    finally:
        asyncio.run(j.close())
