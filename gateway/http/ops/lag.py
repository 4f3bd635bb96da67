"""Event-loop lag, sampled from the node's start (``waystation_event_loop_lag_*``).

A small task sleeps a fixed interval and records how late it woke: a loop blocked by a slow
callback shows as lag.  It lives apart from :mod:`.metrics` so that the node can start it
before the web application and the Prometheus library are loaded (see :mod:`.front`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

LAG_INTERVAL = 0.25  # seconds between event-loop lag samples


class LoopLag:
    """How late the event loop runs a timer: the last sample and the worst since the last
    scrape (a stall between scrapes is not averaged away)."""

    def __init__(self, interval: float = LAG_INTERVAL) -> None:
        self.interval = interval
        self.last = 0.0
        self.worst = 0.0
        self.samples = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(self.interval)
            lag = max(0.0, time.monotonic() - t0 - self.interval)
            self.last = lag
            self.worst = max(self.worst, lag)
            self.samples += 1

    def take_worst(self) -> float:
        w, self.worst = self.worst, self.last
        return w


__all__ = ["LAG_INTERVAL", "LoopLag"]
