"""Duplicate detection: a bounded, per-address cache of recently seen duplicate ids.

A resend after a failure (a bridge reconnecting, a REST client reposting) carries the same id
and is dropped.  The cache is persisted as journal records so it survives restart; evicting
the oldest id deletes its record.
"""

from __future__ import annotations

from collections import OrderedDict


class DuplicateCache:
    def __init__(self, size: int) -> None:
        self.size = size
        self._ids: OrderedDict[str | bytes, int] = OrderedDict()  # id -> journal record id

    def __contains__(self, dup_id: str | bytes) -> bool:
        return dup_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, dup_id: str | bytes, record_id: int) -> list[int]:
        """Remember ``dup_id``; return the record ids of entries evicted to make room."""
        self._ids[dup_id] = record_id
        evicted: list[int] = []
        while len(self._ids) > self.size:
            _, rid = self._ids.popitem(last=False)
            evicted.append(rid)
        return evicted
