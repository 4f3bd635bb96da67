"""The admin API's long lists (addresses, queues) in pages, at a cost a caller cannot inflate.

Why: anyone allowed to create names (a client auto-creating addresses by publishing) can make
a node hold a hundred thousand of them; answering all in one JSON document took seconds of
the event loop, during which no client was served.  So a list is answered a page at a time,
sorted by name: ``?limit=`` (default :data:`DEFAULT_LIMIT`, at most :data:`MAX_LIMIT`) and
``?after=<the last name of the previous page>``; the answer carries ``total`` (what the caller
may see) and ``next`` (the cursor for the following page, or null).  Finding a page is one
pass over the names, keeping the ``limit`` smallest, and it gives the loop back every
:data:`CHUNK` names.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from aiohttp import web

from waystation.core.postoffice import PostOffice
from waystation.gateway.http.admin import guard

DEFAULT_LIMIT = 500
MAX_LIMIT = 1000
CHUNK = 2048  # names looked at between two yields to the event loop

T = TypeVar("T")


@dataclass(slots=True)
class Page(Generic[T]):
    items: list[T]
    total: int
    limit: int
    next: str | None

    def meta(self) -> dict[str, object]:
        return {"total": self.total, "limit": self.limit, "next": self.next}


def _limit(request: web.Request) -> int:
    text = request.query.get("limit")
    if text is None:
        return DEFAULT_LIMIT
    if not text.isdigit() or int(text) < 1:
        raise guard.error(web.HTTPBadRequest, "limit must be a positive integer")
    return min(int(text), MAX_LIMIT)


async def page(
    request: web.Request,
    items: Sequence[T],
    key: Callable[[T], str],
    visible: Callable[[T], bool] | None,
) -> Page[T]:
    """The page of ``items`` (sorted by ``key``) the request asks for, of those ``visible``
    (None: all) to the caller."""
    limit = _limit(request)
    after = request.query.get("after")
    best: list[T] = []
    total = 0
    for start in range(0, len(items), CHUNK):
        if start:
            await asyncio.sleep(0)
        chunk = items[start : start + CHUNK]
        seen = chunk if visible is None else [i for i in chunk if visible(i)]
        total += len(seen)
        wanted = seen if after is None else [i for i in seen if key(i) > after]
        if wanted:
            best = heapq.nsmallest(limit + 1, [*best, *wanted], key=key)
    more = len(best) > limit
    best = best[:limit]
    return Page(best, total, limit, key(best[-1]) if more and best else None)


async def address_infos(post: PostOffice, names: list[str]) -> list[dict[str, object]]:
    """What the API shows of each address in ``names``: routing, queues, memory bytes."""
    wanted = set(names)
    queues: dict[str, list[str]] = {}
    all_queues = list(post.queues.values())
    for start in range(0, len(all_queues), CHUNK * 4):
        if start:
            await asyncio.sleep(0)
        for q in all_queues[start : start + CHUNK * 4]:
            if q.address in wanted:
                queues.setdefault(q.address, []).append(q.name)
    out: list[dict[str, object]] = []
    for name in names:
        a = post.addresses.get(name)
        if a is None:  # removed while the page was found
            continue
        out.append(
            {
                "name": a.name,
                "routing": a.routing,
                "auto_created": a.auto_created,
                "queues": sorted(queues.get(name, [])),
                "memory_bytes": post.memory_bytes(name),
            }
        )
    return out


__all__ = ["CHUNK", "DEFAULT_LIMIT", "MAX_LIMIT", "Page", "address_infos", "page"]
