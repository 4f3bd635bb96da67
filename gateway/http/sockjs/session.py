"""A SockJS session over HTTP: one STOMP session, fed by send requests, read by at most
one receiving request at a time.

Rules (sockjs-protocol 0.3.3): a receiving request for an unknown id opens a session; a
second receiving request while one is attached gets ``c[2010,...]`` and the first keeps
going; a receiving request that the client drops mid-way ends the session
(``c[1002,...]``); a session with no receiving request for ``disconnect_delay`` is closed
and forgotten; a closed session answers every receiving request with its close frame until
then.  Send requests for one session are fed to STOMP strictly in arrival order, each one
waiting while the STOMP session holds its input (durable sends being written).

The client picks the session id, so the id is no secret: a session is bound to what its
creator presented, its source address and its ``JSESSIONID`` cookie if it sent one, and a
request presenting anything else can neither read nor write it (403).  At most
``max_sessions`` exist, ``max_sessions_per_address`` created from one address, and a
session whose STOMP CONNECT has not completed ``connect_timeout`` after creation is failed
with an ERROR naming ``connect_timeout`` (so unauthenticated sessions cannot keep places).
Sessions not logged in yet are held to ``max_unauthenticated_sessions`` (a :class:`Lobby`):
when it or the table is full, a new session takes the place of the oldest not-logged-in one
of the address holding the most, so a flood of sessions that never log in leaves room for
those that do.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable

from waystation.core.engine import Engine
from waystation.gateway.admission import Lobby, Places, connect_deadline
from waystation.gateway.http.sockjs import framing
from waystation.gateway.http.sockjs.textlink import TextLink
from waystation.gateway.queued_link import feed
from waystation.gateway.stomp.session import StompOptions, StompSession


class SockJsSession:
    def __init__(
        self,
        sid: str,
        engine: Engine,
        options: StompOptions,
        peer: str,
        disconnect_delay: float,
        forget: Callable[[SockJsSession], None],
        owner: tuple[str, str | None] = ("?", None),
        connect_timeout: float = 0.0,
    ) -> None:
        self.sid = sid
        self.owner = owner  # (source host, JSESSIONID or None) of the creating request
        self.link = TextLink(peer, self._not_text)
        self.stomp = StompSession(engine, self.link, options)
        self.link.target = self.stomp
        self.receiving = False
        self.close_frame: str | None = None  # the ``c`` frame, once the session is over
        self._delay = disconnect_delay
        self._forget = forget
        self._input = asyncio.Lock()  # FIFO: send requests are fed in arrival order
        self._expiry: asyncio.TimerHandle | None = None
        self._arm_expiry()
        self._login = connect_deadline(self.stomp, connect_timeout)

    def belongs_to(self, host: str, cookie: str | None) -> bool:
        """The request comes from the creator: same address, and the same cookie when the
        creator sent one."""
        own_host, own_cookie = self.owner
        if host != own_host:
            return False
        if own_cookie is None:
            return True
        return cookie is not None and hmac.compare_digest(  # str of any text: bytes never raise
            own_cookie.encode("utf-8", "surrogatepass"), cookie.encode("utf-8", "surrogatepass")
        )

    # -- input ------------------------------------------------------------------------------
    async def feed(self, chunks: list[bytes]) -> None:
        """The messages of one send request, in slices (one per loop turn: a big payload of
        tiny frames must not stall the server), waiting while STOMP holds its input back
        (until the session ends, which wakes the wait)."""
        async with self._input:
            await feed(self.stomp, self.link, b"".join(chunks), self._resumed)

    async def _resumed(self) -> bool:
        await self.link.reading.wait()
        return not self.link.closing

    def _not_text(self, message: str, detail: str) -> None:
        self.stomp.fail(message, detail)

    # -- receivers --------------------------------------------------------------------------
    def attach(self) -> str | None:
        """Become the receiving request, or the close frame that refuses it."""
        if self.close_frame is not None:
            return self.close_frame
        if self.receiving:
            return framing.close(*framing.ANOTHER_CONNECTION)
        self.receiving = True
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        return None

    def detach(self, aborted: bool) -> None:
        self.receiving = False
        if aborted:
            self.end(*framing.INTERRUPTED)
        self._arm_expiry()

    def final_frame(self) -> str:
        """The close frame once STOMP has closed and its last frames were taken."""
        if self.close_frame is None:
            self.close_frame = framing.close(*framing.GO_AWAY)
        return self.close_frame

    # -- ending -----------------------------------------------------------------------------
    def end(self, code: int, reason: str) -> None:
        """Close from the transport's side (client gone, timed out, server stopping)."""
        if self.close_frame is None:
            self.close_frame = framing.close(code, reason)
        if self._login is not None:
            self._login.cancel()
            self._login = None
        self.stomp.connection_lost()
        if not self.link.closing:
            self.link.close()

    def _arm_expiry(self) -> None:
        if self._expiry is None:
            loop = asyncio.get_running_loop()
            self._expiry = loop.call_later(self._delay, self._expire)

    def _expire(self) -> None:
        self._expiry = None
        if self.receiving:
            return
        self.end(*framing.GO_AWAY)
        self._forget(self)


class Sessions:
    """The open SockJS sessions of one prefix, by session id (``max_sessions`` at most)."""

    def __init__(
        self,
        engine: Engine,
        options: StompOptions,
        disconnect_delay: float,
        max_sessions: int,
        max_per_address: int = 100,
        connect_timeout: float = 0.0,
        max_unauthenticated: int = 1000,
    ) -> None:
        self.engine = engine
        self.options = options
        self.delay = disconnect_delay
        self.connect_timeout = connect_timeout
        self.places = Places(
            "SockJS sessions",
            max_sessions,
            max_per_address,
            ("max_sessions", "max_sessions_per_address"),
        )
        self.lobby = Lobby(
            "SockJS sessions",
            min(max_unauthenticated, max_sessions),
            "max_unauthenticated_sessions",
        )
        self.by_id: dict[str, SockJsSession] = {}

    def get(self, sid: str) -> SockJsSession | None:
        return self.by_id.get(sid)

    @property
    def full(self) -> bool:
        return self.places.full

    def refusal(self, host: str) -> str | None:
        """Why a new session from ``host`` cannot be created now (naming the limit), after
        pushing out a session not logged in if that makes room (see :class:`Lobby`)."""
        why = self.places.host_refusal(host)
        if why is not None:
            return why
        while self.places.full or self.lobby.full:
            victim = self.lobby.victim(host)
            if victim is None:
                return self.places.full_text() if self.places.full else self.lobby.refusal()
            s = self.by_id.get(victim)
            if s is None or self.logged_in(s):
                self.lobby.leave(victim)
                continue
            self.lobby.pushed_out += 1
            s.end(*framing.PUSHED_OUT)
            self._forget(s)
        return None

    def logged_in(self, s: SockJsSession) -> bool:
        """Whether ``s`` has logged in (STOMP CONNECT accepted); it then leaves the lobby."""
        if s.sid not in self.lobby:
            return True
        if s.stomp.connected:
            self.lobby.leave(s.sid)
            return True
        return False

    def create(
        self, sid: str, peer: str, host: str = "?", cookie: str | None = None
    ) -> SockJsSession:
        """A new session bound to (``host``, ``cookie``); the caller checks ``refusal``."""
        s = SockJsSession(
            sid, self.engine, self.options, peer, self.delay, self._forget,
            (host, cookie), self.connect_timeout,
        )  # fmt: skip
        self.by_id[sid] = s
        self.places.take(host)
        self.lobby.enter(sid, host)
        return s

    def _forget(self, s: SockJsSession) -> None:
        if self.by_id.get(s.sid) is s:
            del self.by_id[s.sid]
            self.places.release(s.owner[0])
            self.lobby.leave(s.sid)

    def close_all(self) -> None:
        for s in list(self.by_id.values()):
            s.end(*framing.SERVER_SHUTDOWN)


__all__ = ["SockJsSession", "Sessions"]
