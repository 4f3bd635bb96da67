"""Pulling messages: the consume-next and acknowledge-next protocols (see :mod:`pull`).

- ``POST .../auto-ack/{id}/consume-next-{n}``: 200 with the message (acknowledged), a new
  ``msg-consume-next`` and ``msg-consumer``; 503 + ``Retry-After`` + ``msg-consume-next`` when
  nothing came within ``Accept-Wait`` seconds (capped at ``max_accept_wait``); the previous
  URL again -> the same message; any other n -> 412 with the right link.
- ``POST .../acknowledged/{id}/acknowledge-next-{n}``: 200 with the message (not yet
  acknowledged) and ``msg-acknowledgement``; re-POSTed -> the same message; 503 as above.
- ``POST .../acknowledgement/{n}`` with ``acknowledge=true|false``: 200 with
  ``msg-acknowledge-next``; false gives the message back for redelivery; re-POSTed -> the
  same answer; stale -> 412 with the right link.  A durable acknowledgement is answered once
  it is on disk.
- A durable subscription re-attached after a restart answers 412 with a fresh link: what it
  handed out before is back in its queue.

Requests on one consumer are served one at a time (a second waits for the first).  The
``Accept-Wait`` budget counts from the request's arrival, waiting for the consumer included:
a poll queued behind another answers 503 when its own time is up, never later.  While the
server stops, a poll answers 503 at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from waystation.core.consumer import Delivery
from waystation.core.session import Outcome
from waystation.gateway.http.rest.consumers import lookup, next_links, params
from waystation.gateway.http.rest.errors import fail, guarded
from waystation.gateway.http.rest.links import Paths
from waystation.gateway.http.rest.mapping import (
    DELIVERY_COUNT,
    message_headers,
    parse_bool,
    parse_seconds,
)
from waystation.gateway.http.rest.pull import PullConsumer, Snapshot
from waystation.gateway.http.rest.service import SERVICE, RestService

NO_MESSAGE = "no message available"
BUSY = "the consumer is busy with another request: try again"


class Turn:
    """One request on one consumer: builds its answers."""

    def __init__(self, request: web.Request, c: PullConsumer, paths: Paths, arrived: float) -> None:
        self.request = request
        self.svc: RestService = request.app[SERVICE]
        self.c = c
        self.paths = paths
        self.arrived = arrived  # loop time

    def deadline(self) -> float:
        """When this poll must have answered (loop time)."""
        wait = parse_seconds("Accept-Wait header", self.request.headers.get("Accept-Wait"))
        return self.arrived + min(wait or 0.0, self.svc.cfg.max_accept_wait.total_seconds())

    @contextlib.asynccontextmanager
    async def hold(self, deadline: float, why: str = NO_MESSAGE) -> AsyncIterator[None]:
        """The consumer to this request alone, waited for until ``deadline`` (then 503)."""
        c = self.c
        c.busy += 1
        try:
            lock = c.lock
            if lock.locked():
                left = deadline - asyncio.get_running_loop().time()
                if c.stopping or left <= 0:
                    raise self.refuse(web.HTTPServiceUnavailable, why)
                try:
                    async with asyncio.timeout(left):
                        await lock.acquire()
                except TimeoutError:
                    raise self.refuse(web.HTTPServiceUnavailable, why) from None
            else:
                await lock.acquire()
            try:
                c.touch()
                yield
            finally:
                lock.release()
        finally:
            c.busy -= 1
            c.touch()

    async def take(self, deadline: float) -> Delivery:
        """The next message by ``deadline``; 404 when the consumer closed, else 503."""
        left = deadline - asyncio.get_running_loop().time()
        d = await self.c.take(max(left, 0.0))
        if self.c.closed:
            raise self.gone()
        if d is None:
            raise self.refuse(web.HTTPServiceUnavailable, NO_MESSAGE)
        return d

    def links(self) -> dict[str, str]:
        return next_links(self.svc.links(self.request), self.c, self.paths).headers()

    def refuse(self, status: type[web.HTTPException], why: str) -> web.HTTPException:
        headers = self.links()
        if status is web.HTTPServiceUnavailable:
            headers["Retry-After"] = str(max(0, round(self.svc.cfg.retry_after.total_seconds())))
        return fail(status, why, headers)

    def stale(self, why: str) -> web.HTTPException:
        return self.refuse(web.HTTPPreconditionFailed, why)

    def message(self, snap: Snapshot) -> web.Response:
        headers = message_headers(snap.message)
        headers[DELIVERY_COUNT] = str(snap.delivery_count)
        headers.update(self.links())
        return web.Response(status=200, body=snap.message.body, headers=headers)

    def gone(self) -> web.HTTPException:
        return fail(web.HTTPNotFound, f"consumer {self.c.id!r} was closed")


async def _turn(request: web.Request, auto_ack: bool) -> tuple[Turn, int]:
    arrived = asyncio.get_running_loop().time()
    c, paths, fresh = await lookup(request, auto_ack)
    turn = Turn(request, c, paths, arrived)
    if fresh:
        raise turn.stale("consumer re-attached after a restart: use the new link")
    return turn, int(request.match_info["n"])


@guarded
async def consume_next(request: web.Request) -> web.StreamResponse:
    turn, n = await _turn(request, True)
    deadline = turn.deadline()
    c = turn.c
    async with turn.hold(deadline):
        if n == c.next_index:
            d = await turn.take(deadline)
            snap = Snapshot(d.message, d.delivery_count)
            c.settle(d, Outcome.ACCEPTED)
            c.cached = (n, snap)
            c.next_index = n + 1
            return turn.message(snap)
        if c.cached is not None and c.cached[0] == n:
            return turn.message(c.cached[1])
        raise turn.stale(f"consume-next-{n} is stale")


@guarded
async def acknowledge_next(request: web.Request) -> web.StreamResponse:
    turn, n = await _turn(request, False)
    deadline = turn.deadline()
    c = turn.c
    async with turn.hold(deadline):
        if c.pending is not None:
            idx, held = c.pending
            if idx != n:
                raise turn.stale(
                    f"acknowledge-next-{n} is stale: a message awaits its acknowledgement"
                )
            return turn.message(Snapshot(held.message, held.delivery_count))
        if n != c.next_index:
            raise turn.stale(f"acknowledge-next-{n} is stale")
        d = await turn.take(deadline)
        c.pending = (n, d)
        return turn.message(Snapshot(d.message, d.delivery_count))


@guarded
async def acknowledgement(request: web.Request) -> web.StreamResponse:
    p = await params(request)
    if "acknowledge" not in p:
        raise fail(web.HTTPBadRequest, "missing form parameter acknowledge=true|false")
    ack = parse_bool("acknowledge", p["acknowledge"], True)
    turn, n = await _turn(request, False)
    c = turn.c
    async with turn.hold(turn.arrived + turn.svc.cfg.max_accept_wait.total_seconds(), BUSY):
        if c.pending is not None and c.pending[0] == n:
            _, d = c.pending
            c.pending = None
            session = c.session
            # false: a failed delivery (counted; redelivered after the delay or dead-lettered)
            c.settle(d, Outcome.ACCEPTED if ack else Outcome.MODIFIED)
            c.last_ack = (n, ack)
            c.next_index = n + 1
            if ack and d.message.durable and session is not None:
                await session.flush()  # answered once the acknowledgement is on disk
        elif c.last_ack is None or c.last_ack[0] != n:
            raise turn.stale(f"acknowledgement/{n} is stale")
        return web.Response(status=200, headers=turn.links())


def setup_routes(app: web.Application) -> None:
    r = app.router
    n = "{n:[0-9]{1,18}}"
    for kind, factory in (("queues", "pull-consumers"), ("topics", "pull-subscriptions")):
        base = f"/{kind}/{{name}}/{factory}"
        r.add_post(f"{base}/auto-ack/{{cid}}/consume-next-{n}", consume_next)
        r.add_post(f"{base}/acknowledged/{{cid}}/acknowledge-next-{n}", acknowledge_next)
        r.add_post(f"{base}/acknowledged/{{cid}}/acknowledgement/{n}", acknowledgement)


__all__ = ["setup_routes"]
