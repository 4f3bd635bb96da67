"""Who may hold a socket: connections per listener and per source address, and one budget of
open sockets for the whole process.

Why: every accepted socket is a file descriptor, and the process has a fixed number of them
(``RLIMIT_NOFILE``); the journal, the log and outgoing bridges need theirs too.  20,000 idle
sockets once left none, and then nothing worked, not even for clients already connected.
So each listener admits at most ``max_connections`` (and ``max_connections_per_address``
from one host), and all listeners together at most :data:`BUDGET`'s limit, which is the
soft descriptor limit less a reserve for everything else.  A refused connection is closed
at once after a short protocol-level refusal naming the limit, so it costs its descriptor
only for a moment.  The time a connection may take to log in (STOMP ``connect_timeout``,
HTTP ``header_timeout``) is what frees places held by idle sockets.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

from waystation.core.authentication import LoginPolicy

if TYPE_CHECKING:
    from waystation.config.security import LoginConfig

log = logging.getLogger("waystation.admission")

REFUSAL_DELAY = 1.0  # seconds a per-address refusal is held before it is answered (tarpit)
RESERVE_FRACTION = 0.1  # of the descriptor limit, kept for files, bridges and the like
RESERVE_MIN = 256


def raise_fd_limit() -> int:
    """Raise the soft descriptor limit to the hard one (what an unprivileged process may);
    the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return int(soft if soft != resource.RLIM_INFINITY else 1 << 20)


class SocketBudget:
    """Open accepted sockets across every listener of the process."""

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self.open = 0

    @property
    def limit(self) -> int:
        if self._limit is None:
            fds = raise_fd_limit()
            self._limit = max(16, fds - max(RESERVE_MIN, int(fds * RESERVE_FRACTION)))
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        self._limit = value


BUDGET = SocketBudget()


def peer_host(peer: object) -> str:
    """The host of a ``getpeername()`` answer (a tuple for IP, a path or None otherwise)."""
    if isinstance(peer, tuple) and peer:
        return str(peer[0])
    return str(peer or "?")


def peer_text(peer: object) -> str:
    """``host:port`` (``[v6]:port``) of a ``getpeername()`` answer, for logs and for the
    login throttle, which counts the host part."""
    if isinstance(peer, tuple) and len(peer) >= 2:
        host = str(peer[0])
        return f"[{host}]:{peer[1]}" if ":" in host else f"{host}:{peer[1]}"
    return str(peer)


class Places:
    """Places held (connections, sessions) in all and per source host, against a total and
    a per-host limit: what a listener, the tunnel and SockJS each count.  A refusal text
    names the config key of the limit reached."""

    def __init__(
        self,
        what: str,
        maximum: int,
        per_host: int,
        keys: tuple[str, str],
        where: str = "",
    ) -> None:
        self.what = what  # "connections", "tunnel sessions"...
        self.where = where  # said after ``what`` when the total is reached
        self.maximum = maximum
        self.per_host = per_host  # 0: no per-host limit
        self.keys = keys  # the config keys of (maximum, per_host)
        self.held = 0
        self.by_host: Counter[str] = Counter()

    @property
    def full(self) -> bool:
        return self.held >= self.maximum

    def refusal(self, host: str) -> str | None:
        """Why ``host`` may not take another place now (None: it may)."""
        if self.full:
            return self.full_text()
        return self.host_refusal(host)

    def full_text(self) -> str:
        return f"too many {self.what}{self.where} ({self.keys[0]} = {self.maximum})"

    def host_refusal(self, host: str) -> str | None:
        """Why ``host`` may not take another place, counting its own places only."""
        if self.per_host and self.by_host[host] >= self.per_host:
            return f"too many {self.what} from your address ({self.keys[1]} = {self.per_host})"
        return None

    def take(self, host: str) -> None:
        self.held += 1
        self.by_host[host] += 1

    def release(self, host: str) -> None:
        self.held -= 1
        n = self.by_host[host] - 1
        if n > 0:
            self.by_host[host] = n
        else:
            del self.by_host[host]


class Lobby:
    """Sessions that have not logged in yet (tunnel, SockJS), at most ``maximum``.

    Why: opening a session needs no login, so without this, opens that never log in fill
    ``max_sessions`` and logged-in users get 503.  Capped apart, they leave the rest of
    ``max_sessions`` to sessions that have logged in.  And when the lobby (or the whole
    table) is full, a newcomer takes the place of the oldest waiting session of the address
    that holds the most of them, if that is more than the newcomer's address holds: a flood
    from a few addresses cannot keep anybody else from opening a session and logging in
    (its own sessions are pushed out first), short of holding a place from ``maximum``
    addresses.  Members are keys (session ids); finding the victim is O(1).
    """

    def __init__(self, what: str, maximum: int, key: str) -> None:
        self.what = what  # "tunnel sessions"...
        self.maximum = maximum
        self.key = key  # the config key of ``maximum``
        self.host_of: dict[str, str] = {}  # member -> its address
        self.by_host: dict[str, dict[str, None]] = {}  # address -> members, oldest first
        self.hosts_with: dict[int, dict[str, None]] = {}  # n -> addresses holding n members
        self.top = 0  # the most members one address holds
        self.pushed_out = 0

    def __len__(self) -> int:
        return len(self.host_of)

    def __contains__(self, member: str) -> bool:
        return member in self.host_of

    @property
    def full(self) -> bool:
        return len(self.host_of) >= self.maximum

    def refusal(self) -> str:
        return f"too many {self.what} not logged in yet ({self.key} = {self.maximum})"

    def victim(self, host: str) -> str | None:
        """The member a newcomer from ``host`` may push out (None: it may push out none)."""
        own = len(self.by_host.get(host, ()))
        if self.top <= own:
            return None
        address = next(iter(self.hosts_with[self.top]))
        return next(iter(self.by_host[address]))

    def enter(self, member: str, host: str) -> None:
        if member in self.host_of:
            return
        self._recount(host, +1)
        self.by_host.setdefault(host, {})[member] = None
        self.host_of[member] = host

    def leave(self, member: str) -> None:
        """``member`` logged in or ended (idempotent)."""
        host = self.host_of.pop(member, None)
        if host is None:
            return
        self._recount(host, -1)
        members = self.by_host[host]
        del members[member]
        if not members:
            del self.by_host[host]

    def _recount(self, host: str, step: int) -> None:
        n = len(self.by_host.get(host, ()))
        if n:
            hosts = self.hosts_with[n]
            del hosts[host]
            if not hosts:
                del self.hosts_with[n]
        if n + step:
            self.hosts_with.setdefault(n + step, {})[host] = None
        if step > 0:
            self.top = max(self.top, n + step)
        elif n == self.top and n not in self.hosts_with:
            self.top = n - 1


class Admission:
    """One listener's admission: its connections, per host, and the process budget."""

    def __init__(
        self,
        listener: str,
        max_connections: int,
        max_per_address: int,
        budget: SocketBudget = BUDGET,
    ) -> None:
        self.listener = listener
        self.places = Places(
            "connections",
            max_connections,
            max_per_address,
            ("max_connections", "max_connections_per_address"),
            where=" to this listener",
        )
        self.budget = budget
        self.refused = 0

    def admit(self, host: str) -> str | None:
        """Count a new connection from ``host``; or the refusal (naming the limit) when it
        must be closed instead (then nothing was counted)."""
        why = self.places.refusal(host)
        if why is None and self.budget.open >= self.budget.limit:
            why = f"server out of sockets (open socket budget = {self.budget.limit})"
        if why is not None:
            self.refused += 1
            if self.refused == 1 or self.refused % 1000 == 0:
                log.warning("%s: refused a connection from %s: %s (%d refused so far)",
                            self.listener, host, why, self.refused)  # fmt: skip
            return why
        self.places.take(host)
        self.budget.open += 1
        return None

    def release(self, host: str) -> None:
        self.places.release(host)
        self.budget.open -= 1


class _Login(Protocol):
    connected: bool
    closed: bool

    def fail(self, message: str, detail: str = "") -> None: ...


_RDN_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "domainComponent": "DC",
    "userId": "UID",
}


def certificate_subject(cert: dict[str, Any] | None) -> str | None:
    """A verified peer certificate's subject as RFC 4514 text, most specific first
    (``CN=device-1,O=Acme,C=DE``), as users' ``certificate`` names it; None without one."""
    if not cert or not cert.get("subject"):
        return None
    parts = []
    for rdn in reversed(cert["subject"]):
        parts.append("+".join(f"{_RDN_NAMES.get(k, k)}={_escape_rdn(str(v))}" for k, v in rdn))
    return ",".join(parts)


def _escape_rdn(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


def connect_deadline(session: _Login, seconds: float) -> asyncio.TimerHandle | None:
    """Close ``session`` with an error naming ``connect_timeout`` unless it has logged in
    within ``seconds`` (None when there is no limit).  Cancel the handle when done early."""
    if seconds <= 0:
        return None

    def expired() -> None:
        if not session.connected and not session.closed:
            session.fail(
                f"connect_timeout: CONNECT not completed within {seconds:g}s",
                "the server closes connections that do not log in in time",
            )

    return asyncio.get_running_loop().call_later(seconds, expired)


def login_policy(cfg: LoginConfig) -> LoginPolicy:
    """The core's login policy from ``[security.login]`` (core knows no config)."""
    return LoginPolicy(
        free_failures=cfg.free_failures,
        free_failures_per_user=cfg.free_failures_per_user,
        base_delay=cfg.base_delay.total_seconds(),
        max_delay=cfg.max_delay.total_seconds(),
        forget_after=cfg.forget_after.total_seconds(),
        max_entries=cfg.max_entries,
        workers=cfg.workers,
        max_pending=cfg.max_pending,
        refusal_delay=cfg.refusal_delay.total_seconds(),
    )


__all__ = [
    "BUDGET",
    "Admission",
    "Lobby",
    "Places",
    "REFUSAL_DELAY",
    "SocketBudget",
    "connect_deadline",
    "login_policy",
    "peer_host",
    "peer_text",
    "raise_fd_limit",
]
