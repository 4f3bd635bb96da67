"""The reconcile job: one status per message across every node's log, flow figures per route.

A message is followed by its ``trace_id`` (set where it first entered, kept across bridges).
Its fate is judged per *queue reference* ``(trace, node, queue)`` and the worst one wins:

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
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from waystation.core.names import SF_PREFIX

STATUSES = (
    "delivered",
    "in_flight",
    "lost",
    "expired",
    "dead_lettered",
    "duplicated",
    "dropped",
)
_RANK = {
    "delivered": 1,
    "in_flight": 2,
    "lost": 3,
    "expired": 4,
    "dead_lettered": 5,
    "duplicated": 6,
}

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


@dataclass
class Result:
    """What a run produced: counts per status and where each stage's time went."""

    out: Path
    summary: dict[str, object]
    timings: dict[str, float] = field(default_factory=dict)


def _n(event: str) -> Column:
    return F.sum(F.when(F.col("event") == event, 1).otherwise(0))


def _first(event: str) -> Column:
    return F.min(F.when(F.col("event") == event, F.col("ts_us")))


def run_starts(ev: DataFrame) -> DataFrame:
    """Per node, the start (ms) of its last run seen in its message ids: ``node, restart_ms``
    (only nodes that restarted)."""
    ids = ev.select("node", F.shiftright(F.col("message_id"), 16).alias("s")).distinct()
    w = Window.partitionBy("node").orderBy("s")
    gaps = ids.withColumn("prev", F.lag("s").over(w)).where(
        F.col("s") - F.col("prev") > RESTART_GAP_MS
    )
    return gaps.groupBy("node").agg(F.max("s").alias("restart_ms"))


def queue_refs(ev: DataFrame, nodes: list[str], traces: DataFrame) -> DataFrame:
    """One row per ``(trace_id, node, queue)`` with its counts and its own verdict
    (``traces``: :func:`trace_facts`, for the nodes each trace was seen on)."""
    q = (
        ev.where(F.col("queue").isNotNull())
        .groupBy("trace_id", "node", "queue")
        .agg(
            _n("routed").alias("n_routed"),
            _n("delivered").alias("n_delivered"),
            _n("acked").alias("n_acked"),
            _n("forwarded").alias("n_forwarded"),
            _n("dead_lettered").alias("n_dead"),
            _n("expired").alias("n_expired"),
            F.max("ts_us").alias("last_us"),
            F.max(F.col("durable").cast("int")).alias("durable"),
            _first("delivered").alias("del_us"),
            _first("acked").alias("ack_us"),
        )
    )
    sf = F.col("queue").startswith(SF_PREFIX)
    peer = F.substring(F.col("queue"), len(SF_PREFIX) + 1, 1 << 20)
    peer_seen = F.array_contains(F.col("trace_nodes"), peer)
    peer_logged = peer.isin(nodes) if nodes else F.lit(False)
    gone = (F.coalesce(F.col("durable"), F.lit(0)) == 0) & (
        F.col("restart_ms") * 1000 > F.col("last_us")
    )
    waiting = F.when(gone, "lost").otherwise("in_flight")
    dest = (
        F.when((F.col("n_routed") > 1) | (F.col("n_acked") > 1), "duplicated")
        .when(F.col("n_dead") > 0, "dead_lettered")
        .when(F.col("n_expired") > 0, "expired")
        .when(F.col("n_acked") > 0, "delivered")
        .otherwise(waiting)
    )
    hop = (
        F.when(F.col("n_dead") > 0, "dead_lettered")
        .when(F.col("n_expired") > 0, "expired")
        .when(peer_seen, "delivered")
        .when((F.col("n_forwarded") + F.col("n_acked") > 0) & peer_logged, "lost")
        .when(F.col("n_forwarded") + F.col("n_acked") > 0, "in_flight")  # peer's log not given
        .otherwise(waiting)
    )
    detail = (
        F.when(sf & ~peer_seen & (F.col("n_forwarded") > 0) & peer_logged,
               F.concat(F.lit("forwarded to "), peer, F.lit(", never accepted there")))
        .when(sf & ~peer_seen & (F.col("n_forwarded") > 0),
              F.concat(F.lit("forwarded to "), peer, F.lit(", whose log was not given")))
        .when(gone & (F.col("n_acked") + F.col("n_dead") + F.col("n_expired") == 0),
              F.concat(F.lit("non-durable, in "), F.col("node"), F.lit(":"), F.col("queue"),
                       F.lit(" when the node restarted")))
        .when(F.col("n_routed") > 1, F.concat(F.lit("routed "), F.col("n_routed").cast("string"),
                                              F.lit(" times to "), F.col("node"), F.lit(":"),
                                              F.col("queue")))
        .when(F.col("n_acked") > 1, F.concat(F.lit("acknowledged "), F.col("n_acked").cast("string"),
                                             F.lit(" times on "), F.col("node"), F.lit(":"),
                                             F.col("queue")))
    )  # fmt: skip
    return (
        q.join(F.broadcast(run_starts(ev)), "node", "left")
        .join(traces.select("trace_id", F.col("nodes").alias("trace_nodes")), "trace_id")
        .withColumn("sf", sf)
        .withColumn("verdict", F.when(sf, hop).otherwise(dest))
        .withColumn("detail", detail)
    )


def trace_facts(ev: DataFrame, journey: bool = True) -> DataFrame:
    """One row per trace with what its status needs from its events (one pass)."""
    accepted = F.col("event") == "accepted"
    aggs = [
        F.min_by(F.col("node"), F.when(accepted, F.col("ts_us"))).alias("first_node"),
        F.min_by(F.col("address"), F.when(accepted, F.col("ts_us"))).alias("address"),
        F.max(F.col("durable").cast("int")).alias("durable"),
        F.min("ts_us").alias("first_us"),
        F.max("ts_us").alias("last_us"),
        F.sort_array(F.collect_set("node")).alias("nodes"),
        _n("accepted").alias("n_accepted"),
        _n("dead_lettered").alias("n_dead"),
        F.max_by(F.col("reason"), F.when(F.col("event") == "dead_lettered", F.col("ts_us"))).alias(
            "dead_reason"
        ),
        F.max_by(F.col("reason"), F.when(F.col("event") == "dropped", F.col("ts_us"))).alias(
            "drop_reason"
        ),
        _n("expired").alias("n_expired"),
    ]
    if journey:
        aggs.append(
            F.array_sort(
                F.collect_list(F.struct("ts_us", "node", "event", "queue", "message_id"))
            ).alias("journey")
        )
    return ev.groupBy("trace_id").agg(*aggs)


def messages(traces: DataFrame, refs: DataFrame, journey: bool = True) -> DataFrame:
    """One row per trace: ``trace_id, status, reason, origin_node, address, durable,
    first_us, last_us, nodes, detail`` (and ``journey``, its events in time order)."""
    rank = F.create_map(*[F.lit(x) for kv in _RANK.items() for x in kv])
    worst = refs.groupBy("trace_id").agg(
        F.max(F.struct(rank[F.col("verdict")].alias("r"), F.col("verdict"), F.col("detail"))).alias(
            "w"
        )
    )
    t = traces.join(worst, "trace_id", "left")
    verdict = F.col("w.verdict")
    status = (
        F.when((verdict == "duplicated"), "duplicated")
        .when((F.col("n_dead") > 0) & (F.coalesce(verdict, F.lit("")) != "duplicated"),
              "dead_lettered")
        .when(verdict.isNotNull(), verdict)
        .when(F.col("n_expired") > 0, "expired")
        .when(F.col("drop_reason").isNotNull(), "dropped")
        .otherwise("lost")
    )  # fmt: skip
    reason = (
        F.when(F.col("status") == "dead_lettered", F.col("dead_reason"))
        .when(F.col("status") == "dropped", F.col("drop_reason"))
        .when(F.col("status") == "expired", F.lit("expired"))
    )
    detail = F.when(
        (F.col("status") == "lost") & verdict.isNull(), F.lit("accepted, then no queue holds it")
    ).otherwise(F.col("w.detail"))
    origin = F.coalesce(
        F.regexp_extract("trace_id", r"^(.*)/[^/]*$", 1).alias("o"), F.col("first_node")
    )
    cols = [
        "trace_id", "status", "reason", "origin_node", "address", "durable", "first_us",
        "last_us", "nodes", "detail",
    ] + (["journey"] if journey else [])  # fmt: skip
    return (
        t.withColumn("status", status)
        .withColumn("reason", reason)
        .withColumn("detail", detail)
        .withColumn("origin_node", origin)
        .withColumn("durable", F.col("durable").cast("boolean"))
        .select(*cols)
    )


def latency(ev: DataFrame, refs: DataFrame) -> DataFrame:
    """Per delivered destination reference: route ``origin -> node:queue``, the minute of
    the origin's ``accepted`` and the milliseconds to each stage."""
    origin = F.regexp_extract("trace_id", r"^(.*)/[^/]*$", 1)
    hops = (
        ev.where(F.col("event").isin("accepted", "forwarded"))
        .groupBy("trace_id", "node")
        .agg(_first("accepted").alias("racc_us"), _first("forwarded").alias("fwd_us"))
    )
    t0 = hops.where(F.col("node") == origin).select(
        "trace_id", F.col("racc_us").alias("t0"), "fwd_us"
    )
    d = (
        refs.where(~F.col("sf") & (F.col("n_routed") > 0))
        .select("trace_id", "node", "queue", "del_us", "ack_us")
        .join(t0, "trace_id")
        .join(hops.select("trace_id", "node", "racc_us"), ["trace_id", "node"], "left")
    )
    remote = F.col("node") != origin

    def ms(col: Column) -> Column:
        return (col - F.col("t0")) / 1000.0

    return d.select(
        F.concat(origin, F.lit(" -> "), F.col("node"), F.lit(":"), F.col("queue")).alias("route"),
        (F.col("t0") / 60_000_000).cast("long").alias("minute"),
        F.when(remote, ms(F.col("fwd_us"))).alias("forward"),
        F.when(remote, ms(F.col("racc_us"))).alias("remote_accept"),
        ms(F.col("del_us")).alias("delivery"),
        ms(F.col("ack_us")).alias("ack"),
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


def backlog(ev: DataFrame) -> DataFrame:
    """Messages waiting in each store-and-forward queue at the end of each minute (only
    minutes with events): routed in minus forwarded, acknowledged, dead-lettered or expired."""
    sf = ev.where(F.col("queue").startswith(SF_PREFIX))
    delta = F.when(F.col("event") == "routed", 1).when(
        F.col("event").isin("acked", "dead_lettered", "expired"), -1
    )
    per_min = (
        sf.select(
            "node",
            "queue",
            (F.col("ts_us") / 60_000_000).cast("long").alias("minute"),
            delta.alias("d"),
        )
        .where(F.col("d").isNotNull())
        .groupBy("node", "queue", "minute")
        .agg(F.sum("d").alias("d"))
    )
    w = Window.partitionBy("node", "queue").orderBy("minute")
    return per_min.select(
        "node",
        "queue",
        "minute",
        F.timestamp_seconds(F.col("minute") * 60).alias("at"),
        F.sum("d").over(w).alias("backlog"),
    )


def dead_letters(ev: DataFrame) -> DataFrame:
    return (
        ev.where(F.col("event") == "dead_lettered")
        .groupBy("node", "reason")
        .agg(F.count(F.lit(1)).alias("messages"))
    )


def reconcile(
    spark: SparkSession,
    events: DataFrame,
    out: str | Path,
    *,
    journey: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Result:
    """Run the job over ``events`` (schema :data:`waystation.pipeline.events.SCHEMA`) and
    write its tables, ``summary.json`` and ``report.html`` under ``out``."""
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
    # clustered by trace once: every later aggregation and join is by trace (plus node and
    # queue), so none of them shuffles the events again
    parts = int(spark.conf.get("spark.sql.shuffle.partitions") or 8)
    ev = (
        events.where(F.col("trace_id").isNotNull())
        .select("ts_us", "node", "event", "trace_id", "message_id", "address", "queue",
                "durable", "reason")
        .repartition(parts, "trace_id")
        .persist()
    )  # fmt: skip
    per_node = {r["node"]: r["count"] for r in ev.groupBy("node").count().collect()}
    n_events = sum(per_node.values())
    nodes = sorted(per_node)  # one action fills the cache and gives both
    lap("read")
    say(f"{n_events} events from {len(nodes)} nodes; judging each message")
    traces = trace_facts(ev, journey).persist()
    refs = queue_refs(ev, nodes, traces).persist()
    msgs = messages(traces, refs, journey)
    msgs.write.mode("overwrite").parquet(str(out / "messages"))
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
    # both tables come from one aggregate: cached, the latency join and the percentiles run
    # once instead of once per table
    stats = route_stats(latency(ev, refs)).persist()
    routes, lat = route_tables(stats)
    routes.write.mode("overwrite").parquet(str(out / "routes"))
    lat.write.mode("overwrite").parquet(str(out / "latency"))
    dead_letters(ev).write.mode("overwrite").parquet(str(out / "dead_letters"))
    backlog(ev).write.mode("overwrite").parquet(str(out / "backlog"))
    lap("routes")
    for df in (stats, refs, traces, ev):
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
