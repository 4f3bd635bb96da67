"""Lifecycle events published live as messages (``[node.event_log] publish_address``).

An :class:`EventFeed` is the engine's event sink: it passes every event on to the event log
(when there is one) and publishes each event as a message to a management address, so a
consumer (a STOMP client, a Spark streaming query through ``format("waystation")``) follows
the flow while it happens instead of reading files after the fact.

The engine emits events in the middle of routing a message; sending from there would route a
second message inside the first.  So ``emit`` only appends the record to a bounded buffer and
schedules one flush on the event loop; the flush sends the buffered records as messages
(non-durable: the files are the record that survives a crash; a full buffer drops and counts).

Loop guard: publishing a message makes events of its own (accepted, routed, delivered ...).
Events about the publish address, and about any message the feed made (its trace id, kept by
diverts and bridges, names the feed), are never published, so the feed never feeds itself.

Each message: body the event as one JSON object (the keys of the JSON Lines log), content
type ``application/json``, and the properties ``event``, ``node``, ``address``, ``queue`` and
``trace_id`` (strings, for selectors such as ``event = 'dead_lettered'``).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
from typing import TYPE_CHECKING

from waystation.core.events import SCHEMA_VERSION, EventSink

if TYPE_CHECKING:
    from waystation.core.engine import Engine

log = logging.getLogger(__name__)

#: The trace-id segment that marks a message the feed published (``node/event-feed/id``).
FEED_MARK = "/event-feed/"
_PROPERTIES = ("event", "node", "address", "queue", "trace_id")

Record = dict[str, object]


class EventFeed:
    """An :class:`~waystation.core.events.EventSink` that tees into ``inner`` (the event log,
    or None) and publishes to ``address`` once :meth:`attach` gave it the engine."""

    def __init__(
        self,
        address: str,
        node: str,
        inner: EventSink | None = None,
        *,
        buffer_limit: int = 10_000,
        warn_interval: float = 10.0,
    ) -> None:
        self.address = address
        self.node = node
        self.inner = inner
        self.buffer_limit = buffer_limit
        self.warn_interval = warn_interval
        self.published = 0
        self.dropped = 0
        self._buf: collections.deque[Record] = collections.deque()
        self._engine: Engine | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False
        self._last_warn = -1e18

    def attach(self, engine: Engine) -> None:
        """Start publishing through ``engine`` (call on its loop, once it has started);
        events before this are only passed on to the event log."""
        self._engine = engine
        self._loop = asyncio.get_running_loop()

    # --- the sink ---------------------------------------------------------------------------
    def emit(
        self,
        kind: str,
        message_id: int,
        address: str,
        size: int,
        queue: str | None = None,
        **extra: object,
    ) -> None:
        if self.inner is not None:
            self.inner.emit(kind, message_id, address, size, queue, **extra)
        if self._engine is None or not self.wanted(address, queue, extra.get("trace_id")):
            return
        if len(self._buf) >= self.buffer_limit:
            self._drop()
            return
        rec: Record = {
            "v": SCHEMA_VERSION,
            "ts_us": time.time_ns() // 1000,
            "node": self.node,
            "event": kind,
            "trace_id": extra.get("trace_id"),
            "message_id": message_id,
            "address": address,
            "queue": queue,
            "protocol": extra.get("protocol"),
            "session": extra.get("session"),
            "size": size,
            "durable": extra.get("durable"),
            "delivery_count": extra.get("delivery_count"),
            "reason": extra.get("reason"),
            "peer": extra.get("peer"),
        }
        self._buf.append(rec)
        if not self._scheduled and self._loop is not None:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def wanted(self, address: str, queue: str | None, trace_id: object) -> bool:
        """False for the events the loop guard keeps back."""
        if address == self.address or queue == self.address:
            return False
        return not (isinstance(trace_id, str) and FEED_MARK in trace_id)

    def close(self) -> None:
        self._engine = None  # nothing is published once the node closes its sink
        self._buf.clear()
        if self.inner is not None:
            self.inner.close()

    # --- publishing -------------------------------------------------------------------------
    def _flush(self) -> None:
        self._scheduled = False
        engine = self._engine
        buf = self._buf
        while buf and engine is not None:
            rec = buf.popleft()
            props = {k: str(rec[k]) for k in _PROPERTIES if rec[k] is not None}
            body = json.dumps(rec, separators=(",", ":")).encode()
            msg = engine.make_message(self.address, body, props)  # type: ignore[arg-type]
            msg.content_type = "application/json"
            msg.trace_id = f"{self.node}{FEED_MARK}{msg.id}"
            try:
                engine.send(msg)
                self.published += 1
            except Exception as e:  # no route, address full, a stopping engine: never raise
                self._drop(str(e))

    def _drop(self, why: str = "") -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._last_warn >= self.warn_interval:
            self._last_warn = now
            log.warning(
                "event feed %s: %d events not published (%s)",
                self.address,
                self.dropped,
                why or f"buffer of {self.buffer_limit} full",
            )
