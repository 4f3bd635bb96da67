"""One tunnel session: a protocol session, its link, and the offsets of both directions.

Flow control: a poll takes bytes out of the link only up to ``max_response`` unacknowledged
bytes, and the link pauses the protocol at ``high``.  So the link's thresholds plus one
response bound what the server holds for a slow client; the rest waits in the queues.
"""

from __future__ import annotations

import asyncio
import time

from gateway.http.tunnel.protocols import StreamSession
from gateway.queued_link import QueuedLink
from wire.tunnel import DownstreamSender, UpstreamReceiver

MAX_RESPONSE = 256 * 1024  # bytes of one downstream answer (and of unacknowledged data)
LINK_HIGH = 768 * 1024  # with MAX_RESPONSE: about 1 MiB held per session at most
LINK_LOW = 256 * 1024


class Ended(Exception):
    """The session is over (closed, timed out or the server is stopping)."""


class TunnelSession:
    def __init__(self, sid: str, protocol: str, link: QueuedLink, stream: StreamSession) -> None:
        self.sid = sid
        self.protocol = protocol
        self.link = link
        self.stream = stream
        self.upstream = UpstreamReceiver()
        self.downstream = DownstreamSender()
        self.ended = False
        self.last_seen = time.monotonic()
        self.active = 0  # requests being handled now (a held poll counts)
        self._poll: asyncio.Future[None] | None = None  # the held poll's wake-up

    @property
    def finished(self) -> bool:
        """The protocol session closed itself and everything it wrote has been taken."""
        return self.link.closing and not self.link.pending

    def idle_for(self, now: float) -> float:
        return 0.0 if self.active else now - self.last_seen

    def begin(self) -> None:
        self.active += 1
        self.last_seen = time.monotonic()

    def done(self) -> None:
        self.active -= 1
        self.last_seen = time.monotonic()

    # -- upstream -------------------------------------------------------------------------
    async def up(self, offset: int, data: bytes) -> int:
        """Feed the new part of a POST body; the upstream offset reached.  The answer waits
        while the protocol has paused reading (a durable send not yet stored), so a fast
        client is held back here.  OffsetError on a gap, Ended when the session is over."""
        if self.ended or self.link.closing:
            raise Ended
        new = self.upstream.accept(offset, data)
        if new:
            self.stream.data_received(new)
        reading = self.link.reading
        while not reading.is_set() and not self.ended and not self.link.closing:
            try:
                await asyncio.wait_for(reading.wait(), 1.0)
            except TimeoutError:
                pass
        return self.upstream.received

    # -- downstream -----------------------------------------------------------------------
    async def down(self, ack: int, hold: float) -> tuple[int, bytes, bool]:
        """Answer a poll: (offset, body, closed).  Bytes before ``ack`` are released; when
        nothing waits the poll is held up to ``hold`` seconds.  A newer poll supersedes
        this one, which then answers empty.  OffsetError if ``ack`` is beyond what was sent."""
        self.downstream.ack(ack)
        if self._poll is not None and not self._poll.done():
            self._poll.set_result(None)
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._poll = wake
        link = self.link
        if not self.downstream.unacked and not link.pending and not link.closing:
            if self.ended:
                return self.downstream.acked, b"", True
            waiter = asyncio.ensure_future(link.wait())
            try:
                await asyncio.wait((waiter, wake), timeout=hold, return_when="FIRST_COMPLETED")
            finally:
                waiter.cancel()
            if self._poll is not wake:  # superseded
                return self.downstream.acked, b"", False
        self._poll = None
        if self.ended:
            return self.downstream.acked, b"", True
        room = MAX_RESPONSE - self.downstream.unacked
        if room > 0 and link.pending:
            self.downstream.push(link.take(room))
        offset, body = self.downstream.window(MAX_RESPONSE)
        closed = self.finished and offset + len(body) == self.downstream.end
        return offset, body, closed

    # -- the end --------------------------------------------------------------------------
    def end(self) -> None:
        """Drop the protocol session (idempotent) and answer a held poll with closed."""
        if self.ended:
            return
        self.ended = True
        self.stream.connection_lost()
        if not self.link.closing:
            self.link.close()
        if self._poll is not None and not self._poll.done():
            self._poll.set_result(None)


__all__ = ["LINK_HIGH", "LINK_LOW", "MAX_RESPONSE", "Ended", "TunnelSession"]
