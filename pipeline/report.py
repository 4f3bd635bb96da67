"""``report.html``: one self-contained page (inline SVG, no scripts, no external assets) that
an operator opens without Spark: statuses, anomalies, throughput and latency per route, dead
letters by reason, bridge backlog."""

from __future__ import annotations

import datetime as dt
import html
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

_COLORS = ("#1b6ca8", "#d9822b", "#2e8540", "#b33a3a", "#7c4dff", "#6d6d6d", "#00838f")
_W, _H, _PAD = 640, 220, 40


def _e(x: object) -> str:
    return html.escape(str(x))


def bars(items: list[tuple[str, float]], unit: str = "") -> str:
    """A horizontal bar chart."""
    if not items:
        return "<p><i>none</i></p>"
    top = max(v for _, v in items) or 1
    h = 24 * len(items) + 10
    rows = []
    for i, (label, v) in enumerate(items):
        w = (_W - 260) * v / top
        y = 5 + 24 * i
        rows.append(
            f'<text x="0" y="{y + 15}" font-size="12">{_e(label)}</text>'
            f'<rect x="180" y="{y}" width="{w:.1f}" height="18" fill="{_COLORS[i % 7]}"/>'
            f'<text x="{185 + w:.1f}" y="{y + 14}" font-size="12">{v:g}{unit}</text>'
        )
    return (
        f'<svg width="{_W}" height="{h}" xmlns="http://www.w3.org/2000/svg">{"".join(rows)}</svg>'
    )


def lines(series: dict[str, list[tuple[float, float]]], ylabel: str) -> str:
    """A line chart of ``series`` (name -> [(x: epoch minute, y)])."""
    pts = [p for s in series.values() for p in s]
    if not pts:
        return "<p><i>no data</i></p>"
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y1 = max(p[1] for p in pts) or 1
    xs = (x1 - x0) or 1

    def px(x: float, y: float) -> str:
        return f"{_PAD + (_W - 2 * _PAD) * (x - x0) / xs:.1f},{_H - _PAD - (_H - 2 * _PAD) * y / y1:.1f}"

    out = [
        f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}" stroke="#999"/>',
        f'<line x1="{_PAD}" y1="{_PAD}" x2="{_PAD}" y2="{_H - _PAD}" stroke="#999"/>',
        f'<text x="2" y="{_PAD - 8}" font-size="11">{_e(ylabel)} (max {y1:g})</text>',
        f'<text x="{_PAD}" y="{_H - 22}" font-size="11">{_minute(x0)}</text>',
        f'<text x="{_W - _PAD - 90}" y="{_H - 22}" font-size="11">{_minute(x1)}</text>',
    ]
    for i, (name, s) in enumerate(sorted(series.items())):
        c = _COLORS[i % 7]
        s = sorted(s)
        if len(s) == 1:
            x, y = px(*s[0]).split(",")
            out.append(f'<circle cx="{x}" cy="{y}" r="3" fill="{c}"/>')
        else:
            out.append(
                f'<polyline fill="none" stroke="{c}" stroke-width="1.5" '
                f'points="{" ".join(px(*p) for p in s)}"/>'
            )
        out.append(  # the legend, below the plot
            f'<text x="{_PAD + 10}" y="{_H + 14 * i}" font-size="11" fill="{c}">{_e(name)}</text>'
        )
    h = _H + 14 * len(series)
    return f'<svg width="{_W}" height="{h}" xmlns="http://www.w3.org/2000/svg">{"".join(out)}</svg>'


def _minute(m: float) -> str:
    return dt.datetime.fromtimestamp(m * 60, dt.UTC).strftime("%Y-%m-%d %H:%M")


def _table(rows: list[dict[str, object]]) -> str:
    if not rows:
        return "<p><i>none</i></p>"
    head = "".join(f"<th>{_e(k)}</th>" for k in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{_e(v)}</td>" for v in r.values()) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def write_report(spark: SparkSession, out: Path, summary: dict[str, object]) -> Path:
    """Read the tables under ``out`` back (they are small) and write ``out/report.html``."""
    rd = spark.read.parquet
    status = summary["status"]
    assert isinstance(status, dict)
    routes = rd(str(out / "routes")).collect()
    lat = rd(str(out / "latency")).where(F.col("stage") == "ack").collect()
    latall = (
        rd(str(out / "latency"))
        .groupBy("route", "stage")
        .agg(F.max("p95_ms").alias("worst_p95_ms"), F.max("max_ms").alias("max_ms"))
        .orderBy("route", "stage")
        .collect()
    )
    dl = rd(str(out / "dead_letters")).orderBy(F.desc("messages")).collect()
    bl = rd(str(out / "backlog")).collect()
    anomalies = rd(str(out / "anomalies")).orderBy("last_us").limit(200).collect()

    thr: dict[str, list[tuple[float, float]]] = {}
    for r in routes:
        thr.setdefault(r["route"], []).append((r["minute"], r["messages"]))
    p95: dict[str, list[tuple[float, float]]] = {}
    for r in lat:
        p95.setdefault(r["route"], []).append((r["minute"], r["p95_ms"]))
    back: dict[str, list[tuple[float, float]]] = {}
    for r in bl:
        back.setdefault(f"{r['node']}:{r['queue']}", []).append((r["minute"], r["backlog"]))
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Waystation reconcile</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:60em}table{border-collapse:"
        "collapse;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}"
        "h2{margin-top:1.6em}</style></head><body>",
        "<h1>Waystation: cross-site reconciliation</h1>",
        f"<p>{summary['events']} events from nodes {_e(', '.join(summary['nodes']))} "  # type: ignore[arg-type]
        f"&mdash; {summary['messages']} messages.</p>",
        "<h2>Status per message</h2>",
        bars([(k, float(v)) for k, v in status.items()]),
        "<h2>Lost and duplicated messages</h2>",
        _table(
            [
                {
                    "trace": a["trace_id"],
                    "status": a["status"],
                    "origin": a["origin_node"],
                    "address": a["address"],
                    "nodes": " ".join(a["nodes"] or []),
                    "detail": a["detail"],
                }
                for a in anomalies
            ]
        ),  # fmt: skip
        "<h2>Throughput per route (messages per minute)</h2>",
        lines(thr, "messages/min"),
        "<h2>Accept to acknowledgement, p95 per route (ms)</h2>",
        lines(p95, "p95 ms"),
        "<h2>Latency per route and stage (worst minute)</h2>",
        _table(
            [
                {
                    "route": r["route"],
                    "stage": r["stage"],
                    "worst p95 ms": round(r["worst_p95_ms"], 1),
                    "max ms": round(r["max_ms"], 1),
                }
                for r in latall
            ]
        ),  # fmt: skip
        "<h2>Dead letters by reason</h2>",
        bars([(f"{r['node']}: {r['reason']}", float(r["messages"])) for r in dl]),
        "<h2>Store-and-forward backlog</h2>",
        lines(back, "messages waiting"),
        "</body></html>",
    ]
    path = out / "report.html"
    path.write_text("".join(parts))
    return path
