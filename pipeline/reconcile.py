"""The reconcile job: one status per message across every node's log, flow figures per route.

A message is followed by its ``trace_id`` (set where it first entered, kept across bridges).
Its fate is judged per *queue reference* ``(trace, node, queue)`` and the worst one wins
(the rules: :mod:`waystation.pipeline.verdicts`):

* a destination queue (not ``sf.*``) is done when acknowledged; routed or acknowledged more
  than once there is ``duplicated``; a ``dead_lettered`` or ``expired`` event ends it so;
* a store-and-forward queue ``sf.<peer>`` is done when forwarded, acknowledged, or when the
  peer's log shows the trace (the ``forwarded`` record may have died in a crashed writer's
  buffer); forwarded to a peer whose log is given but has no trace of it is ``lost``;
* a reference with no end is ``in_flight`` (still in the queue at the end of the logs), or
  ``lost`` when the message was non-durable and its node restarted after its last event
  (restarts are seen in the message ids: :class:`~waystation.core.message.IdGenerator`
  starts each run at ``now_ms << 16``).

Precedence: duplicated > dead_lettered > expired > lost > in_flight > delivered.  A trace
whose only fate is a ``dropped`` event (no route, address full, a duplicate resend with a new
trace) is ``dropped`` with that reason; accepted and then nothing at all is ``lost``.

The plan, for CPU on a small machine (docs/pipeline.md): a small overview pass (nodes,
restarts, the address, reason and queue strings, the backlog), then the events are
shuffled once by trace and aggregated per ``(trace, node, queue)`` and per trace, in the
same stage, with number-only (code-generated) buffers: :func:`fast_messages`.  The few
traces it cannot finish exactly (a detail text to write, many destinations) are judged
again from their own events by the plain plan (:func:`queue_refs`, :func:`messages`),
which keeps each trace's references as an array.  Routes and latencies come from the
written ``messages/``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import Column, DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F

from waystation.core.names import SF_PREFIX
from waystation.pipeline import verdicts as V

STATUSES = (
    "delivered",
    "in_flight",
    "lost",
    "expired",
    "dead_lettered",
    "duplicated",
    "dropped",
)

#: A jump of the id generator's millisecond part larger than this between consecutive ids
#: seen in one node's log is a restart: within a run it moves 1 ms per 65,536 ids, so 100 ms
#: means 6.5 million ids minted without one event logged, while a node's restart (a Python
#: process start) alone takes longer than 100 ms.
RESTART_GAP_MS = 100

#: ``percentile_approx`` accuracy: exact up to half this many messages per route and
#: minute.  At 1,000 the sketch merged per partition, so a figure moved with the plan's
#: partitioning (the same logs gave other p99s after any change to the job).
PERCENTILE_ACCURACY = 100_000

#: Latency stages: from the origin's ``accepted`` to ...
STAGES = ("forward", "remote_accept", "delivery", "ack")

#: Event names as small codes before the shuffle (fewer bytes, integer comparisons).
_CODES = ("accepted", "routed", "delivered", "acked", "forwarded", "dead_lettered", "expired",
          "dropped")  # fmt: skip
ACC, ROUTED, DELIVERED, ACKED, FORWARDED, DEAD, EXPIRED, DROPPED = range(len(_CODES))


@dataclass
class Result:
    """What a run produced: counts per status and where each stage's time went."""

    out: Path
    summary: dict[str, object]
    timings: dict[str, float] = field(default_factory=dict)


def _h(col: Column) -> Column:
    """A string as a 64-bit hash (null stays null), turned back by :func:`_unhash`."""
    return F.when(col.isNotNull(), F.xxhash64(col))


def _is(code: int) -> Column:
    return F.col("e") == code


def _n(code: int) -> Column:
    return F.sum(F.when(_is(code), 1).otherwise(0))


def _first(code: int) -> Column:
    return F.min(F.when(_is(code), F.col("ts_us")))


def overview(ev: DataFrame) -> DataFrame:
    """One small aggregate for what the main pass needs up front (cache it): events per
    ``(node, run millisecond of the message id, address, reason, dead-lettered or not,
    queue, minute)``, ``minute`` only for store-and-forward queues, whose backlog change
    ``d`` (routed in minus out) it also sums, so the backlog needs no scan of its own."""
    sf = F.col("queue").startswith(SF_PREFIX)
    delta = F.when(F.col("event") == "routed", 1).when(
        F.col("event").isin("acked", "dead_lettered", "expired"), -1
    )
    return ev.groupBy(
        "node",
        F.shiftright(F.col("message_id"), 16).alias("s"),
        "address",
        "reason",
        (F.col("event") == "dead_lettered").alias("dead"),
        "queue",
        F.when(sf, (F.col("ts_us") / 60_000_000).cast("long")).alias("minute"),
    ).agg(F.count(F.lit(1)).alias("n"), F.sum(F.when(sf, delta)).alias("d"))


def run_starts(per_run: list[tuple[str, int]]) -> dict[str, int]:
    """Per node that restarted, the start (ms) of its last run seen in its message ids
    (``per_run``: the distinct ``(node, run millisecond)`` pairs of the overview)."""
    by_node: dict[str, list[int]] = {}
    for node, s in per_run:
        by_node.setdefault(node, []).append(s)
    out: dict[str, int] = {}
    for node, ss in by_node.items():
        ss.sort()
        gaps = [b for a, b in zip(ss, ss[1:], strict=False) if b - a > RESTART_GAP_MS]
        if gaps:
            out[node] = max(gaps)
    return out


def _unhash(df: DataFrame, strings: DataFrame, col: str) -> DataFrame:
    d = strings.select(F.col("h").alias(col), F.col("s").alias(f"{col}_s"))
    return df.join(F.broadcast(d), col, "left").drop(col).withColumnRenamed(f"{col}_s", col)


def _ref_aggs(journey: bool) -> list[Column]:
    """The per-``(trace, node, queue)`` aggregates: counts and first times, numbers only
    (plus the journey's events)."""
    aggs = [
        _n(ROUTED).alias("n_routed"),
        _n(ACKED).alias("n_acked"),
        _n(FORWARDED).alias("n_forwarded"),
        _n(DEAD).alias("n_dead"),
        _n(EXPIRED).alias("n_expired"),
        F.min("ts_us").alias("first_us"),
        F.max("ts_us").alias("last_us"),
        F.max("durable").alias("durable"),
        _first(ACC).alias("acc_us"),
        _first(FORWARDED).alias("fwd_us"),
        _first(DELIVERED).alias("del_us"),
        _first(ACKED).alias("ack_us"),
        F.max(F.when(_is(DEAD), F.col("ts_us"))).alias("dead_us"),
        F.max(F.when(_is(DROPPED), F.col("ts_us"))).alias("drop_us"),
        F.min_by("addr_h", F.when(_is(ACC), F.col("ts_us"))).alias("addr_h"),
        F.max_by("why_h", F.when(_is(DEAD), F.col("ts_us"))).alias("dead_h"),
        F.max_by("why_h", F.when(_is(DROPPED), F.col("ts_us"))).alias("drop_h"),
    ]
    if journey:
        aggs.append(F.collect_list("j").alias("journey_part"))
    return aggs


def _slim(ev: DataFrame, journey: bool, *keys: Column) -> DataFrame:
    """The events narrowed for the shuffle: ``keys``, the event as a code, numbers."""
    e = F.create_map(*[F.lit(x) for i, name in enumerate(_CODES) for x in (name, i)])
    return ev.select(
        "trace_id",
        *keys,
        e[F.col("event")].alias("e"),
        "ts_us",
        F.col("durable").cast("int").alias("durable"),
        _h(F.when(F.col("event") == "accepted", F.col("address"))).alias("addr_h"),
        _h(F.when(F.col("event").isin("dead_lettered", "dropped"), F.col("reason"))).alias("why_h"),
        *([F.struct("ts_us", "node", "event", "queue", "message_id").alias("j")] if journey else []),
    )  # fmt: skip


def queue_refs(ev: DataFrame, nodes: list[str], restarts: dict[str, int], parts: int,
               journey: bool) -> DataFrame:  # fmt: skip
    """One row per ``(trace_id, node, queue)`` (``queue`` null for events outside a queue:
    ``accepted``, ``dropped``) with its counts, first times and verdict (bridge hops: their fields, judged per trace).  The
    one shuffle of the events: clustered by trace, so the per-trace step needs none."""
    slim = _slim(ev, journey, F.col("node"), F.col("queue"))
    aggs = _ref_aggs(journey)
    q = slim.repartition(parts, "trace_id").groupBy("trace_id", "node", "queue").agg(*aggs)
    restart = F.create_map(*[F.lit(x) for kv in restarts.items() for x in kv]) if restarts else None
    gone = F.lit(False)
    if restart is not None:
        gone = (F.coalesce(F.col("durable"), F.lit(0)) == 0) & F.coalesce(
            restart[F.col("node")] * 1000 > F.col("last_us"), F.lit(False)
        )
    c = F.col
    sf = c("queue").startswith(SF_PREFIX)
    is_dest = c("queue").isNotNull() & ~sf
    # a destination's verdict is its own; a bridge hop's waits for the trace's nodes
    fixed = F.when(
        is_dest, F.when(V.simple(c), V.delivered()).otherwise(V.verdict(c, nodes, F.lit(False)))
    )
    return q.withColumn("gone", gone).select(
        "*",
        fixed.alias("fixed"),
        F.when(sf, F.struct(*V.FIELDS)).alias("hop"),
        (c("node") == _origin()).alias("is_origin"),
        F.when(is_dest & (c("n_routed") > 0), F.struct("node", "queue", "del_us", "ack_us")).alias(
            "dest"
        ),
    )


def _origin() -> Column:
    """The origin named by the trace id (``node/id``; null without a ``/``)."""
    return F.when(
        F.instr(F.col("trace_id"), "/") > 0,
        F.expr("substring(trace_id, 1, length(trace_id) - length(substring_index(trace_id, '/', -1)) - 1)"),
    )  # fmt: skip


def _trace_aggs(node: str) -> list[Column]:
    """The per-trace aggregates both paths share (``node``: the node column they name)."""
    return [
        F.min_by(node, "acc_us").alias("first_node"),
        F.min_by("addr_h", "acc_us").alias("address"),
        F.max("durable").alias("durable"),
        F.min("first_us").alias("first_us"),
        F.max("last_us").alias("last_us"),
        F.sum("n_dead").alias("n_dead"),
        F.sum("n_expired").alias("n_expired"),
        F.max_by("dead_h", "dead_us").alias("dead_reason"),
        F.max_by("drop_h", "drop_us").alias("drop_reason"),
    ]


def _status_and_reason(verdict: Column) -> tuple[Column, Column]:
    """A trace's status from its hop verdict and event counts, and the status's reason (to
    be computed after ``status``): one rule for the fast path and the general one."""
    c = F.col
    status = (
        F.when(verdict == "duplicated", "duplicated")
        .when(c("n_dead") > 0, "dead_lettered")
        .when(verdict.isNotNull(), verdict)
        .when(c("n_expired") > 0, "expired")
        .when(c("drop_reason").isNotNull(), "dropped")
        .otherwise("lost")
    )
    reason = (
        F.when(c("status") == "dead_lettered", c("dead_reason"))
        .when(c("status") == "dropped", c("drop_reason"))
        .when(c("status") == "expired", F.lit("expired"))
    )
    return status, reason


def messages(refs: DataFrame, strings: DataFrame, nodes: list[str], journey: bool) -> DataFrame:
    """One row per trace: ``trace_id, status, reason, origin_node, address, durable,
    first_us, last_us, nodes, detail, accepted_us, destinations`` (and ``journey``, its
    events in time order).  ``destinations``: per destination queue reached, the
    milliseconds from the origin's ``accepted`` (``accepted_us``) to each stage.

    Number-only aggregates where they do; arrays only for what needs the whole trace (a
    bridge hop's verdict, a destination's remote accept), each of one or two elements."""
    c = F.col
    aggs = [
        *_trace_aggs("node"),
        F.sort_array(F.collect_set("node")).alias("nodes"),
        F.max("fixed").alias("fixed"),
        F.collect_list("hop").alias("hops"),
        F.min(F.when(c("is_origin"), c("acc_us"))).alias("acc_o"),
        F.min(F.when(c("is_origin"), c("fwd_us"))).alias("fwd_us"),
        F.min("acc_us").alias("acc_min"),
        F.collect_list("dest").alias("dests"),
        F.collect_list(F.when(c("acc_us").isNotNull(), F.struct("node", "acc_us"))).alias("accs"),
    ]
    if journey:
        aggs.append(F.array_sort(F.flatten(F.collect_list("journey_part"))).alias("journey"))
    t = refs.groupBy("trace_id").agg(*aggs)
    for col in ("address", "dead_reason", "drop_reason"):
        t = _unhash(t, strings, col)
    hop = F.array_max(
        F.transform(
            c("hops"),
            lambda h: V.verdict(
                lambda f: h[f], nodes, F.array_contains(c("nodes"), V.peer(lambda f: h[f]))
            ),
        )
    )
    verdict = c("w.verdict")
    status, reason = _status_and_reason(verdict)
    detail = F.when(
        (c("status") == "lost") & verdict.isNull(), F.lit("accepted, then no queue holds it")
    ).otherwise(c("w.detail"))
    named = _origin().isNotNull()

    def ms(col: Column) -> Column:
        return (col - c("accepted_us")) / 1000.0

    def dest(d: Column) -> Column:
        remote = d["node"] != c("origin_node")
        racc = F.array_min(
            F.transform(
                F.filter(c("accs"), lambda a: a["node"] == d["node"]), lambda a: a["acc_us"]
            )
        )
        return F.struct(
            d["node"].alias("node"),
            d["queue"].alias("queue"),
            F.when(remote, ms(c("fwd_us"))).alias("forward_ms"),
            F.when(remote, ms(racc)).alias("remote_accept_ms"),
            ms(d["del_us"]).alias("delivery_ms"),
            ms(d["ack_us"]).alias("ack_ms"),
        )

    cols = [
        "trace_id", "status", "reason", "origin_node", "address", "durable", "first_us",
        "last_us", "nodes", "detail", "accepted_us", "destinations",
    ] + (["journey"] if journey else [])  # fmt: skip
    return (
        t.withColumn("w", F.greatest(c("fixed"), hop))
        .withColumn("status", status)
        .withColumn("reason", reason)
        .withColumn("detail", detail)
        # the origin is the trace id's prefix, else where it was first accepted
        .withColumn("origin_node", F.when(named, _origin()).otherwise(c("first_node")))
        .withColumn("durable", c("durable").cast("boolean"))
        .withColumn("accepted_us", F.when(named, c("acc_o")).otherwise(c("acc_min")))
        .withColumn("fwd_us", F.when(named, c("fwd_us")))
        .withColumn(
            "destinations", F.when(c("accepted_us").isNotNull(), F.transform(c("dests"), dest))
        )
        .select(*cols)
    )


def _lookup(values: Sequence[object], i: Column, type_: str) -> Column:
    """``values[i]`` (``i`` 0-based; null when ``i`` is null or out of range)."""
    if not values:
        return F.lit(None).cast(type_)
    return F.get(F.array(*[F.lit(v).cast(type_) for v in values]), i)


def _index(names: list[str], col: Column) -> Column:
    """The 0-based position of ``col`` in ``names`` (null when absent)."""
    if not names:
        return F.lit(None).cast("int")
    return F.create_map(*[F.lit(x) for i, n in enumerate(names) for x in (n, i)])[col]


#: A trace's nodes as bits: 62 per 64-bit word (no sign bit, no overflow).
_BITS = 62

#: Up to this many nodes, a trace's node list is looked up in a literal table of every
#: subset (2^n entries); above, it is built from the bits.
SUBSET_TABLE_NODES = 8


def fast_messages(
    ev: DataFrame,
    strings: DataFrame,
    nodes: list[str],
    restarts: dict[str, int],
    sf_peers: dict[int, int],
    parts: int,
    journey: bool,
) -> DataFrame:
    """:func:`messages` of :func:`queue_refs` with code-generated (number-only) aggregates,
    plus a column ``slow``: true for the few traces whose row it cannot build exactly (a
    verdict with a ``detail`` text, more than two destination queues); those are judged
    again by :func:`messages` (see :func:`reconcile`), every other row is the same.

    Strings become numbers before the shuffle (a node its index in ``nodes``, a queue its
    64-bit hash; ``sf_peers``: per store-and-forward queue's hash, its peer's index in
    ``nodes`` or -1).  Per trace, instead of arrays: the nodes as a bit set, per node the
    first ``accepted`` and ``forwarded``, per peer the worst hop verdict key with and
    without the peer's log showing the trace, and up to two destinations (by the hash of
    ``(node, queue)``, in that order).  A verdict key is ``rank * 2 + has detail``."""
    c = F.col
    n = len(nodes)
    node_i = _index(nodes, c("node")).alias("node_i")
    qh = _h(c("queue")).alias("qh")
    slim = _slim(ev, journey, node_i, qh)
    q = (
        slim.repartition(parts, "trace_id")
        .groupBy("trace_id", "node_i", "qh")
        .agg(*_ref_aggs(journey))
    )
    restart_ms = [restarts.get(x) for x in nodes]
    gone = F.lit(False)
    if restarts:
        gone = (F.coalesce(c("durable"), F.lit(0)) == 0) & F.coalesce(
            _lookup(restart_ms, c("node_i"), "long") * 1000 > c("last_us"), F.lit(False)
        )
    peer_i = (
        F.create_map(
            *[x for h, i in sf_peers.items() for x in (F.lit(h).cast("long"), F.lit(i).cast("int"))]
        )[c("qh")]
        if sf_peers
        else F.lit(None).cast("int")
    )
    q = q.withColumn("gone", gone).withColumn("peer_i", peer_i)
    sf = c("peer_i").isNotNull()
    is_dest = c("qh").isNotNull() & ~sf
    logged = c("peer_i") >= 0

    def key(rank: Column, detail: Column) -> Column:
        return rank * 2 + detail.cast("int")

    def hop_key(seen: bool) -> Column:
        s = F.lit(seen)
        return F.when(sf, key(V.hop_rank(c, s, logged), V.has_detail(c, F.lit(True), s)))

    refs = q.select(
        "*",
        F.when(is_dest, key(V.dest_rank(c), V.has_detail(c, F.lit(False), F.lit(False)))).alias(
            "fixed"
        ),
        hop_key(True).alias("ks"),
        hop_key(False).alias("ku"),
        F.when(is_dest & (c("n_routed") > 0), F.xxhash64("node_i", "qh")).alias("dk"),
    )
    words = max(1, (n + _BITS - 1) // _BITS)
    one = F.lit(1).cast("long")
    aggs = [
        *_trace_aggs("node_i"),
        *[
            F.bit_or(
                F.when(
                    (c("node_i") / _BITS).cast("int") == w,
                    F.call_function("shiftleft", one, (c("node_i") % _BITS).cast("int")),
                )
            ).alias(f"bits{w}")
            for w in range(words)
        ],
        F.max("fixed").alias("fixed"),
        F.max(F.when(c("peer_i") == -1, c("ku"))).alias("kx"),
        *[F.max(F.when(c("peer_i") == i, c("ks"))).alias(f"ks{i}") for i in range(n)],
        *[F.max(F.when(c("peer_i") == i, c("ku"))).alias(f"ku{i}") for i in range(n)],
        *[F.min(F.when(c("node_i") == i, c("acc_us"))).alias(f"acc{i}") for i in range(n)],
        *[F.min(F.when(c("node_i") == i, c("fwd_us"))).alias(f"fwd{i}") for i in range(n)],
        F.min("acc_us").alias("acc_min"),
        F.sum(F.when(c("dk").isNotNull(), 1).otherwise(0)).alias("nd"),
        F.min("dk").alias("dk1"),
        F.max("dk").alias("dk2"),
    ]
    for j, pick in ((1, F.min_by), (2, F.max_by)):
        aggs += [pick(x, "dk").alias(f"d{j}_{x}") for x in ("node_i", "qh", "del_us", "ack_us")]
    if journey:
        aggs.append(F.array_sort(F.flatten(F.collect_list("journey_part"))).alias("journey"))
    t = refs.groupBy("trace_id").agg(*aggs)
    for col in ("address", "dead_reason", "drop_reason", "d1_qh", "d2_qh"):
        t = _unhash(t, strings, col)

    def bit(i: int) -> Column:
        return F.shiftright(c(f"bits{i // _BITS}"), i % _BITS).bitwiseAND(1) == 1

    hop = c("kx")
    if n:
        hop = F.greatest(
            hop, *[F.when(bit(i), c(f"ks{i}")).otherwise(c(f"ku{i}")) for i in range(n)]
        )
    w = F.greatest(c("fixed"), hop)
    names: list[str | None] = [None] * (max(V.RANK.values()) + 1)
    for name, r in V.RANK.items():
        names[r] = name
    verdict = _lookup(names, F.shiftright(c("w"), 1), "string")
    status, reason = _status_and_reason(verdict)
    detail = F.when(
        (c("status") == "lost") & c("w").isNull(), F.lit("accepted, then no queue holds it")
    )
    slow = (
        F.coalesce(c("w").bitwiseAND(1) == 1, F.lit(False))
        | (c("nd") > 2)
        | ((c("nd") == 2) & (c("dk1") == c("dk2")))
    )
    if n <= SUBSET_TABLE_NODES:  # every subset of the nodes as a literal: one lookup per trace
        subsets = [[x for i, x in enumerate(nodes) if m >> i & 1] for m in range(1 << n)]
        trace_nodes = F.array(
            *[F.array(*[F.lit(x) for x in s]).cast("array<string>") for s in subsets]
        )[c("bits0").cast("int")]
    else:  # in node order, so sorted like the plain plan's
        trace_nodes = F.array_compact(
            F.array(*[F.when(bit(i), F.lit(x)) for i, x in enumerate(nodes)])
        )
    named = _origin().isNotNull()
    origin_i = _index(nodes, _origin())

    def per_node(prefix: str, i: Column) -> Column:
        if not n:
            return F.lit(None).cast("long")
        return F.array(*[c(f"{prefix}{k}") for k in range(n)])[i]

    def ms(col: Column) -> Column:
        return (col - c("accepted_us")) / 1000.0

    def dest(j: int) -> Column:
        node = _lookup(list(nodes), c(f"d{j}_node_i"), "string")
        remote = node != c("origin_node")
        return F.struct(
            node.alias("node"),
            c(f"d{j}_qh").alias("queue"),
            F.when(remote, ms(c("fwd_us"))).alias("forward_ms"),
            F.when(remote, ms(per_node("acc", c(f"d{j}_node_i")))).alias("remote_accept_ms"),
            ms(c(f"d{j}_del_us")).alias("delivery_ms"),
            ms(c(f"d{j}_ack_us")).alias("ack_ms"),
        )

    cols = [
        "trace_id", "status", "reason", "origin_node", "address", "durable", "first_us",
        "last_us", "nodes", "detail", "accepted_us", "destinations",
    ] + (["journey"] if journey else []) + ["slow"]  # fmt: skip
    return (
        t.withColumn("w", w)
        .withColumn("status", status)
        .withColumn("reason", reason)
        .withColumn("detail", detail)
        .withColumn("nodes", trace_nodes)
        .withColumn(
            "origin_node",
            F.when(named, _origin()).otherwise(_lookup(list(nodes), c("first_node"), "string")),
        )
        .withColumn("durable", c("durable").cast("boolean"))
        .withColumn("accepted_us", F.when(named, per_node("acc", origin_i)).otherwise(c("acc_min")))
        .withColumn("fwd_us", F.when(named, per_node("fwd", origin_i)))
        .withColumn(
            "destinations",
            F.when(
                c("accepted_us").isNotNull(),
                F.slice(
                    F.array(dest(1), dest(2)), F.lit(1), F.least(c("nd"), F.lit(2)).cast("int")
                ),
            ),
        )
        .withColumn("slow", slow)
        .select(*cols)
    )


def latency(m: DataFrame) -> DataFrame:
    """Per destination reached (from ``messages/``): route ``origin -> node:queue``, the
    minute of the origin's ``accepted`` and the milliseconds to each stage."""
    d = m.where(F.col("accepted_us").isNotNull()).select(
        "origin_node", "accepted_us", F.explode("destinations").alias("d")
    )
    return d.select(
        F.concat("origin_node", F.lit(" -> "), "d.node", F.lit(":"), "d.queue").alias("route"),
        (F.col("accepted_us") / 60_000_000).cast("long").alias("minute"),
        *[F.col(f"d.{s}_ms").alias(s) for s in STAGES],
    )


def route_stats(lat: DataFrame) -> DataFrame:
    """Per route and minute: the message count and each stage's percentiles, maximum and
    count (one small aggregate that both :func:`route_tables` come from)."""
    aggs = [F.count(F.lit(1)).alias("messages")]
    for s in STAGES:
        aggs += [
            F.percentile_approx(s, [0.5, 0.95, 0.99], PERCENTILE_ACCURACY).alias(f"{s}_p"),
            F.max(s).alias(f"{s}_max"),
            F.count(s).alias(f"{s}_n"),
        ]
    return lat.groupBy("route", "minute").agg(*aggs)


def route_tables(g: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(throughput per route and minute, latency percentiles per route, minute and stage)
    from :func:`route_stats`."""
    routes = g.select(
        "route",
        "minute",
        F.timestamp_seconds(F.col("minute") * 60).alias("at"),
        "messages",
        F.col("ack_n").alias("acknowledged"),
    )
    stages = [
        F.struct(
            F.lit(s).alias("stage"),
            F.col(f"{s}_n").alias("n"),
            F.col(f"{s}_p")[0].alias("p50_ms"),
            F.col(f"{s}_p")[1].alias("p95_ms"),
            F.col(f"{s}_p")[2].alias("p99_ms"),
            F.col(f"{s}_max").alias("max_ms"),
        )
        for s in STAGES
    ]
    lat_t = (
        g.select("route", "minute", F.explode(F.array(*stages)).alias("x"))
        .select("route", "minute", "x.*")
        .where(F.col("n") > 0)
    )
    return routes, lat_t


def backlog(ov: DataFrame) -> DataFrame:
    """Messages waiting in each store-and-forward queue at the end of each minute (only
    minutes with events that change it): routed in minus forwarded, acknowledged,
    dead-lettered or expired (from the :func:`overview`)."""
    per_min = (
        ov.where(F.col("minute").isNotNull())
        .groupBy("node", "queue", "minute")
        .agg(F.sum("d").alias("d"))
        .where(F.col("d").isNotNull())
    )
    w = Window.partitionBy("node", "queue").orderBy("minute")
    return per_min.select(
        "node",
        "queue",
        "minute",
        F.timestamp_seconds(F.col("minute") * 60).alias("at"),
        F.sum("d").over(w).alias("backlog"),
    )


def dead_letters(ov: DataFrame) -> DataFrame:
    """Per node and reason, the ``dead_lettered`` events (from the :func:`overview`)."""
    return ov.where(F.col("dead")).groupBy("node", "reason").agg(F.sum("n").alias("messages"))


def reconcile(
    spark: SparkSession,
    events: DataFrame,
    out: str | Path,
    *,
    journey: bool = True,
    progress: Callable[[str], None] | None = None,
    fast: bool = True,
) -> Result:
    """Run the job over ``events`` (schema :data:`waystation.pipeline.events.SCHEMA`) and
    write its tables, ``summary.json`` and ``report.html`` under ``out``.  ``fast=False``
    judges every trace with the plain plan (:func:`messages`), which the fast one
    (:func:`fast_messages`) must match row for row."""
    from waystation.pipeline.report import write_report

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    say = progress or (lambda _s: None)
    t = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal t
        now = time.perf_counter()
        timings[stage] = round(now - t, 3)
        t = now

    say("reading event logs")
    ev = events.where(F.col("trace_id").isNotNull())
    ov = overview(ev).persist()
    runs = ov.groupBy("node", "s").agg(F.sum("n").alias("n")).collect()
    per_node: dict[str, int] = {}
    for r in runs:
        per_node[r["node"]] = per_node.get(r["node"], 0) + r["n"]
    n_events = sum(per_node.values())
    nodes = sorted(per_node)
    restarts = run_starts([(r["node"], r["s"]) for r in runs if r["s"] is not None])
    found = ov.select(F.explode(F.array("address", "reason", "queue")).alias("s")).where(
        F.col("s").isNotNull()
    )
    pairs = found.distinct().select(F.xxhash64("s").alias("h"), "s").collect()
    if len({h for h, _ in pairs}) != len(pairs):  # 2^-64 per pair: never, but not silently
        raise RuntimeError("two addresses, reasons or queues share a 64-bit hash")
    strings = spark.createDataFrame(pairs, "h long, s string")
    sf_peers = {
        h: nodes.index(q[len(SF_PREFIX) :]) if q[len(SF_PREFIX) :] in nodes else -1
        for h, q in pairs
        if q.startswith(SF_PREFIX)
    }
    lap("read")
    say(f"{n_events} events from {len(nodes)} nodes; judging each message")
    parts = int(spark.conf.get("spark.sql.shuffle.partitions") or 8)
    plain = messages(queue_refs(ev, nodes, restarts, parts, journey), strings, nodes, journey)
    dest = str(out / "messages")
    if not fast:
        plain.write.mode("overwrite").parquet(dest)
    else:
        # one pass for (nearly) every trace; the few it flags are judged again, plainly,
        # from their own events, and appended
        obs = Observation("slow")
        quick = fast_messages(ev, strings, nodes, restarts, sf_peers, parts, journey)
        quick = quick.observe(
            obs, F.collect_list(F.when(F.col("slow"), F.col("trace_id"))).alias("ids")
        )
        quick.where(~F.col("slow")).select(*plain.columns).write.mode("overwrite").parquet(dest)
        ids = obs.get["ids"]
        if ids:
            few = spark.createDataFrame([(i,) for i in ids], "trace_id string")
            some = ev.join(F.broadcast(few), "trace_id", "left_semi")
            again = messages(
                queue_refs(some, nodes, restarts, parts, journey), strings, nodes, journey
            )
            again.coalesce(1).write.mode("append").parquet(dest)
    lap("messages")
    say("messages written; counting statuses and anomalies")
    m = spark.read.parquet(str(out / "messages"))
    counts = {r["status"]: r["count"] for r in m.groupBy("status").count().collect()}
    reasons = {
        r["reason"]: r["count"]
        for r in m.where(F.col("status") == "dead_lettered").groupBy("reason").count().collect()
    }
    m.where(F.col("status").isin("lost", "duplicated")).select(
        "trace_id", "status", "origin_node", "address", "nodes", "detail", "last_us"
    ).write.mode("overwrite").parquet(str(out / "anomalies"))
    lap("summary")
    say("latency per route and minute")
    # both tables come from one aggregate: cached, the percentiles run once
    stats = route_stats(latency(m)).persist()
    routes, lat = route_tables(stats)
    routes.write.mode("overwrite").parquet(str(out / "routes"))
    lat.write.mode("overwrite").parquet(str(out / "latency"))
    dead_letters(ov).write.mode("overwrite").parquet(str(out / "dead_letters"))
    backlog(ov).write.mode("overwrite").parquet(str(out / "backlog"))
    lap("routes")
    for df in (stats, ov):
        df.unpersist()
    summary: dict[str, object] = {
        "events": n_events,
        "nodes": nodes,
        "messages": sum(counts.values()),
        "status": {s: counts.get(s, 0) for s in STATUSES},
        "dead_letter_reasons": reasons,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    say("writing report.html")
    write_report(spark, out, summary)
    lap("report")
    return Result(out, summary, timings)
