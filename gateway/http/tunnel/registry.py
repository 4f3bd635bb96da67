"""The live tunnel sessions of one HTTP listener, and the reaper of idle ones.

A session that has ended is remembered (as a tombstone) for one ``session_timeout``, so a
late request for it gets 410 Gone rather than 404: the client learns that its session was
closed, not that it never existed.

At most ``max_sessions`` live at once (``open`` beyond that is refused).  A session ends
after ``session_timeout`` without a request, and also when it has not sent a single
upstream byte ``session_timeout`` after it was opened, even if it keeps polling: a protocol
session that never started must not hold a place for ever.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time

from waystation.gateway.http.server import HttpContext
from waystation.gateway.http.tunnel.protocols import PROTOCOLS
from waystation.gateway.http.tunnel.session import LINK_HIGH, LINK_LOW, TunnelSession
from waystation.gateway.queued_link import QueuedLink

log = logging.getLogger("waystation.tunnel")


class Full(Exception):
    """``max_sessions`` sessions are open already."""


class Registry:
    def __init__(self, ctx: HttpContext) -> None:
        self.ctx = ctx
        cfg = ctx.cfg.tunnel
        self.session_timeout = cfg.session_timeout.total_seconds()
        self.response_time = cfg.response_time.total_seconds()
        self.max_sessions = cfg.max_sessions
        self.sessions: dict[str, TunnelSession] = {}
        self.gone: dict[str, float] = {}  # session id -> when to forget it
        self._reaper: asyncio.Task[None] | None = None

    def open(self, protocol: str, peer: str) -> TunnelSession:
        """A new session running ``protocol`` (KeyError if it is not registered, Full when
        ``max_sessions`` are open)."""
        factory = PROTOCOLS[protocol]
        if len(self.sessions) >= self.max_sessions:
            raise Full
        sid = secrets.token_urlsafe(16)
        link = QueuedLink(f"tunnel {peer} {sid[:6]}", high=LINK_HIGH, low=LINK_LOW)
        stream = factory(self.ctx, link)
        link.target = stream
        session = TunnelSession(sid, protocol, link, stream, self.response_time)
        self.sessions[sid] = session
        log.info("tunnel session %s opened (%s) for %s", sid[:6], protocol, peer)
        return session

    def lookup(self, sid: str) -> TunnelSession | bool:
        """The session; else True if it existed and ended, False if it is unknown."""
        session = self.sessions.get(sid)
        if session is not None:
            return session
        return sid in self.gone

    def end(self, session: TunnelSession, why: str) -> None:
        if self.sessions.pop(session.sid, None) is None:
            return
        self.gone[session.sid] = time.monotonic() + self.session_timeout
        session.end()
        log.info("tunnel session %s closed: %s", session.sid[:6], why)

    # -- lifecycle (app signals) ----------------------------------------------------------
    async def start(self) -> None:
        self._reaper = asyncio.create_task(self._reap())

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        for session in list(self.sessions.values()):
            self.end(session, "server shutdown")

    async def _reap(self) -> None:
        period = min(1.0, max(0.05, self.session_timeout / 4))
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            timeout = self.session_timeout
            for session in list(self.sessions.values()):
                if session.idle_for(now) > timeout:
                    self.end(session, f"no request for {timeout:g}s")
                elif not session.upstream.received and now - session.opened > timeout:
                    self.end(session, f"nothing sent upstream in {timeout:g}s")
            for sid, until in list(self.gone.items()):
                if until < now:
                    del self.gone[sid]


__all__ = ["Full", "Registry"]
