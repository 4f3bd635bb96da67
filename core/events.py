"""Lifecycle events: every hop of a message (accepted, routed, delivered, acked ...).

The engine calls ``EventSink.emit``; the default sink does nothing so the hot path pays only
an attribute test.  ``JsonlEventLog`` writes one JSON object per line to rolling files that
the PySpark pipeline reads.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Protocol

log = logging.getLogger("waystation.events")

ACCEPTED = "accepted"
ROUTED = "routed"
DIVERTED = "diverted"
DELIVERED = "delivered"
ACKED = "acked"
DEAD_LETTERED = "dead-lettered"
EXPIRED = "expired"
FORWARDED = "forwarded"
DROPPED = "dropped"
DUPLICATE = "duplicate"


class EventSink(Protocol):
    def emit(
        self,
        kind: str,
        message_id: int,
        address: str,
        size: int,
        queue: str | None = None,
        **extra: object,
    ) -> None: ...

    def close(self) -> None: ...


class JsonlEventLog:
    """Rolling JSON Lines files: ``events-000001.jsonl`` ...; the oldest beyond ``max_files``
    are removed.  Lines are buffered and flushed at least every ``flush_interval`` seconds."""

    def __init__(
        self,
        directory: Path | str,
        node: str,
        *,
        max_file_size: int = 64 * 1024 * 1024,
        max_files: int = 10,
        flush_interval: float = 1.0,
    ) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.node = node
        self.max_file_size = max_file_size
        self.max_files = max_files
        self.flush_interval = flush_interval
        existing = sorted(self.dir.glob("events-*.jsonl"))
        self._seq = int(existing[-1].stem.split("-")[1]) if existing else 0
        self._open_next()
        self._last_flush = time.monotonic()

    def _open_next(self) -> None:
        self._seq += 1
        self.path = self.dir / f"events-{self._seq:06d}.jsonl"
        self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open
        self._written = self._fh.tell()
        files = sorted(self.dir.glob("events-*.jsonl"))
        for old in files[: max(0, len(files) - self.max_files)]:
            try:
                old.unlink()
            except OSError as e:
                log.warning("cannot remove old event log %s: %s", old, e)

    def emit(
        self,
        kind: str,
        message_id: int,
        address: str,
        size: int,
        queue: str | None = None,
        **extra: object,
    ) -> None:
        rec: dict[str, object] = {
            "ts": int(time.time() * 1000),
            "event": kind,
            "node": self.node,
            "message_id": message_id,
            "address": address,
            "size": size,
        }
        if queue is not None:
            rec["queue"] = queue
        if extra:
            rec.update(extra)
        line = json.dumps(rec, separators=(",", ":"), default=str) + "\n"
        self._fh.write(line)
        self._written += len(line)
        if self._written >= self.max_file_size:
            self._fh.close()
            self._open_next()
        now = time.monotonic()
        if now - self._last_flush >= self.flush_interval:
            self._fh.flush()
            self._last_flush = now

    def close(self) -> None:
        try:
            self._fh.flush()
            os.fsync(self._fh.fileno())
        finally:
            self._fh.close()
