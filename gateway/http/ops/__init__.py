"""What an operator's tools read from a node over HTTP: health probes and Prometheus metrics.

- :mod:`.health`: ``GET /health`` (the process serves) and ``GET /ready`` (the store is
  recovered and every listener accepts; not while stopping);
- :mod:`.metrics`: ``GET /metrics``, read at scrape time from counters the core keeps.
"""

from __future__ import annotations

from aiohttp import web

from waystation.gateway.http.context import HttpContext
from waystation.gateway.http.ops import health, metrics


def setup(app: web.Application, ctx: HttpContext) -> None:
    health.setup(app, ctx)
    metrics.setup(app, ctx)


__all__ = ["setup"]
