"""What an operator's tools read from a node over HTTP: health probes and Prometheus metrics.

- :mod:`.health`: ``GET /health`` (the process serves) and ``GET /ready`` (the store is
  recovered and every listener accepts; not while stopping);
- :mod:`.metrics`: ``GET /metrics``, read at scrape time from counters the core keeps;
  :mod:`.lag`: the event-loop lag it reports;
- :mod:`.probes` and :mod:`.front`: the HTTP port before the web application is built, which
  answers the two probes itself and builds the application for any other request.

This package imports nothing heavy itself: the node loads :mod:`.front` at start, and the
aiohttp and Prometheus modules come with :func:`setup`, when the application is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

    from waystation.gateway.http.context import HttpContext
    from waystation.gateway.http.ops.lag import LoopLag


def setup(app: web.Application, ctx: HttpContext, lag: LoopLag | None = None) -> None:
    from waystation.gateway.http.ops import health, metrics

    health.setup(app, ctx)
    metrics.setup(app, ctx, lag)


__all__ = ["setup"]
