"""Fixed-bucket counts the journal writer keeps of its fsyncs and group commits, for the
metrics endpoint to read at scrape time (the store never imports a metrics library).

An observation is a few integer additions, done on the writer thread (or the event loop
thread when it writes inline); a reader takes a :meth:`Buckets.snapshot`, whose count is the
sum of its buckets so a histogram built from it is always consistent.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

# seconds an fdatasync takes: from a fast SSD's 100 us to a stalled disk's seconds
SYNC_BOUNDS: tuple[float, ...] = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025)
SYNC_BOUNDS += (0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# writes settled by one group commit
GROUP_BOUNDS: tuple[float, ...] = (
    1.0,
    2.0,
    4.0,
    8.0,
    16.0,
    32.0,
    64.0,
    128.0,
    256.0,
    512.0,
    1024.0,
)


@dataclass(frozen=True, slots=True)
class Snapshot:
    bounds: tuple[float, ...]
    counts: tuple[int, ...]  # per bucket, not cumulative; the last one is above every bound
    total: float

    @property
    def count(self) -> int:
        return sum(self.counts)


class Buckets:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def snapshot(self) -> Snapshot:
        return Snapshot(self.bounds, tuple(self.counts), self.total)


__all__ = ["GROUP_BOUNDS", "SYNC_BOUNDS", "Buckets", "Snapshot"]
