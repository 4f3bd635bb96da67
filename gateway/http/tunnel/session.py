"""One tunnel session: a protocol session, its link, and the offsets of both directions.

Flow control downstream: a poll takes bytes out of the link only up to ``max_response``
unacknowledged bytes, and the link pauses the protocol at ``high``.  So the link's
thresholds plus one response bound what the server holds for a slow client; the rest waits
in the queues.

Upstream: a POST body is fed to the protocol in ``SLICE`` pieces, one per loop turn, so a
large body of tiny frames cannot stall the other connections.  While the protocol holds its
input back (a send to a full BLOCK address) feeding stops; the POST is held at most
``hold`` seconds, then answered with the bytes taken so far, and the client sends the rest
again later.  So the producer stalls as it would over TCP, but no request waits longer
than a poll does (proxies and the client's read timeout never see it), and a client that
vanishes meanwhile leaves a session that times out like any other.
"""

from __future__ import annotations

import asyncio
import hmac
import time

from waystation.gateway.adapter import StreamSession
from waystation.gateway.queued_link import SLICE, QueuedLink
from waystation.wire.tunnel import DownstreamSender, UpstreamReceiver

MAX_RESPONSE = 256 * 1024  # bytes of one downstream answer (and of unacknowledged data)
LINK_HIGH = 768 * 1024  # with MAX_RESPONSE: about 1 MiB held per session at most
LINK_LOW = 256 * 1024


class Ended(Exception):
    """The session is over (closed, timed out or the server is stopping)."""


class TunnelSession:
    def __init__(
        self,
        sid: str,
        protocol: str,
        link: QueuedLink,
        stream: StreamSession,
        hold: float,
        host: str = "?",
        token: str = "",
    ) -> None:
        self.sid = sid
        self.host = host  # the source address that opened it (its per-address place)
        self.token = token  # the secret every request after open must carry
        self.protocol = protocol
        self.link = link
        self.stream = stream
        self.hold = hold  # longest a request is held (response_time)
        self.upstream = UpstreamReceiver()
        self.downstream = DownstreamSender()
        self.ended = False
        self.opened = self.last_seen = time.monotonic()
        self.active = 0  # requests being handled now (a held poll counts)
        self._poll: asyncio.Future[None] | None = None  # the held poll's wake-up

    def authorized(self, token: str | None) -> bool:
        """``token`` (from a request's header) is this session's secret.  Compared as bytes:
        ``compare_digest`` refuses str with non-ASCII characters (a TypeError, so a 500), and
        a header's bytes that are not UTF-8 come as lone surrogates, which only
        ``surrogatepass`` encodes whatever they are."""
        if token is None:
            return False
        given = token.encode("utf-8", "surrogatepass")
        return hmac.compare_digest(self.token.encode(), given)

    @property
    def finished(self) -> bool:
        """The protocol session closed itself and everything it wrote has been taken."""
        return self.link.closing and not self.link.pending

    def idle_for(self, now: float) -> float:
        """Seconds without a request.  A request in progress counts as activity for
        ``hold`` seconds only: one that never ends (a body that never comes, an answer the
        client never reads) must not keep the session alive for ever."""
        idle = now - self.last_seen
        return max(0.0, idle - self.hold) if self.active else idle

    def begin(self) -> None:
        self.active += 1
        self.last_seen = time.monotonic()

    def done(self) -> None:
        self.active -= 1
        self.last_seen = time.monotonic()

    # -- upstream -------------------------------------------------------------------------
    async def up(self, offset: int, data: bytes) -> int:
        """Feed the new part of a POST body (it starts at stream ``offset``); the upstream
        offset reached, which may be short of the body's end when the protocol held its
        input back for ``hold`` seconds.  OffsetError on a gap, Ended when the session is
        over.  Two POSTs at once (a retry while the first is held) are safe: each piece is
        taken from wherever the stream has reached."""
        if self.ended or self.link.closing:
            raise Ended
        self.upstream.accept(offset, b"")  # OffsetError if the body would leave a hole
        end = offset + len(data)
        reading = self.link.reading
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.hold
        fed = False
        while self.upstream.received < end and not self.ended and not self.link.closing:
            if not reading.is_set():
                left = deadline - loop.time()
                if left <= 0:
                    break  # answer with what was taken; the client sends the rest again
                try:
                    await asyncio.wait_for(reading.wait(), left)
                except TimeoutError:
                    pass
                continue
            if fed:  # one slice per loop turn, then look again: the protocol may have
                fed = False  # paused its input or ended meanwhile
                await asyncio.sleep(0)
                continue
            have = self.upstream.received
            skip = have - offset
            piece = self.upstream.accept(have, data[skip : skip + SLICE])
            self.stream.data_received(piece)
            fed = True
        return self.upstream.received

    # -- downstream -----------------------------------------------------------------------
    async def down(self, ack: int) -> tuple[int, bytes, bool]:
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
                await asyncio.wait((waiter, wake), timeout=self.hold, return_when="FIRST_COMPLETED")
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
