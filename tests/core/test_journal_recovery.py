"""FileJournal recovery: torn tails, corruption, and crashes at every step of a compaction."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

import waystation.core.store.compactor as compactor_mod
from waystation.core.store.api import Op, Record, delete, put
from waystation.core.store.compactor import compact
from waystation.core.store.files import Layout
from waystation.core.store.journal import FileJournal
from waystation.core.store.segment import (
    BATCH_HDR,
    HEADER_SIZE,
    KIND_DATA,
    scan,
    unpack_file_header,
)

SMALL = 4096


async def commit(j: FileJournal, ops: list[Op]) -> None:
    """A sync write, awaited."""
    fut = j.write(ops, True)
    assert fut is not None
    await fut


def data_files(d: Path) -> list[tuple[int, Path]]:
    """(seq, path) of the data files, oldest first."""
    out = []
    for p in d.glob("journal-*.wsj"):
        h = unpack_file_header(p.read_bytes()[:HEADER_SIZE])
        if h is not None and h.kind == KIND_DATA:
            out.append((h.seq, p))
    return sorted(out)


def frames(path: Path, seq: int) -> list[tuple[int, int]]:
    """(offset, length) of each valid batch frame in a file."""
    found = scan(path.read_bytes(), seq)
    return [(s - BATCH_HDR.size, e - s + BATCH_HDR.size) for s, e in found.batches]


def scribble(path: Path, off: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(data)


async def write_abc(d: Path, **kw: int) -> None:
    j = FileJournal(d, **kw)  # type: ignore[arg-type]
    j.open()
    await commit(j, [put(1, 1, b"A" * 50)])
    await commit(j, [put(2, 1, b"B" * 50), delete(1), put(1, 2, b"a")])
    await commit(j, [put(3, 1, b"C" * 300), put(4, 1, b"D"), delete(2)])
    await j.close()


def open_journal(d: Path, **kw: int) -> tuple[FileJournal, Any]:
    j = FileJournal(d, **kw)  # type: ignore[arg-type]
    return j, j.open()


@pytest.mark.parametrize("damage", ["truncate", "scribble", "zero-payload"])
def test_torn_tail_is_reported_not_loaded_and_cleaned(
    tmp_path: Path, run, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    run(write_abc(tmp_path))
    ((seq, path),) = data_files(tmp_path)
    off, length = frames(path, seq)[-1]
    if damage == "truncate":
        os.truncate(path, off + length // 2)
    elif damage == "scribble":
        scribble(path, off + 10, os.urandom(length - 10))
    else:
        scribble(path, off + BATCH_HDR.size, bytes(length - BATCH_HDR.size))
    with caplog.at_level(logging.WARNING):
        j, rec = open_journal(tmp_path)
    assert rec.report.torn_tail is not None and not rec.report.corrupt
    assert rec.report.torn_tail.startswith(f"{path.name} at offset {off}:")
    assert "torn tail" in caplog.text
    # the whole last batch is gone (atomic), the earlier ones are intact
    assert list(rec.records.items()) == [(2, Record(1, b"B" * 50)), (1, Record(2, b"a"))]

    async def more() -> None:
        await commit(j, [put(9, 1, b"after the tear")])
        await j.close()

    run(more())
    j, rec = open_journal(tmp_path)
    assert rec.report.clean, rec.report
    assert list(rec.records) == [2, 1, 9]
    run(j.close())


def test_damage_in_the_middle_is_corruption(
    tmp_path: Path, run, caplog: pytest.LogCaptureFixture
) -> None:
    run(write_abc(tmp_path))
    ((seq, path),) = data_files(tmp_path)
    off, length = frames(path, seq)[1]
    scribble(path, off + length - 3, b"\xff\xfe\xfd")
    with caplog.at_level(logging.ERROR):
        j, rec = open_journal(tmp_path)
    assert rec.report.torn_tail is None
    assert len(rec.report.corrupt) == 1 and f"offset {off}" in rec.report.corrupt[0]
    assert "corruption" in caplog.text
    # batch 2 is not loaded (not even partly); batches 1 and 3 are
    assert list(rec.records.items()) == [
        (1, Record(1, b"A" * 50)),
        (3, Record(1, b"C" * 300)),
        (4, Record(1, b"D")),
    ]
    run(j.close())


def test_zeroed_hole_before_valid_batches_is_corruption(tmp_path: Path, run) -> None:
    run(write_abc(tmp_path))
    ((seq, path),) = data_files(tmp_path)
    off, length = frames(path, seq)[0]
    scribble(path, off, bytes(length))  # a lost write
    j, rec = open_journal(tmp_path)
    assert rec.report.torn_tail is None and len(rec.report.corrupt) == 1
    assert 1 not in rec.records or rec.records[1] == Record(2, b"a")
    run(j.close())


def test_damaged_end_of_an_older_file_is_corruption_not_a_torn_tail(tmp_path: Path, run) -> None:
    async def main() -> None:
        j = FileJournal(tmp_path, file_size=SMALL, compact_min_files=1000)
        j.open()
        for i in range(60):
            await commit(j, [put(i, 1, bytes(100))])
        await j.close()

    run(main())
    files = data_files(tmp_path)
    assert len(files) >= 2
    seq, path = files[0]
    off, length = frames(path, seq)[-1]
    scribble(path, off + 8, b"\x01\x02\x03\x04")
    j, rec = open_journal(tmp_path, file_size=SMALL)
    assert rec.report.torn_tail is None and len(rec.report.corrupt) == 1
    assert path.name in rec.report.corrupt[0]
    assert len(rec.records) == 59
    run(j.close())


def test_a_file_with_a_bad_header_is_moved_aside_and_reported(tmp_path: Path, run) -> None:
    run(write_abc(tmp_path))
    ((_, path),) = data_files(tmp_path)
    scribble(path, 5, b"\x99")
    j, rec = open_journal(tmp_path)
    assert rec.records == {} and len(rec.report.corrupt) == 1
    assert path.with_name(path.name + ".bad").exists()
    run(j.close())


class Crash(BaseException):
    """A simulated process death: not an Exception, so no rollback code runs."""


class CrashingOs:
    """Stands in for ``os`` in the compactor; dies at the n-th call of one function."""

    def __init__(self, name: str, n: int) -> None:
        self.name, self.n = name, n

    def __getattr__(self, attr: str) -> Any:
        real = getattr(os, attr)
        if attr != self.name:
            return real

        def call(*a: Any) -> Any:
            self.n -= 1
            if self.n == 0:
                raise Crash(attr)
            return real(*a)

        return call


class CrashingLayout(Layout):
    def __init__(self, d: Path, stage: str) -> None:
        super().__init__(d, "journal", "wsj")
        self.stage = stage
        self.dir_syncs = 0

    def write_marker(self, old_max: int, new_seqs: list[int]) -> None:
        if self.stage == "marker-before":
            raise Crash("before marker")
        super().write_marker(old_max, new_seqs)
        if self.stage == "marker-after":
            raise Crash("after marker")

    def fsync_dir(self) -> None:
        super().fsync_dir()
        self.dir_syncs += 1
        if self.stage == f"dirsync-{self.dir_syncs}":
            raise Crash(self.stage)


STAGES = [
    ("layout", "dirsync-1"),  # .cmp files written, no marker
    ("layout", "marker-before"),
    ("layout", "marker-after"),  # committed, nothing renamed
    ("os", "rename:2"),  # some .cmp renamed
    ("os", "unlink:2"),  # some old files deleted
    ("layout", "dirsync-3"),  # old files gone, marker still there
    ("layout", "dirsync-4"),  # marker deleted
]


@pytest.mark.parametrize(("kind", "stage"), STAGES)
def test_crash_at_any_compaction_step_recovers_the_same_records(
    tmp_path: Path, run, monkeypatch: pytest.MonkeyPatch, kind: str, stage: str
) -> None:
    src = tmp_path / "src"

    async def build() -> None:
        j = FileJournal(src, file_size=SMALL, compact_min_files=1000)
        j.open()
        await commit(j, [put(10_000, 1, b"oldest")])
        for r in range(6):
            for k in range(40):
                j.write([put(k, r, b"%d/%d" % (k, r) + bytes(k * 3 + 100))], False)
            j.write([delete(k) for k in range(r, 40, 5)], False)
        await j.close()

    run(build())
    j, before = open_journal(src, file_size=SMALL)
    run(j.close())
    expected = list(before.records.items())
    old = [seq for seq, _ in data_files(src)]
    assert len(old) >= 4
    d = tmp_path / "crash"
    shutil.copytree(src, d)
    layout = CrashingLayout(d, stage if kind == "layout" else "")
    if kind == "os":
        name, n = stage.split(":")
        monkeypatch.setattr(compactor_mod, "os", CrashingOs(name, int(n)))
    with pytest.raises(Crash):
        compact(layout, SMALL, old, max(old) + 5, 100)
    monkeypatch.undo()
    j, rec = open_journal(d, file_size=SMALL)
    assert rec.report.clean, rec.report
    assert list(rec.records.items()) == expected
    assert not list(d.glob("*.cmp")) and not (d / "journal.compact").exists()
    committed = stage not in ("dirsync-1", "marker-before")
    seqs = [seq for seq, _ in data_files(d)]
    assert (min(seqs) > max(old)) if committed else (seqs == old)
    run(j.close())


def test_failed_compaction_keeps_the_journal_working(
    tmp_path: Path, run, monkeypatch: pytest.MonkeyPatch
) -> None:
    import waystation.core.store.writer as writer_mod

    def broken(*a: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer_mod, "compact", broken)

    async def main() -> None:
        kw = {"file_size": SMALL, "compact_min_files": 3, "compact_percentage": 90}
        j = FileJournal(tmp_path, **kw)  # type: ignore[arg-type]
        j.open()
        for r in range(10):
            for k in range(30):
                j.write([put(k, r, bytes(60))], False)
        await j.flush()
        await commit(j, [put(99, 1, b"still fine")])
        assert j.stats()["compactions"] == 0
        await j.close()
        j = FileJournal(tmp_path, **kw)  # type: ignore[arg-type]
        rec = j.open()
        assert rec.report.clean and len(rec.records) == 31
        await j.close()

    run(main())
