"""The durable topic subscriptions REST made for pull consumers, remembered across restarts.

A pull subscription URL names its queue, and after a restart REST re-attaches a consumer to
that queue.  It must only ever do so for queues it made itself: any other durable queue of the
topic belongs to someone else (a push registration's ``{topic}.push-{id}``, whose id is public
in its Location; a STOMP client's durable subscription), and attaching would steal its
messages, a DELETE would destroy it.  The queue name alone cannot tell (a STOMP client picks
any name), so REST keeps its own record: one small file per subscription, ``{hash}.json``
holding its name and topic, under ``node.data_dir / rest-subscriptions``.  Without persistence
the record lives in memory, as the durable queues themselves do.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("waystation.rest")

DIRECTORY = "rest-subscriptions"


class SubscriptionStore:
    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.topics: dict[str, str] = {}  # subscription (queue) name -> its topic

    def owns(self, name: str, topic: str) -> bool:
        """Whether REST made the subscription ``name`` of ``topic`` (and may attach to it)."""
        return self.topics.get(name) == topic

    def _path(self, name: str) -> Path:
        assert self.directory is not None
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:40]
        return self.directory / f"{digest}.json"

    async def load(self, alive: Callable[[str, str], bool]) -> None:
        """Read the record; entries whose queue is gone (deleted while REST did not look)
        are dropped."""
        if self.directory is None:
            return
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(None, _read_all, self.directory)
        for path, name, topic in found:
            if alive(name, topic):
                self.topics[name] = topic
            else:
                log.info("REST subscription %s of %s no longer exists: forgotten", name, topic)
                path.unlink(missing_ok=True)

    async def add(self, name: str, topic: str) -> None:
        """Remember ``name`` (on disk before this returns; raises OSError when it cannot)."""
        if self.topics.get(name) == topic:
            return
        if self.directory is not None:
            data = json.dumps({"name": name, "topic": topic}).encode()
            path = self._path(name)
            await asyncio.get_running_loop().run_in_executor(None, write_durably, path, data)
        self.topics[name] = topic

    def discard(self, name: str) -> None:
        if self.topics.pop(name, None) is not None and self.directory is not None:
            try:
                self._path(name).unlink(missing_ok=True)
            except OSError as e:  # a stale entry is dropped at the next start
                log.warning("REST subscription %s: record not removed: %s", name, e)


def write_durably(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``, on disk before this returns (never half-written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_all(directory: Path) -> list[tuple[Path, str, str]]:
    if not directory.is_dir():
        return []
    out: list[tuple[Path, str, str]] = []
    for path in sorted(directory.glob("*.json")):
        try:
            v = json.loads(path.read_bytes())
            out.append((path, str(v["name"]), str(v["topic"])))
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.error("REST subscription record %s skipped: %s", path, e)
    return out


__all__ = ["DIRECTORY", "SubscriptionStore", "write_durably"]
