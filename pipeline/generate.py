"""Realistic multi-site event logs with known faults, for the tests and the benchmark.

Sites send to local queues and, over bridges (``sf.<peer>`` store-and-forward queues), to
queues on other sites.  Link cuts hold forwarding back (the backlog grows, then drains);
some messages are redelivered before their ack.  Faults are injected in known numbers and
their trace ids returned, so a test can demand the job finds exactly those:

* ``lost``: forwarded by the bridge, never accepted by the remote;
* ``duplicated``: accepted and acknowledged twice at the remote (a resend not recognised);
* ``dead_lettered``: delivered ``max-deliveries`` times, then dead-lettered (copy in DLQ);
* ``expired``: expired in its destination queue;
* ``in_flight``: still in a store-and-forward queue (a cut at the end) or in a queue.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from waystation.core.events import FIELD_NAMES, SCHEMA_VERSION, arrow_schema

FAULTS = ("lost", "duplicated", "dead_lettered", "expired", "in_flight")
_CHUNK = 500_000  # rows per written chunk (bounded memory for 10 million events)


@dataclass
class Truth:
    """What was generated: trace ids per status, and the number of events."""

    status: dict[str, set[str]] = field(default_factory=lambda: {s: set() for s in FAULTS})
    events: int = 0
    messages: int = 0

    def count(self, status: str) -> int:
        if status == "delivered":
            return self.messages - sum(len(v) for v in self.status.values())
        return len(self.status[status])


class _Node:
    """Columns of one node's log, flushed to numbered files in chunks."""

    def __init__(self, name: str, folder: Path, fmt: str) -> None:
        self.name = name
        self.folder = folder
        self.fmt = fmt
        self.seq = 0
        self.rows: list[tuple[object, ...]] = []
        self.ids = (1_700_000_000_000 + random.randrange(10_000)) << 16
        folder.mkdir(parents=True, exist_ok=True)

    def new_id(self) -> int:
        self.ids += 1
        return self.ids

    def add(self, ts: int, event: str, tid: str, mid: int, address: str, queue: str | None,
            size: int, durable: bool, dc: int | None = None, reason: str | None = None,
            peer: str | None = None, proto: str | None = None) -> None:  # fmt: skip
        sess = "stomp-1" if proto else None
        self.rows.append((SCHEMA_VERSION, ts, self.name, event, tid, mid, address, queue, proto,
                          sess, size, durable, dc, reason, peer))  # fmt: skip
        if len(self.rows) >= _CHUNK:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        self.rows.sort(key=lambda r: r[1])  # type: ignore[arg-type, return-value]
        self.seq += 1
        cols = list(zip(*self.rows, strict=True))
        self.rows = []
        path = self.folder / f"events-{self.seq:06d}.{self.fmt}"
        if self.fmt == "parquet":
            table = pa.table(dict(zip(FIELD_NAMES, cols, strict=True)), schema=arrow_schema())
            pq.write_table(table, path)
        else:
            import json

            with path.open("w") as f:
                for row in zip(*cols, strict=True):
                    f.write(json.dumps(dict(zip(FIELD_NAMES, row, strict=True))) + "\n")


def generate(
    out: str | Path,
    messages: int = 1000,
    *,
    sites: int = 3,
    faults: dict[str, int] | None = None,
    minutes: int = 10,
    fmt: str = "jsonl",
    seed: int = 1,
    cuts: int = 2,
) -> Truth:
    """Write logs of ``sites`` nodes under ``out/<node>/`` and return what they hold.
    ``faults`` maps a name of :data:`FAULTS` to how many messages get it."""
    rnd = random.Random(seed)
    random.seed(seed)
    out = Path(out)
    names = [f"site-{chr(ord('a') + i)}" for i in range(sites)]
    nodes = {n: _Node(n, out / n, fmt) for n in names}
    want = dict.fromkeys(FAULTS, 0) | (faults or {})
    if sum(want.values()) > messages:
        raise ValueError("more faults than messages")
    plan = [f for f, k in want.items() for _ in range(k)]
    plan += [""] * (messages - len(plan))
    rnd.shuffle(plan)
    t0 = 1_795_000_000_000_000
    span = minutes * 60_000_000
    # link cuts: per (origin, peer) a few windows in which nothing is forwarded
    cut_windows = {
        (a, b): sorted(
            (s := rnd.randrange(span), s + rnd.randrange(5_000_000, 60_000_000))
            for _ in range(cuts)
        )
        for a in names
        for b in names
        if a != b
    }
    truth = Truth(messages=messages)
    for i, fault in enumerate(plan):
        origin = names[i % sites]
        remote = fault in ("lost", "duplicated") or (sites > 1 and rnd.random() < 0.6)
        dest = rnd.choice([n for n in names if n != origin]) if remote and sites > 1 else origin
        queue = rnd.choice(("orders", "payments", "telemetry"))
        durable = rnd.random() < 0.8
        size = rnd.randrange(100, 4000)
        ts = t0 + i * span // messages
        a = nodes[origin]
        mid = a.new_id()
        tid = f"{origin}/{mid}"
        events = 0

        def ev(node: _Node, when: int, event: str, m: int, addr: str, q: str | None,
               **kw: object) -> None:  # fmt: skip
            nonlocal events
            node.add(when, event, tid, m, addr, q, size, durable, **kw)  # type: ignore[arg-type]  # noqa: B023
            events += 1

        # waiting in its destination queue (else: in the store-and-forward queue)
        in_flight_here = fault == "in_flight" and (dest == origin or rnd.random() < 0.5)
        if dest != origin:
            b = nodes[dest]
            sf = f"sf.{dest}"
            ev(a, ts, "accepted", mid, f"{dest}::{queue}", None, proto="stomp")
            ev(a, ts + 80, "routed", mid, sf, sf)
            if durable:
                ev(a, ts + 2_000, "stored", mid, sf, None)
            if fault == "in_flight" and not in_flight_here:
                truth.status["in_flight"].add(tid)  # never forwarded: cut at the end
                truth.events += events
                continue
            t = ts + 500 + int(rnd.expovariate(1 / 3_000))
            for s, e in cut_windows[(origin, dest)]:
                if s <= t - t0 < e:
                    t = t0 + e + rnd.randrange(1_000, 50_000)  # held until the link is back
            ev(a, t, "delivered", mid, sf, sf, dc=1)
            copies = 2 if fault == "duplicated" else 1
            racc = t + 1_000 + int(rnd.expovariate(1 / 8_000))
            fwd = racc + 1_000 + int(rnd.expovariate(1 / 4_000))
            ev(a, fwd, "forwarded", mid, sf, sf, peer=dest)
            ev(a, fwd + 100, "acked", mid, sf, sf, dc=1)
            if fault == "lost":
                truth.status["lost"].add(tid)
                truth.events += events
                continue
            node, at = b, racc
            for c in range(copies):
                rid = b.new_id()
                at2 = at + c * 3_000_000
                ev(b, at2, "accepted", rid, queue, None, proto="core")
                ev(b, at2 + 60, "routed", rid, queue, queue)
                if durable:
                    ev(b, at2 + 1_500, "stored", rid, queue, None)
            mid = rid
        else:
            node, at = a, ts
            ev(a, ts, "accepted", mid, queue, None, proto="stomp")
            ev(a, ts + 60, "routed", mid, queue, queue)
            if durable:
                ev(a, ts + 1_500, "stored", mid, queue, None)
            copies = 1
        if fault in ("expired", "dead_lettered"):
            truth.status[fault].add(tid)
        # the consuming side at `node`
        d = at + 2_000 + int(rnd.expovariate(1 / 20_000))
        if in_flight_here:
            truth.status["in_flight"].add(tid)
        elif fault == "expired":
            ev(node, d + 30_000_000, "expired", mid, queue, queue, reason="expired")
        elif fault == "dead_lettered":
            for n in range(1, 4):
                ev(node, d, "delivered", mid, queue, queue, dc=n)
                ev(node, d + 1_000, "redelivered" if n < 3 else "released", mid, queue,
                   queue, dc=n)  # fmt: skip
                d += 5_000
            ev(node, d, "dead_lettered", mid, queue, queue, dc=3, reason="max-deliveries")
            dlq = node.new_id()
            ev(node, d + 50, "routed", dlq, "DLQ", "DLQ")
        else:
            for c in range(copies):
                dd = d + c * 3_000_000
                ev(node, dd, "delivered", mid, queue, queue, dc=1, proto="stomp")
                ev(node, dd + 500 + int(rnd.expovariate(1 / 1_000)), "acked", mid, queue, queue,
                   dc=1, proto="stomp")  # fmt: skip
            if fault == "duplicated":
                truth.status["duplicated"].add(tid)
        truth.events += events
    for site in nodes.values():
        site.flush()
    return truth
