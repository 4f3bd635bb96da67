"""What a scrape reports per queue and per address, with a cap on how many series that is.

Why: names are made by clients (auto-created addresses, subscriptions), so one series per
name let a client grow every scrape without bound (100,000 series, 6 MB, a second of the
event loop while every other client waited).  A scrape now keeps the ``max_queue_series``
deepest queues and the ``max_address_series`` addresses holding the most bytes as series of
their own, and sums the rest into one series labelled ``_other``.  Picking them is one pass
over the names that gives the event loop back every :data:`CHUNK` names, so a scrape delays
other clients by one chunk's work at a time, whatever the number of names.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from waystation.core.postoffice import PostOffice
from waystation.core.queue import Queue

# the label of the series that sums the names without one of their own (a queue's summary
# has an empty routing label, which no real queue has, so it never repeats a real label set)
OTHER = "_other"
CHUNK = 512  # names looked at between two yields to the event loop (a few ms)


@dataclass(slots=True)
class QueueRow:
    """One queue's numbers (or the sum of several: ``name`` is then :data:`OTHER`)."""

    name: str
    address: str
    routing: str
    depth: int = 0
    in_flight: int = 0
    consumers: int = 0
    enqueued: int = 0
    acked: int = 0
    paused: int = 0
    expired: int = 0
    dead: Counter[str] = field(default_factory=Counter)

    def take(self, r: QueueRow) -> None:
        """Take away the numbers of a row that went into this sum."""
        self.depth -= r.depth
        self.in_flight -= r.in_flight
        self.consumers -= r.consumers
        self.enqueued -= r.enqueued
        self.acked -= r.acked
        self.paused -= r.paused
        self.expired -= r.expired
        self.dead.subtract(r.dead)


@dataclass(slots=True)
class Series:
    """A scrape's per-name part: the rows kept, and the sum of the others (None if none)."""

    queues: list[QueueRow]
    other_queues: QueueRow | None
    queue_count: int
    addresses: list[tuple[str, int]]
    other_addresses: int | None


async def queue_series(
    queues: Sequence[Queue], cap: int
) -> tuple[list[QueueRow], QueueRow | None, int]:
    """Rows for the ``cap`` deepest queues (ties: the first seen), the sum of the rest, and
    how many there are.  Temporary queues (one per subscriber connection) are left out."""
    total = QueueRow(OTHER, OTHER, "")
    dead_total = total.dead
    depth = flight = consumers = enqueued = acked = paused = expired = 0
    best: list[tuple[int, int, QueueRow]] = []  # a min-heap of (depth, -seen, row)
    seen = 0
    for start in range(0, len(queues), CHUNK):
        if start:
            await asyncio.sleep(0)
        for q in queues[start : start + CHUNK]:
            if q.temporary:
                continue
            # read once: the row and the total agree (nothing else runs within a chunk)
            d, cs = q.depth, q.consumers
            f = sum(len(c.in_flight) for c in cs) if cs else 0
            e, a, p, x = (
                q.messages_added,
                q.messages_acked,
                1 if q.paused else 0,
                q.messages_expired,
            )
            dead = q.dead_lettered_so_far
            depth += d
            flight += f
            consumers += len(cs)
            enqueued += e
            acked += a
            paused += p
            expired += x
            if dead:
                dead_total.update(dead)
            seen += 1
            if len(best) < cap or (cap and d > best[0][0]):
                row = QueueRow(
                    q.name, q.address, q.routing, d, f, len(cs), e, a, p, x, Counter(dead or ())
                )
                if len(best) < cap:
                    heapq.heappush(best, (d, -seen, row))
                else:
                    heapq.heapreplace(best, (d, -seen, row))
    rows = [r for _d, _s, r in sorted(best, reverse=True)]
    if seen <= cap:
        return rows, None, seen
    total.depth, total.in_flight, total.consumers = depth, flight, consumers
    total.enqueued, total.acked, total.paused, total.expired = enqueued, acked, paused, expired
    for r in rows:
        total.take(r)
    total.dead = Counter({k: v for k, v in total.dead.items() if v})
    return rows, total, seen


async def address_series(post: PostOffice, cap: int) -> tuple[list[tuple[str, int]], int | None]:
    """(address, memory bytes) for the ``cap`` addresses holding most (ties: the first seen),
    and the sum of the rest (None when every address has its own)."""
    memory_bytes = post.memory_bytes  # a read: post.usage() would add an entry each
    names = list(post.addresses)
    best: list[tuple[int, int, str]] = []  # a min-heap of (bytes, -seen, name)
    total = 0
    for start in range(0, len(names), CHUNK):
        if start:
            await asyncio.sleep(0)
        for i, name in enumerate(names[start : start + CHUNK], start):
            n = memory_bytes(name)
            total += n
            if len(best) < cap:
                heapq.heappush(best, (n, -i, name))
            elif cap and n > best[0][0]:
                heapq.heapreplace(best, (n, -i, name))
    rows = [(name, n) for n, _i, name in sorted(best, reverse=True)]
    if len(names) <= cap:
        return rows, None
    # an address really named _other goes into the sum: two series with one label set
    # would make Prometheus refuse the whole scrape
    rows = [r for r in rows if r[0] != OTHER]
    return rows, total - sum(n for _a, n in rows)


# (family, type, help, the row's field); counters get ``_total`` on their samples
QUEUE_FAMILIES = (
    ("queue_messages", "gauge", "Messages waiting (memory, paged, scheduled).", "depth"),
    ("queue_in_flight", "gauge", "Messages delivered and not yet settled.", "in_flight"),
    ("queue_consumers", "gauge", "Consumers attached.", "consumers"),
    ("queue_enqueued", "counter", "Messages added to the queue.", "enqueued"),
    ("queue_acked", "counter", "Messages acknowledged from the queue.", "acked"),
    ("queue_paused", "gauge", "1 while an operator has paused delivery.", "paused"),
    ("queue_expired", "counter", "Messages that expired in the queue.", "expired"),
)


def _label(v: str) -> str:
    """A label value in the text format: backslash, double quote and newline escaped."""
    if "\\" in v or '"' in v or "\n" in v:
        v = v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return v


def exposition(found: Series, prefix: str) -> str:
    """The per-queue and per-address families in the Prometheus text format, written here
    rather than by prometheus_client, whose per-label checks made a scrape of a few thousand
    series hold the event loop for over 100 ms."""
    rows = found.queues if found.other_queues is None else [*found.queues, found.other_queues]
    # labels in name order, as prometheus_client writes them
    labels = [(f'address="{_label(r.address)}",queue="{_label(r.name)}"', r.routing) for r in rows]
    out: list[str] = []
    for family, kind, doc, attr in QUEUE_FAMILIES:
        name = prefix + family + ("_total" if kind == "counter" else "")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        out.extend(
            f'{name}{{{lv},routing="{_label(rt)}"}} {getattr(r, attr)}\n'
            for r, (lv, rt) in zip(rows, labels, strict=True)
        )
    name = prefix + "queue_dead_lettered_total"
    out.append(f"# HELP {name} Messages dead-lettered from the queue, by reason.\n")
    out.append(f"# TYPE {name} counter\n")
    for r, (lv, rt) in zip(rows, labels, strict=True):
        out.extend(
            f'{name}{{{lv},reason="{_label(k)}",routing="{_label(rt)}"}} {n}\n'
            for k, n in r.dead.items()
        )
    name = prefix + "queues"
    out.append(f"# HELP {name} Queues (temporary ones left out), with a series or in _other.\n")
    out.append(f"# TYPE {name} gauge\n{name} {found.queue_count}\n")
    name = prefix + "address_memory_bytes"
    out.append(
        f"# HELP {name} Bytes of message data an address's queues hold in memory (paged "
        f"ones excluded).\n# TYPE {name} gauge\n"
    )
    out.extend(f'{name}{{address="{_label(a)}"}} {n}\n' for a, n in found.addresses)
    if found.other_addresses is not None:
        out.append(f'{name}{{address="{OTHER}"}} {found.other_addresses}\n')
    return "".join(out)


async def series(post: PostOffice, max_queues: int, max_addresses: int) -> Series:
    queues, other_q, count = await queue_series(list(post.queues.values()), max_queues)
    addresses, other_a = await address_series(post, max_addresses)
    return Series(queues, other_q, count, addresses, other_a)


__all__ = [
    "CHUNK",
    "OTHER",
    "QueueRow",
    "Series",
    "address_series",
    "exposition",
    "queue_series",
    "series",
]
