"""The keep-alive wheel: one loop timer for every connection; a silent connection expires
within RESOLUTION of its deadline, one heard from moves on, a closed one is forgotten."""

from __future__ import annotations

import asyncio
import time

from waystation.gateway.mqtt.keepalive import RESOLUTION, keepalive


class Conn:
    def __init__(self, keepalive: float) -> None:
        self._last_read = time.monotonic()
        self._keepalive = keepalive
        self._ka_key = 0
        self.closed = False
        self.expired_at: float | None = None

    def keepalive_expired(self) -> None:
        self.expired_at = time.monotonic()
        self.closed = True


def test_silent_expires_active_moves_on_closed_is_forgotten(run):
    async def go() -> None:
        wheel = keepalive(asyncio.get_running_loop())
        silent, active, gone = Conn(0.3), Conn(0.3), Conn(0.3)
        t0 = time.monotonic()
        for c in (silent, active, gone):
            wheel.watch(c)
        wheel.unwatch(gone)
        for _ in range(6):  # active: a packet every 0.1 s for 0.6 s
            await asyncio.sleep(0.1)
            active._last_read = time.monotonic()
        assert silent.expired_at is not None
        assert 0.3 <= silent.expired_at - t0 <= 0.3 + RESOLUTION + 0.15
        assert active.expired_at is None and gone.expired_at is None
        await asyncio.sleep(0.3 + RESOLUTION + 0.15)
        assert active.expired_at is not None  # silent since: gone too
        assert gone.expired_at is None
        assert not any(wheel.buckets.values())  # nothing left waiting

    run(go())


def test_many_connections_share_one_timer(run):
    async def go() -> None:
        wheel = keepalive(asyncio.get_running_loop())
        conns = [Conn(60 + i % 7) for i in range(1000)]
        for c in conns:
            wheel.watch(c)
        assert wheel.handle is not None and wheel.armed == min(wheel.keys)
        assert sum(len(b) for b in wheel.buckets.values()) == 1000
        for c in conns:
            wheel.unwatch(c)
        assert sum(len(b) for b in wheel.buckets.values()) == 0

    run(go())
