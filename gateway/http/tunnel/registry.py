"""The live tunnel sessions of one HTTP listener, and the reaper of idle ones.

A session that has ended is remembered (as a tombstone) for one ``session_timeout``, so a
late request for it gets 410 Gone rather than 404: the client learns that its session was
closed, not that it never existed.

At most ``max_sessions`` live at once, and ``max_sessions_per_address`` opened from one
source address (``open`` beyond either is refused).  Sessions whose protocol has not logged
in yet are also held to ``max_unauthenticated_sessions`` (a :class:`Lobby`): when it (or the
whole table) is full, a new session takes the place of the oldest not-logged-in session of
the address holding the most of them, so opens that never log in cannot keep logged-in
users, nor users about to log in, out.  A session ends after ``session_timeout`` without a request, and also when it
has not sent a single upstream byte ``session_timeout`` after it was opened, even if it
keeps polling.  One whose protocol has not logged in (STOMP CONNECT) ``connect_timeout``
after opening is failed with an error naming ``connect_timeout`` (which its client can
still read) and ended one ``connect_timeout`` later.

Each session has a secret token, returned by ``open`` only: a request without it is refused
(403), so knowing a session id (it is in URLs, hence in proxies' logs) is not enough to read
or write the session.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time

from waystation.gateway.admission import Lobby, Places
from waystation.gateway.http.context import HttpContext
from waystation.gateway.http.tunnel.session import LINK_HIGH, LINK_LOW, TunnelSession
from waystation.gateway.queued_link import QueuedLink

log = logging.getLogger("waystation.tunnel")


class Full(Exception):
    """``max_sessions`` (or ``max_sessions_per_address``) sessions are open already; the
    text names the limit."""

    def __init__(self, text: str, per_address: bool = False) -> None:
        super().__init__(text)
        self.per_address = per_address


class Registry:
    def __init__(self, ctx: HttpContext) -> None:
        self.ctx = ctx
        cfg = ctx.cfg.tunnel
        self.session_timeout = cfg.session_timeout.total_seconds()
        self.response_time = cfg.response_time.total_seconds()
        self.connect_timeout = cfg.connect_timeout.total_seconds()
        self.places = Places(
            "tunnel sessions",
            cfg.max_sessions,
            cfg.max_sessions_per_address,
            ("max_sessions", "max_sessions_per_address"),
        )
        self.lobby = Lobby(
            "tunnel sessions",
            min(cfg.max_unauthenticated_sessions, cfg.max_sessions),
            "max_unauthenticated_sessions",
        )
        self.sessions: dict[str, TunnelSession] = {}
        self.gone: dict[str, float] = {}  # session id -> when to forget it
        self._reaper: asyncio.Task[None] | None = None

    def open(self, protocol: str, peer: str, host: str = "?") -> TunnelSession:
        """A new session running ``protocol`` for a client at ``host`` (KeyError if the
        protocol is not registered, Full when a session limit is reached)."""
        new_session = self.ctx.sessions[protocol]
        self._make_room(host)
        sid = secrets.token_urlsafe(16)
        link = QueuedLink(peer, high=LINK_HIGH, low=LINK_LOW)  # the login throttle counts peer
        stream = new_session(link)
        link.target = stream
        session = TunnelSession(
            sid, protocol, link, stream, self.response_time, host, secrets.token_urlsafe(32)
        )
        self.sessions[sid] = session
        self.places.take(host)
        self.lobby.enter(sid, host)
        log.info("tunnel session %s opened (%s) for %s", sid[:6], protocol, peer)
        return session

    def _make_room(self, host: str) -> None:
        """Room for one more session from ``host``, pushing out a session that has not
        logged in when the lobby or the table is full (Full when there is none to push)."""
        why = self.places.host_refusal(host)
        if why is not None:
            raise Full(why, per_address=True)
        while self.places.full or self.lobby.full:
            victim = self.lobby.victim(host)
            if victim is None:
                if self.places.full:
                    raise Full(self.places.full_text())
                raise Full(self.lobby.refusal(), per_address=True)  # it holds the most
            session = self.sessions.get(victim)
            if session is None or self.logged_in(session):
                self.lobby.leave(victim)
                continue
            self.lobby.pushed_out += 1
            self.end(session, "pushed out: not logged in, from the address holding the most")

    def logged_in(self, session: TunnelSession) -> bool:
        """Whether ``session``'s protocol has logged in; it then leaves the lobby."""
        if session.sid not in self.lobby:
            return True
        if getattr(session.stream, "connected", False):
            self.lobby.leave(session.sid)
            return True
        return False

    def lookup(self, sid: str) -> TunnelSession | bool:
        """The session; else True if it existed and ended, False if it is unknown."""
        session = self.sessions.get(sid)
        if session is not None:
            return session
        return sid in self.gone

    def end(self, session: TunnelSession, why: str) -> None:
        if self.sessions.pop(session.sid, None) is None:
            return
        self.places.release(session.host)
        self.lobby.leave(session.sid)
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
            login = self.connect_timeout
            for session in list(self.sessions.values()):
                self.logged_in(session)
                age = now - session.opened
                if login > 0 and age > login and not getattr(session.stream, "connected", True):
                    fail = getattr(session.stream, "fail", None)
                    if age > 2 * login or fail is None:
                        self.end(session, f"not logged in within {login:g}s")
                        continue
                    if not session.link.closing:  # its client may still read why
                        fail(f"connect_timeout: CONNECT not completed within {login:g}s")
                if session.idle_for(now) > timeout:
                    self.end(session, f"no request for {timeout:g}s")
                elif not session.upstream.received and now - session.opened > timeout:
                    self.end(session, f"nothing sent upstream in {timeout:g}s")
            for sid, until in list(self.gone.items()):
                if until < now:
                    del self.gone[sid]


__all__ = ["Full", "Registry"]
