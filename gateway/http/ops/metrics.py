"""``GET /metrics``: the node's numbers in the Prometheus text format.

Nothing is counted per message for this: at scrape time the counters the core keeps anyway
(each queue's depth and totals, the address memory, the open sessions, the journal's
counters, the bridges' status) are read and turned into metric families.  The one thing
measured between scrapes is event-loop lag (:mod:`.lag`), from the node's start.

What a scrape may cost is bounded (:mod:`.series`): at most ``max_queue_series`` queues and
``max_address_series`` addresses get series of their own, the rest are summed in one series
labelled ``_other``, and the pass over the names gives the event loop back as it goes;
scrapes that arrive while one runs share its answer.  With security on, a scraper logs in
(HTTP Basic, no challenge: see :mod:`waystation.gateway.http.admin.guard`) as a user holding
``manage`` on ``#`` or one of ``[acceptors.http.metrics] roles``.

Counters the core does not keep yet are not invented: per-queue expired and dead-lettered
totals (by reason) appear once the core exposes them (see docs/operations.md).  Journal
fsync durations and group-commit sizes are histograms whose buckets the journal writer
counts itself (core/store/timing.py); a scrape copies them.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from waystation.core.authentication import authenticator
from waystation.core.store.timing import Snapshot
from waystation.gateway.http.admin import guard
from waystation.gateway.http.context import HttpContext
from waystation.gateway.http.ops.lag import LoopLag
from waystation.gateway.http.ops.series import exposition, series

PREFIX = "waystation_"


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, labels=labels)


def _counter(name: str, doc: str, labels: list[str] | None = None) -> CounterMetricFamily:
    return CounterMetricFamily(PREFIX + name, doc, labels=labels)


class NodeCollector(Collector):
    """Builds every family from the engine's state when Prometheus asks."""

    def __init__(self, ctx: HttpContext, lag: LoopLag) -> None:
        self.ctx = ctx
        self.lag = lag

    def collect(self) -> Iterator[Metric]:
        """The node-wide families; the per-queue and per-address ones are :mod:`.series`'s."""
        engine = self.ctx.engine
        if not engine.started:
            return
        n = _gauge("addresses", "Addresses declared.")
        n.add_metric([], len(engine.post.addresses))
        yield n
        yield from self._connections()
        yield from self._bridges()
        yield from self._journal()
        yield from self._journal_timings()
        yield from self._logins()
        lag = _gauge("event_loop_lag_seconds", "How late the event loop ran the last timer.")
        lag.add_metric([], self.lag.last)
        yield lag
        worst = _gauge(
            "event_loop_lag_max_seconds", "The worst event-loop lag since the previous scrape."
        )
        worst.add_metric([], self.lag.take_worst())
        yield worst

    def _connections(self) -> Iterator[Metric]:
        by_protocol: Counter[str] = Counter()
        msgs_in: Counter[str] = Counter()
        for s in list(self.ctx.engine.sessions.values()):
            by_protocol[s.protocol] += 1
            msgs_in[s.protocol] += s.messages_in
        conns = _gauge("connections", "Open core sessions, by protocol.", ["protocol"])
        for p in sorted(set(self.ctx.adapters) | set(by_protocol)):
            conns.add_metric([p], by_protocol[p])
        yield conns

    def _bridges(self) -> Iterator[Metric]:
        status: Callable[[], list[dict[str, Any]]] | None = self.ctx.bridges
        if status is None:
            return
        labels = ["bridge", "remote_node"]
        up = _gauge("bridge_up", "1 while the bridge's link is connected.", labels)
        backlog = _gauge("bridge_backlog", "Messages waiting to be forwarded.", labels)
        flight = _gauge("bridge_in_flight", "Messages sent and not yet confirmed.", labels)
        fwd = _counter("bridge_forwarded", "Messages the remote confirmed.", labels)
        failed = _counter("bridge_failed", "Failed connection attempts.", labels)
        dead = _counter("bridge_dead_lettered", "Messages the bridge dead-lettered.", labels)
        for b in status():
            lv = [str(b.get("name", "")), str(b.get("remote_node") or b.get("foreign") or "")]
            up.add_metric(lv, 1 if b.get("state") == "connected" else 0)
            backlog.add_metric(lv, _num(b.get("waiting")))
            flight.add_metric(lv, _num(b.get("in_flight")))
            fwd.add_metric(lv, _num(b.get("forwarded")))
            failed.add_metric(lv, _num(b.get("failed")))
            dead.add_metric(lv, _num(b.get("dead_lettered")))
        yield from (up, backlog, flight, fwd, failed, dead)

    def _journal(self) -> Iterator[Metric]:
        stats = self.ctx.engine.journal.stats()
        if not stats:
            return
        counters = {
            "batches": "Write batches appended to the message journal.",
            "bytes": "Bytes appended to the message journal.",
            "fsyncs": "fdatasync calls on message journal files.",
            "groups": "Group commits (batches written and synced together).",
            "compactions": "Journal compactions run.",
        }
        for key, doc in counters.items():
            if key in stats:
                c = _counter(f"journal_{key}", doc)
                c.add_metric([], stats[key])
                yield c
        for key, doc in {
            "files": "Journal data files.",
            "live_records": "Live records in the journal.",
        }.items():
            if key in stats:
                g = _gauge(f"journal_{key}", doc)
                g.add_metric([], stats[key])
                yield g

    def _journal_timings(self) -> Iterator[Metric]:
        timings = getattr(self.ctx.engine.journal, "timings", None)
        found = timings() if timings is not None else {}
        for key, name, doc in (
            ("sync_seconds", "journal_fsync_seconds", "Time each journal fdatasync took."),
            ("group_writes", "journal_group_commit_writes", "Writes settled by one fsync."),
        ):
            snap = found.get(key)
            if snap is not None:
                yield _histogram(name, doc, snap)

    def _logins(self) -> Iterator[Metric]:
        stats = authenticator(self.ctx.engine).stats
        c = _counter("login_failures", "Failed logins (all protocols).")
        c.add_metric([], stats.get("failed", 0))
        yield c
        r = _counter("login_refusals", "Logins refused without a check (throttle, busy).")
        r.add_metric([], stats.get("refused_locked", 0) + stats.get("refused_busy", 0))
        yield r


def _histogram(name: str, doc: str, snap: Snapshot) -> HistogramMetricFamily:
    """A Prometheus histogram (cumulative buckets) from the store's per-bucket counts."""
    buckets: list[tuple[str, float]] = []
    running = 0
    for bound, n in zip((*snap.bounds, math.inf), snap.counts, strict=True):
        running += n
        buckets.append((floatToGoString(bound), running))
    return HistogramMetricFamily(PREFIX + name, doc, buckets=buckets, sum_value=snap.total)


def _num(v: object) -> float:
    return float(v) if isinstance(v, int | float) else 0.0


LAG = web.AppKey("ops_lag", LoopLag)


class Scraper:
    """One scrape at a time: the per-name pass (with yields), then the text; scrapes that
    come while one runs get its answer."""

    def __init__(self, ctx: HttpContext, lag: LoopLag) -> None:
        self.ctx = ctx
        self.collector = NodeCollector(ctx, lag)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self.running: asyncio.Future[bytes] | None = None

    async def scrape(self) -> bytes:
        if self.running is None or self.running.done():
            self.running = asyncio.ensure_future(self._scrape())
        return await asyncio.shield(self.running)

    async def _scrape(self) -> bytes:
        cfg = self.ctx.cfg.metrics
        engine = self.ctx.engine
        per_name = b""
        if engine.started:
            found = await series(engine.post, cfg.max_queue_series, cfg.max_address_series)
            per_name = exposition(found, PREFIX).encode()
        return per_name + generate_latest(self.registry)


async def _may_scrape(request: web.Request, ctx: HttpContext) -> None:
    """With security on and ``login`` set: a user with manage on ``#`` or a listed role."""
    cfg = ctx.cfg.metrics
    if not (cfg.login and ctx.engine.security.enabled):
        return
    principal = await guard.login(request, ctx)
    if set(cfg.roles) & principal.roles or guard.may_manage(ctx, principal, guard.NODE_WIDE):
        return
    guard.audit.warning(
        "denied GET /metrics to %r from %s: neither manage on '#' nor a role of %s",
        principal.name,
        guard.remote_of(request),
        sorted(cfg.roles),
    )
    raise guard.error(
        web.HTTPForbidden, f"user {principal.name!r} may not read metrics (metrics.roles)"
    )


def setup(app: web.Application, ctx: HttpContext, lag: LoopLag | None = None) -> None:
    """``/metrics``; ``lag`` is a sampler its owner runs (the node's, from its start), else
    this app starts and stops its own."""
    owned = lag is None
    lag = LoopLag() if lag is None else lag
    app[LAG] = lag
    scraper = Scraper(ctx, lag)

    async def metrics(request: web.Request) -> web.Response:
        await _may_scrape(request, ctx)
        body = await scraper.scrape()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def started(app: web.Application) -> None:
        lag.start()

    async def stopped(app: web.Application) -> None:
        await lag.stop()

    if owned:
        app.on_startup.append(started)
        app.on_cleanup.append(stopped)
    app.router.add_get("/metrics", metrics)


__all__ = ["LoopLag", "NodeCollector", "Scraper", "setup"]
