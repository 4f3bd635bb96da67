"""The compact structures recovery keeps per record (frozen index columns, the record table)
behave exactly like the plain per-record dicts they replace, under random puts, deletes,
updates, out-of-order ids, compaction forwards and freezes at any point."""

from __future__ import annotations

import random

import pytest

from waystation.core.store.api import Record
from waystation.core.store.index import Columns, FileInfo, LiveIndex
from waystation.core.store.recovery import RecordTable


class Model:
    """What the index must report: rid -> [first file, first size, current file, size,
    split] (split: the first file is pinned on its own, decided when written)."""

    def __init__(self) -> None:
        self.e: dict[int, list] = {}

    def put(self, rid: int, size: int, fi: FileInfo) -> None:
        e = self.e.get(rid)
        if e is None:
            self.e[rid] = [fi, size, fi, size, False]
            return
        if e[0].resolve() is fi:
            e[0], e[1], e[4] = fi, size, False
        else:
            e[4] = True
        e[2], e[3] = fi, size

    def delete(self, rid: int) -> None:
        self.e.pop(rid, None)

    def pins(self) -> dict[int, tuple[int, int]]:
        out: dict[int, list[int]] = {}
        for first, fsize, cur, size, split in self.e.values():
            first, cur = first.resolve(), cur.resolve()
            c = out.setdefault(id(cur), [0, 0])
            c[0] += 1
            c[1] += size
            if split:
                f = out.setdefault(id(first), [0, 0])
                f[0] += 1
                f[1] += fsize
        return {k: (v[0], v[1]) for k, v in out.items()}


def pins(files: list[FileInfo]) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for fi in files:
        fi = fi.resolve()
        if fi.refs or fi.live:
            out[id(fi)] = (fi.refs, fi.live)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_a_frozen_index_pins_the_same_files_as_a_plain_one(seed):
    rnd = random.Random(seed)
    index, model = LiveIndex(), Model()
    files = [FileInfo([1])]
    next_id = 1 << 40
    live: list[int] = []
    for step in range(4000):
        fi = files[-1]
        r = rnd.random()
        if r < 0.45 or not live:  # a new record, sometimes with an id from the past
            next_id += rnd.randint(1, 3)
            rid = next_id if rnd.random() < 0.9 else next_id - rnd.randint(1, 5000)
            size = rnd.randint(1, 5000)
            index.put(rid, size, fi)
            model.put(rid, size, fi)
            live.append(rid)
        elif r < 0.65:  # written again (a delivery count), maybe in a later file
            rid = rnd.choice(live)
            size = rnd.randint(1, 5000)
            index.put(rid, size, fi)
            model.put(rid, size, fi)
        elif r < 0.9:
            rid = live.pop(rnd.randrange(len(live)))
            index.delete(rid)
            model.delete(rid)
        elif r < 0.96:  # the next file (recovery freezes after each one)
            index.freeze()
            files.append(FileInfo([len(files) + 1]))
        elif r < 0.98 and len(files) > 3:  # a compaction forwards the older files
            old = [f for f in files[:-1] if f.fwd is None]
            group = FileInfo([0])
            group.refs = sum(f.refs for f in old)
            group.live = sum(f.live for f in old)
            for f in old:
                f.fwd = group
            files.insert(len(files) - 1, group)
        else:
            index.delete(rnd.getrandbits(50))  # never written: no effect
        if step % 97 == 0 or step == 3999:
            assert pins(files) == model.pins()
            assert len(index) == len(model.e)
    for rid in list(model.e):
        index.delete(rid)
    assert len(index) == 0
    assert pins(files) == {}


def test_columns_find_add_drop_and_rebuild():
    cols = Columns("q")
    cols.add([(k, k * 10) for k in range(0, 20000, 2)])
    cols.add([(k, k * 10) for k in range(1, 9000, 2)])  # out of order: merged in
    assert list(cols.keys[:5]) == [0, 1, 2, 3, 4]
    for k in (0, 1, 8999, 19998):
        i = cols.find(k)
        assert cols.cols[0][i] == k * 10
    assert cols.find(9001) == -1 and cols.find(20001) == -1
    for k in range(0, 15000):
        i = cols.find(k)
        if i >= 0:
            cols.drop(i)
    assert [r[0] for r in cols.rows()] == list(range(15000, 20000, 2))
    assert len(cols.keys) < 10000  # the dropped rows were squeezed out
    cols.add([(15001, 7)])  # between live rows
    assert cols.cols[0][cols.find(15001)] == 7


def rec(rnd: random.Random, rid: int) -> Record:
    if rnd.random() < 0.5:
        return Record(rnd.randint(1, 6), bytes([rid % 251]) * rnd.randint(0, 40))
    return Record(rnd.randint(1, 6), b"", rnd.randint(1, 9), rnd.randint(0, 1 << 33), 300)


@pytest.mark.parametrize("seed", range(8))
def test_the_record_table_holds_what_a_dict_holds(seed):
    rnd = random.Random(seed)
    table, plain = RecordTable(), {}
    next_id = 1000
    for _ in range(3000):
        r = rnd.random()
        if r < 0.5 or not plain:
            next_id += 1
            rid = next_id if rnd.random() < 0.9 else rnd.randint(1, next_id)
            table[rid] = plain[rid] = rec(rnd, rid)
        elif r < 0.65:
            rid = rnd.choice(list(plain))
            table[rid] = plain[rid] = rec(rnd, rid)
        elif r < 0.9:
            rid = rnd.choice(list(plain)) if rnd.random() < 0.9 else -5
            assert table.pop(rid, None) == plain.pop(rid, None)
        else:
            table.freeze()
        probe = rnd.randint(1, next_id + 2)
        assert (probe in table) == (probe in plain)
        assert table.get(probe) == plain.get(probe)
    assert len(table) == len(plain)
    assert list(table.items()) == sorted(plain.items())
    assert list(table) == sorted(plain)
    table.clear()
    assert len(table) == 0 and list(table.items()) == []
