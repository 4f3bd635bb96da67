"""SpillFile: a disk FIFO of blobs with segment rotation and cleanup."""

from __future__ import annotations

import os
import random
from pathlib import Path

from waystation.core.store.spill import SpillFile


def segments(d: Path) -> list[str]:
    return sorted(p.name for p in d.glob("spill-*.seg"))


def test_fifo_order_counts_and_bytes(tmp_path: Path) -> None:
    s = SpillFile(tmp_path / "q")
    blobs = [b"m%d" % i * (i % 7 + 1) for i in range(100)]
    for b in blobs:
        s.append(b)
    assert len(s) == 100 and s.bytes_held == sum(map(len, blobs))
    got = s.read(30, 1 << 20)
    assert got == blobs[:30]
    assert len(s) == 70 and s.bytes_held == sum(map(len, blobs[30:]))
    s.append(b"tail")  # appending while reading the same segment
    got += s.read(1000, 1 << 20)
    assert got == [*blobs, b"tail"] and len(s) == 0 and s.bytes_held == 0
    assert s.read(10, 100) == []
    s.close()


def test_max_bytes_and_max_count_limit_a_read(tmp_path: Path) -> None:
    s = SpillFile(tmp_path)
    for i in range(10):
        s.append(bytes([i]) * 100)
    assert len(s.read(3, 10_000)) == 3
    assert [b[0] for b in s.read(100, 250)] == [3, 4]  # a third would pass max_bytes
    assert [b[0] for b in s.read(100, 1)] == [5]  # but one blob always comes out
    assert s.read(0, 10_000) == []
    assert len(s) == 4
    s.close()


def test_segments_rotate_and_are_deleted_once_read(tmp_path: Path) -> None:
    s = SpillFile(tmp_path, segment_size=1000)
    for i in range(50):
        s.append(b"%03d" % i + bytes(97))
    assert len(segments(tmp_path)) >= 5
    first = segments(tmp_path)[0]
    s.read(15, 1 << 20)  # more than the first segment holds
    assert first not in segments(tmp_path)
    rest = s.read(1000, 1 << 20)
    assert [int(b[:3]) for b in rest] == list(range(15, 50))
    assert segments(tmp_path) == []  # everything read: nothing left on disk
    s.append(b"again")
    assert s.read(5, 100) == [b"again"]
    s.close()


def test_interleaved_random_use_matches_a_list(tmp_path: Path) -> None:
    rng = random.Random(7)
    s = SpillFile(tmp_path, segment_size=4096)
    model: list[bytes] = []
    for _ in range(3000):
        if rng.random() < 0.55:
            b = os.urandom(rng.randrange(0, 600))
            s.append(b)
            model.append(b)
        else:
            count, limit = rng.randrange(1, 20), rng.randrange(1, 3000)
            got = s.read(count, limit)
            assert got == model[: len(got)]
            if model:
                assert 1 <= len(got) <= count
                assert len(got) == 1 or sum(map(len, got)) <= limit
            del model[: len(got)]
        assert len(s) == len(model) and s.bytes_held == sum(map(len, model))
    s.close()
    assert not tmp_path.exists() or segments(tmp_path) == []


def test_close_deletes_or_keeps_and_reopen_starts_empty(tmp_path: Path) -> None:
    d = tmp_path / "spill"
    s = SpillFile(d)
    s.append(b"x" * 10)
    s.close(delete=False)
    assert segments(d)
    s = SpillFile(d)  # not durable: a new spill discards what an old run left
    assert len(s) == 0 and segments(d) == []
    s.append(b"y")
    s.close()
    assert not d.exists()
