"""Keep-alive deadlines of every MQTT connection on one loop timer.

A timer per connection costs a loop timer handle each (about half a KiB with uvloop's native
timer), which is most of what an idle connection costs the adapter.  Here connections wait in
buckets of ``RESOLUTION`` seconds and one timer fires for the earliest bucket: a connection
that was heard from meanwhile moves to the bucket of its new deadline, a silent one is told
:meth:`expired`.  Reading a packet only stamps the connection's ``_last_read``, as before;
a deadline is late by at most ``RESOLUTION``.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import time
import weakref
from typing import Protocol

RESOLUTION = 0.25  # seconds per bucket
_monotonic = time.monotonic


class Watched(Protocol):
    _last_read: float  # monotonic time of the last bytes read
    _keepalive: float  # seconds of silence allowed (grace x keep-alive)
    _ka_key: int  # the bucket it waits in (0: none)
    closed: bool

    def keepalive_expired(self) -> None: ...


class KeepAlive:
    __slots__ = ("__weakref__", "loop", "buckets", "keys", "handle", "armed")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.buckets: dict[int, dict[Watched, None]] = {}
        self.keys: list[int] = []  # heap of the bucket keys
        self.handle: asyncio.TimerHandle | None = None
        self.armed = 0  # the bucket key the timer is set for (0: none, -1: firing)

    def watch(self, c: Watched) -> None:
        """Wait for ``c``'s deadline (``_last_read + _keepalive``)."""
        key = math.ceil((c._last_read + c._keepalive) / RESOLUTION)
        self.unwatch(c)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = {}
            heapq.heappush(self.keys, key)
        bucket[c] = None
        c._ka_key = key
        if self.armed >= 0 and (not self.armed or key < self.armed):
            self._arm(key)

    def unwatch(self, c: Watched) -> None:
        key = c._ka_key
        if key:
            c._ka_key = 0
            bucket = self.buckets.get(key)
            if bucket is not None:
                bucket.pop(c, None)  # an empty bucket goes when its time comes

    def _arm(self, key: int) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.armed = key
        delay = max(0.0, key * RESOLUTION - _monotonic())
        self.handle = self.loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self.handle = None
        self.armed = -1  # firing: watch() leaves the timer to the end of this
        now = _monotonic()
        due = math.floor(now / RESOLUTION)
        keys, buckets = self.keys, self.buckets
        while keys and keys[0] <= due:
            bucket = buckets.pop(heapq.heappop(keys), None) or {}
            for c in bucket:
                c._ka_key = 0
                if c.closed:
                    continue
                if c._last_read + c._keepalive <= now:
                    c.keepalive_expired()
                else:
                    self.watch(c)
        self.armed = 0
        if keys:
            self._arm(keys[0])


_wheels: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, KeepAlive] = (
    weakref.WeakKeyDictionary()
)


def keepalive(loop: asyncio.AbstractEventLoop) -> KeepAlive:
    """The keep-alive wheel of ``loop``."""
    w = _wheels.get(loop)
    if w is None:
        w = _wheels[loop] = KeepAlive(loop)
    return w


__all__ = ["RESOLUTION", "KeepAlive", "keepalive"]
