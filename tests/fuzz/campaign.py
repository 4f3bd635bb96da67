"""A node fuzzer's run and its verdict.

Every fuzzer drives ``waystation run`` (security on) the same way: a warm-up batch, then
the baseline (RSS and open file descriptors, once the node has settled), then batches of
cases, each followed by a round trip of the bystander (a STOMP client connected since the
start, another user) and a fresh ``probe`` of the surface under fuzz, both within
ANSWER_SECONDS.  The verdict (:func:`check`): no connection held open after the client's
FIN; descriptors back at the baseline and RSS within RSS_MARGIN_KIB of it once every
connection is closed and the node has settled; no HTTP 5xx but 503; no ERROR record or
traceback in the node log but those of KNOWN bugs.  A failure names the seed;
``FUZZ_SEED=<n>`` replays it.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field

from fuzz.fuzzkit import ANSWER_SECONDS, Batch, Bystander, FuzzNode, Tally, bounded

SETTLE_SECONDS = 20.0  # connections closed by both sides, sessions ended (LINGER is 2 s)
FD_SLACK = 4  # descriptors the node may hold beyond the baseline (its own files, a timer fd)
# RSS after the run may exceed the baseline (taken after a warm-up batch) by this much.  The
# node runs the cyclic GC only every 50,000 allocations (gateway/gc_policy.py), so garbage
# of that many allocations may be outstanding at any time, and CPython's and glibc's arenas
# keep what they once held.  Closed TCP connections no longer wait for the collector
# (tests/gateway/test_connection_memory.py): the default runs of STOMP, MQTT and AMQP end
# 0 to 4 MiB up.  The HTTP fuzzers end higher, +3 to +9 MiB (tunnel), +11 to +12 MiB
# (WebSocket) and +12 to +14 MiB (REST XML), from cycles the collector still frees: aiohttp
# keeps each raised HTTPException (an error answer) in a cycle with its handler's frame, the
# request and the connection, and STOMP subscriptions and tunnel links are cycles too
# (with GEN0 at CPython's 700 those runs end +1 to +3 MiB).  A leak of 20 MiB over a run
# fails: 1 KiB a case in the long runs (20,000+), 20 KiB in the default ones (1,000).
RSS_MARGIN_KIB = 20 * 1024


@dataclass
class Report:
    label: str
    seed: int
    tally: Tally
    cases: int = 0
    seconds: float = 0.0
    rss_before: int = 0
    rss_after: int = 0
    rss_peak: int = 0
    rss: list[int] = field(default_factory=list)  # after each batch
    fds_before: int = 0
    fds_after: int = 0
    bystander: list[float] = field(default_factory=list)
    probes: list[float] = field(default_factory=list)

    def line(self) -> str:
        rt = sorted(self.bystander) or [0.0]
        p99 = rt[min(len(rt) - 1, int(len(rt) * 0.99))]
        return (
            f"fuzz {self.label}: {self.cases} cases in {self.seconds:.1f}s (seed {self.seed}); "
            f"node RSS {self.rss_before // 1024}->{self.rss_after // 1024} MiB "
            f"(peak {self.rss_peak // 1024}), fds {self.fds_before}->{self.fds_after}; "
            f"bystander round trip median {statistics.median(rt) * 1000:.0f} ms, "
            f"p99 {p99 * 1000:.0f} ms, max {rt[-1] * 1000:.0f} ms; probe max "
            f"{max(self.probes, default=0) * 1000:.0f} ms; "
            f"closed by node {self.tally.closed_by_node}, quiet {self.tally.quiet}, "
            f"reset {self.tally.reset}, refused {self.tally.refused}; "
            + (f"HTTP {dict(sorted(self.tally.statuses.items()))}; " if self.tally.statuses else "")
            + "case seconds "
            + ", ".join(f"{k} {v:.0f}" for k, v in sorted(self.tally.seconds.items()))
        )


CI_SEED = 20261128  # CI's default run explores the same cases each time (a fresh seed
# there would turn every newly found bug into a failed landing; `-m slow` and local runs
# still draw a fresh seed each time)


def fuzz_seed() -> int:
    """``FUZZ_SEED`` when set (to replay a failure); under CI (``CI`` set) ``CI_SEED``; else
    a fresh one."""
    if os.environ.get("FUZZ_SEED"):
        return int(os.environ["FUZZ_SEED"])
    if os.environ.get("CI"):
        return CI_SEED
    return random.SystemRandom().randrange(2**32)


async def _settle(node: FuzzNode, fds: int) -> int:
    """Wait until the node's descriptors are back to ``fds`` (+ slack); the count then."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while (now := node.fds()) > fds + FD_SLACK and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    await asyncio.sleep(0.5)  # timers of the last sessions, the allocator's trims
    return min(now, node.fds())


async def fuzz(
    node: FuzzNode,
    label: str,
    seed: int,
    batches: Iterable[Batch],
    probe: Callable[[], Awaitable[None]],
    tally: Tally,
    concurrency: int = 16,
) -> Report:
    """Run ``batches`` (the first is the warm-up) against ``node``, their jobs counting
    into ``tally``; see the module doc."""
    report = Report(label, seed, tally)
    try:
        await _run(node, report, iter(batches), probe, concurrency)
    except BaseException as e:
        e.add_note(f"fuzz {label}: seed {seed} (FUZZ_SEED={seed} replays it), log {node.log_path}")
        raise
    report.fds_after = await _settle(node, report.fds_before)
    report.rss_after = node.rss_kib()
    print(report.line())
    return report


async def _run(
    node: FuzzNode,
    report: Report,
    it: Iterator[Batch],
    probe: Callable[[], Awaitable[None]],
    concurrency: int,
) -> None:
    tally = report.tally
    async with Bystander(node.stomp_port) as by:
        await bounded(next(it), concurrency)
        warm = tally.cases
        report.fds_before = await _settle(node, node.fds())
        report.rss_before = report.rss_peak = node.rss_kib()
        t0 = time.monotonic()
        for jobs in it:
            await bounded(jobs, concurrency)
            report.cases = tally.cases - warm
            assert node.alive(), f"the node died; see {node.log_path}"
            report.bystander.append(await by.round_trip())
            p0 = time.monotonic()
            try:
                await asyncio.wait_for(probe(), ANSWER_SECONDS)
            except TimeoutError:
                raise AssertionError(f"probe unanswered within {ANSWER_SECONDS}s") from None
            report.probes.append(time.monotonic() - p0)
            report.rss.append(node.rss_kib())
            report.rss_peak = max(report.rss_peak, report.rss[-1])
        report.seconds = time.monotonic() - t0


def check(report: Report, node: FuzzNode) -> None:
    """The promises of the module doc, each failure naming the seed."""
    r, t = report, report.tally
    where = f"{r.label} (seed {r.seed}; FUZZ_SEED={r.seed} replays it)"
    unknown, known = log_problems(node.log())
    failed = {code: n for code, n in t.statuses.items() if code >= 500 and code != 503}
    failed[500] = failed.get(500, 0) - sum(known[name] for name in ANSWER_500)  # theirs
    assert max(failed.values()) <= 0, f"{where}: the node answered {failed} (status: count)"
    if any(known.values()):
        print(
            f"fuzz {r.label}: known bugs in the node log: { ({k: n for k, n in known.items() if n}) }"
        )
    assert not unknown, (
        f"{where}: {len(unknown)} errors in the node log ({node.log_path}), the first:\n"
        + unknown[0][:3000]
    )
    assert not t.held, f"{where}: {len(t.held)} connections held after FIN, e.g. {t.held[:3]}"
    assert r.fds_after <= r.fds_before + FD_SLACK, (
        f"{where}: descriptors {r.fds_before} -> {r.fds_after}: connections not released"
    )
    grown = r.rss_after - r.rss_before
    assert grown <= RSS_MARGIN_KIB, (
        f"{where}: RSS grew by {grown} KiB ({r.rss_before} -> {r.rss_after}) over "
        f"{r.cases} cases; the bound is {RSS_MARGIN_KIB} KiB (closed connections kept as "
        "garbage cycles do this; see tests/gateway/test_connection_memory.py)"
    )


# Errors the fuzzers found in the node and that are routed, each reproduced by a strict
# xfail in test_found.py: when one is fixed its xfail passes (a failure, being strict), and
# its entry here goes with the xfail marker.
KNOWN: dict[str, re.Pattern[str]] = {}
ANSWER_500: tuple[str, ...] = ()
_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ +(\w+) ", re.M)


def log_problems(log: str) -> tuple[list[str], dict[str, int]]:
    """The node log's ERROR and CRITICAL records and tracebacks: (unknown ones, count of
    each KNOWN one)."""
    unknown: list[str] = []
    known = dict.fromkeys(KNOWN, 0)
    starts = [m.start() for m in _RECORD.finditer(log)] + [len(log)]
    for a, b in zip(starts, starts[1:], strict=False):
        record = log[a:b]
        level = _RECORD.match(record)
        if not (level and level.group(1) in ("ERROR", "CRITICAL")) and "Traceback" not in record:
            continue
        hit = next((name for name, rx in KNOWN.items() if rx.search(record)), None)
        if hit is None:
            unknown.append(record)
        else:
            known[hit] += 1
    return unknown, known
