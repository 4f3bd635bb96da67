"""FileJournal throughput figures (run with ``-m slow -s``).  Nothing is asserted about
speed: the numbers depend on the disk and on what else the machine runs."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

import pytest

from waystation.core.store.api import put
from waystation.core.store.journal import FileJournal

DATA = b"x" * 100


def fdatasync_ms(d: Path, n: int = 300) -> float:
    path = d / "probe"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, bytes(1 << 20))
        os.fsync(fd)
        t = time.perf_counter()
        for i in range(n):
            os.pwrite(fd, DATA, i * 128)
            os.fdatasync(fd)
        return (time.perf_counter() - t) / n * 1000
    finally:
        os.close(fd)
        path.unlink()


async def one_producer(d: Path, n: int = 2000) -> float:
    j = FileJournal(d)
    j.open()
    t = time.perf_counter()
    for i in range(n):
        fut = j.write([put(i, 1, DATA)], True)
        assert fut is not None
        await fut
    rate = n / (time.perf_counter() - t)
    await j.close()
    return rate


async def concurrent(d: Path, tasks: int = 16, per: int = 500) -> tuple[float, float]:
    j = FileJournal(d)
    j.open()

    async def worker(k: int) -> None:
        for i in range(per):
            fut = j.write([put(k * 1_000_000 + i, 1, DATA)], True)
            assert fut is not None
            await fut

    t = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(tasks)))
    rate = tasks * per / (time.perf_counter() - t)
    per_fsync = tasks * per / j.stats()["fsyncs"]
    await j.close()
    return rate, per_fsync


async def no_sync(d: Path, n: int = 300_000) -> tuple[float, float]:
    j = FileJournal(d)
    j.open()
    batches = [[put(i, 1, DATA)] for i in range(n)]
    write = j.write
    t, cpu = time.perf_counter(), time.thread_time()
    for ops in batches:
        write(ops, False)
    await j.flush()
    rate = n / (time.perf_counter() - t)
    loop_us = (time.thread_time() - cpu) / n * 1e6
    await j.close()
    return rate, loop_us


@pytest.mark.slow
def test_print_throughput_figures() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        sync_ms = fdatasync_ms(base)
        single = asyncio.run(one_producer(base / "a"))
        many, per_fsync = asyncio.run(concurrent(base / "b"))
        bulk, loop_us = asyncio.run(no_sync(base / "c"))
    print(
        f"\nfdatasync {sync_ms:.3f} ms | one producer {single:,.0f} sync writes/s"
        f" | 16 producers {many:,.0f}/s ({many / single:.1f}x, {per_fsync:.1f} writes per fsync)"
        f" | no sync {bulk:,.0f} puts/s, {loop_us:.2f} us loop CPU each"
    )
