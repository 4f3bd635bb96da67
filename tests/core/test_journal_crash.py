"""kill -9 a process writing to a FileJournal at random moments; nothing acknowledged is lost.

The child runs several asyncio tasks, each owning its own keys, writing atomic batches of
random puts and deletes (content derived from key and version, so any record can be checked
on its own).  It prints ``W`` before a write and ``A`` after its future resolved.  The
parent kills it, reopens the directory and checks, per task, that the recovered keys equal
the state after some prefix of the task's batches that includes every acknowledged one:
acknowledged puts present with exactly the right bytes, acknowledged deletes still deleted,
nothing invented, no batch half-applied, records in first-put order.  Small files make rollover, reclaim, big-batch
files and compaction happen during the run.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from waystation.core.store.journal import FileJournal

ROOT = Path(__file__).resolve().parents[2]
TASKS = 6
KEYS = 25
JOURNAL_KW = {"file_size": 8192, "min_files": 2, "compact_min_files": 4, "compact_percentage": 60}


def content(rid: int, ver: int) -> bytes:
    """Deterministic record bytes; now and then bigger than a journal file."""
    n = 9000 if ver % 89 == 0 else 10 + (ver * 7 + rid) % 300
    h = hashlib.blake2b(b"%d:%d" % (rid, ver)).digest()
    return b"%d:%d:" % (rid, ver) + (h * (n // len(h) + 1))[:n]


CHILD = r"""
import asyncio, random, sys
root, directory, seed, cycle = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sys.path.insert(0, root)
sys.path.insert(0, root + "/tests/core")
from waystation.core.store.api import delete, put
from waystation.core.store.journal import FileJournal
from test_journal_crash import JOURNAL_KW, KEYS, TASKS, content

async def main():
    j = FileJournal(directory, **JOURNAL_KW)
    j.open()
    print("R", flush=True)

    async def stats():
        while True:
            print("S", j.stats()["compactions"], flush=True)
            await asyncio.sleep(0.02)

    async def task(t):
        rng = random.Random(seed * 1000 + cycle * 10 + t)
        keys = [t * 1000 + k for k in range(KEYS)]
        i = 0
        while True:
            i += 1
            ops, desc = [], []
            for n in range(rng.choice((1, 1, 1, 2, 3))):
                k = rng.choice(keys)
                if rng.random() < 0.3:
                    ops.append(delete(k))
                    desc.append("D%d" % k)
                else:
                    v = cycle * 10_000_000 + t * 1_000_000 + i * 4 + n
                    ops.append(put(k, 7, content(k, v)))
                    desc.append("P%d:%d" % (k, v))
            sync = rng.random() < 0.8
            print("W", t, i, *desc, flush=True)
            fut = j.write(ops, sync)
            if fut is not None:
                await fut
                print("A", t, i, flush=True)
            else:
                await asyncio.sleep(0)

    asyncio.get_running_loop().create_task(stats())
    await asyncio.gather(*(task(t) for t in range(TASKS)))

asyncio.run(main())
"""


def apply(state: dict[int, int], ops: list[str]) -> dict[int, int]:
    out = dict(state)
    for op in ops:
        if op[0] == "D":
            out.pop(int(op[1:]), None)
        else:
            rid, ver = op[1:].split(":")
            out[int(rid)] = int(ver)
    return out


def run_child(directory: Path, seed: int, cycle: int, rng: random.Random) -> list[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(ROOT), str(directory), str(seed), str(cycle)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lines: list[str] = []
    ready = threading.Event()

    def reader() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            if raw.endswith(b"\n"):
                lines.append(raw.decode().rstrip("\n"))
                ready.set()

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    if not ready.wait(30):
        proc.kill()
        raise AssertionError(f"child did not start: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
    time.sleep(rng.uniform(0.05, 0.5))
    alive = proc.poll() is None
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    th.join(10)
    err = proc.stderr.read().decode()  # type: ignore[union-attr]
    assert alive, f"child died on its own: {err}"
    return lines


def check(directory: Path, model: dict[int, int], lines: list[str]) -> tuple[dict[int, int], bool]:
    """Verify the recovered journal against the child's log; returns the new model."""
    intents: dict[int, list[list[str]]] = {t: [] for t in range(TASKS)}
    acked = dict.fromkeys(range(TASKS), 0)
    for line in lines:
        kind, *rest = line.split()
        if kind == "W":
            t, i = int(rest[0]), int(rest[1])
            assert i == len(intents[t]) + 1
            intents[t].append(rest[2:])
        elif kind == "A":
            t, i = int(rest[0]), int(rest[1])
            assert i > acked[t]
            acked[t] = i
    j = FileJournal(directory, **JOURNAL_KW)  # type: ignore[arg-type]
    rec = j.open()
    asyncio.run(j.close())
    assert not rec.report.corrupt, rec.report
    recovered: dict[int, int] = {}
    for rid, r in rec.records.items():
        head = r.data.split(b":", 2)
        assert int(head[0]) == rid and r.rtype == 7, (rid, r)
        ver = int(head[1])
        assert r.data == content(rid, ver), f"record {rid} holds bytes never written"
        recovered[rid] = ver
    new_model: dict[int, int] = {}
    for t in range(TASKS):
        mine = {rid: v for rid, v in recovered.items() if rid // 1000 == t}
        state = {rid: v for rid, v in model.items() if rid // 1000 == t}
        ok = False
        for i, ops in enumerate([[], *intents[t]]):
            state = apply(state, ops)
            if i >= acked[t] and list(state.items()) == list(mine.items()):  # order too
                ok = True
                break
        assert ok, f"task {t}: recovered {mine} is no prefix covering ack {acked[t]}"
        new_model.update(mine)
    assert set(recovered) == set(new_model), "records outside every task's keys"
    return new_model, rec.report.torn_tail is not None


def crash_cycles(tmp_path: Path, cycles: int) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    model: dict[int, int] = {}
    compactions = torn = acks = 0
    for cycle in range(cycles):
        lines = run_child(tmp_path, seed, cycle, rng)
        acks += sum(1 for ln in lines if ln.startswith("A"))
        compactions += max((int(ln.split()[1]) for ln in lines if ln[0] == "S"), default=0)
        try:
            model, was_torn = check(tmp_path, model, lines)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed} cycle {cycle}: {exc}") from exc
        torn += was_torn
    print(f"seed {seed}: {cycles} kills, {acks} acks, {compactions} compactions, {torn} torn")
    assert acks > cycles * 5
    assert compactions > 0


def test_kill_9_loses_nothing_acknowledged(tmp_path: Path) -> None:
    crash_cycles(tmp_path, 15)


@pytest.mark.slow
def test_kill_9_soak(tmp_path: Path) -> None:
    crash_cycles(tmp_path, 150)
