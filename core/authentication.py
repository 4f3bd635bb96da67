"""Logins for every protocol: the slow password hash off the event loop, guessing slowed
down, and one answer whatever went wrong.

Why each rule:

- The hash (PBKDF2, ~0.3 s) runs in a small worker pool: on the event loop, a few threads of
  wrong passwords stall every connection of the node.  At most ``max_pending`` checks wait
  for a worker; beyond that an attempt is refused at once, so a flood costs a bounded
  queue, not memory or latency for the others.
- Guessing is slowed where the guesses land, never by refusing somebody else's right
  password (behind one proxy, NAT or tunnel a whole site shares one address):

  * per (source address, login): after ``free_failures`` failures each further one locks
    that pair for a delay doubling up to ``max_delay``.  Only this login from this address
    waits; the other users there do not.
  * per login, from anywhere: after ``free_failures_per_user`` failures the same doubling
    lock, for addresses the login has not logged in from before.  An address the user has
    logged in from (a *known* pair: the last ``verified_cache`` successes) is not held by
    it, so guesses from elsewhere cannot lock a user out of their usual place.
  * per source address: at most ``source_places`` checks running at once, and once it is
    failing (``free_failures`` failures, any logins) each further failure keeps its place
    for a delay doubling up to ``max_delay``.  An attacker cycling through logins from one
    address gets a few checks a minute; logins from known pairs take no place, so the
    site's users still get in.

  An attempt is counted when it starts, so parallel attempts cannot go past an allowance
  before the first failures come back.  A lock ending within ``refusal_delay`` is waited
  for (a delay, not a refusal); a longer one is refused after ``refusal_delay`` (tarpit),
  so a guessing loop runs at the server's pace.  A success through a real check restarts
  its pair's count; a login's and an address's counts only age out: a user's successes do
  not buy a guesser new tries.
- Memory is bounded: each table keeps ``max_entries`` keys (least recently used forgotten
  first), and a key with no failure for ``forget_after`` starts afresh; the known pairs and
  verified passwords are ``verified_cache`` entries each.
- An unknown login runs a real user's check on the passcode (the result ignored), so timing
  does not tell which users exist, and its keys are throttled like any other; every refusal
  starts ``authentication failed`` (a throttled one adds how long to wait, which says
  nothing about the user either).  The text of a wrong password echoes the login given.

``core/`` knows no sockets: ``source`` is whatever string the transport names its peer by
(``host:port`` or a bare host); only the host part is counted.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import time
import weakref
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from waystation.core.security import (
    ANONYMOUS,
    AuthenticationError,
    Principal,
    SecurityManager,
    User,
)

if TYPE_CHECKING:
    from waystation.core.engine import Engine

FAILED = "authentication failed"
K = TypeVar("K")
BUSY_RETRY = 0.2  # seconds an attempt waits for one already running past an allowance


@dataclass(frozen=True, slots=True)
class LoginPolicy:
    """Throttling and worker limits (``[security.login]`` in the config; these are the
    defaults)."""

    free_failures: int = 5  # failures of one (source, login) pair, and of one source, free
    free_failures_per_user: int = 10  # failures of one login (any source) before locks
    base_delay: float = 1.0  # seconds locked after the first counted failure
    max_delay: float = 60.0  # the longest lock (the delay doubles up to it)
    forget_after: float = 900.0  # a key with no failure for this long starts afresh
    max_entries: int = 10_000  # keys kept per table (least recently used forgotten first)
    workers: int = 2  # threads running password hashes
    max_pending: int = 64  # checks waiting for a worker; more are refused at once
    verified_cache: int = 10_000  # known (source, login) pairs, and verified passwords
    refusal_delay: float = 1.0  # locks ending sooner are waited for; others refused after it
    source_places: int = 8  # checks a source may have running (or failed recently)

    def delay(self, over: int) -> float:
        """The lock earned by the ``over``-th failure past an allowance (0: none)."""
        if over <= 0:
            return 0.0
        return min(self.max_delay, self.base_delay * 2 ** min(over - 1, 60))


@dataclass(slots=True)
class _Count:
    """One key's record: failures, attempts running, the lock, and (for a source) the
    places its recent failures hold."""

    last: float  # the last failure (or when the key was first seen)
    failures: int = 0
    pending: int = 0  # attempts counted when they started and not finished yet
    until: float = 0.0  # locked until
    penalties: list[float] = field(default_factory=list)  # places held until these times


class _Table:
    """Counts per key, at most ``max_entries`` (least recently used forgotten first)."""

    def __init__(self, free: int, policy: LoginPolicy) -> None:
        self.free = free
        self.policy = policy
        self.entries: OrderedDict[str, _Count] = OrderedDict()

    def get(self, key: str, now: float) -> _Count | None:
        e = self.entries.get(key)
        if (
            e is not None
            and not e.pending
            and now - e.last > self.policy.forget_after
            and e.until <= now
            and not any(t > now for t in e.penalties)
        ):
            del self.entries[key]
            return None
        return e

    def wait(self, key: str, now: float) -> float:
        """Seconds before an attempt on ``key`` may start (0: now).  Past the allowance one
        attempt runs at a time, so parallel guesses cannot outrun the count."""
        e = self.get(key, now)
        if e is None:
            return 0.0
        if e.until > now:
            return e.until - now
        if e.pending and e.failures + e.pending >= self.free:
            return BUSY_RETRY
        return 0.0

    def within_allowance(self, key: str, now: float) -> bool:
        e = self.get(key, now)
        return e is None or (e.until <= now and e.failures + e.pending < self.free)

    def place_wait(self, key: str, now: float, places: int) -> float:
        """For a source: 0 when it may start another check, else seconds until a place
        may come free (a running check may end sooner: waiters are woken then)."""
        e = self.get(key, now)
        if e is None:
            return 0.0
        if e.penalties:
            e.penalties = [t for t in e.penalties if t > now]
        if e.pending + len(e.penalties) < places:
            return 0.0
        return min(e.penalties) - now if e.penalties and not e.pending else BUSY_RETRY

    def start(self, key: str, now: float) -> _Count:
        """Count an attempt on ``key`` (before its check)."""
        e = self.get(key, now)
        if e is None:
            e = self.entries[key] = _Count(now)
            while len(self.entries) > self.policy.max_entries:
                self.entries.popitem(last=False)
        else:
            self.entries.move_to_end(key)
        e.pending += 1
        return e

    def finish(self, e: _Count, failed: bool, now: float, lock: bool = True) -> float:
        """End a counted attempt; the delay its failure earned (0: none)."""
        e.pending -= 1
        if not failed:
            return 0.0
        e.failures += 1
        e.last = now
        d = self.policy.delay(e.failures - self.free)
        if d and lock:
            e.until = max(e.until, now + d)
        return d

    def failure(self, key: str, now: float) -> None:
        """A failure not counted when it started."""
        self.finish(self.start(key, now), True, now, lock=False)


@dataclass(slots=True)
class _Attempt:
    """An attempt let through to its check, and what it was counted on."""

    user: User | None
    key: tuple[str, bytes]  # (login, keyed digest of the passcode)
    host: str
    pair: str
    by_pair: _Count
    by_user: _Count
    by_source: _Count | None  # None: a known pair, which takes no place of its source


class _Wait(Exception):
    """The attempt may not start for ``seconds``; ``host``: it waits for a place there."""

    def __init__(self, seconds: float, host: str | None = None) -> None:
        super().__init__(seconds)
        self.seconds = seconds
        self.host = host


def source_host(source: str) -> str:
    """The host part of ``host:port``, ``[v6]:port`` or a bare host (a bare IPv6 address
    is taken whole: transports write IPv6 peers in brackets)."""
    s = source.strip()
    if s.startswith("["):
        return s[1 : s.find("]")] if "]" in s else s
    if s.count(":") == 1:
        return s.rsplit(":", 1)[0]
    return s


def _remember(table: OrderedDict[K, None], key: K, cap: int) -> None:
    """Put ``key`` last in a bounded recency table (the oldest forgotten past ``cap``)."""
    table[key] = None
    table.move_to_end(key)
    while len(table) > cap:
        table.popitem(last=False)


def throttled(wait: float) -> AuthenticationError:
    """The refusal of an attempt held by the throttle (says nothing about the user)."""
    e = AuthenticationError(
        f"{FAILED}: too many failed logins from this address or for this login "
        f"(login throttle); retry in {max(1, round(wait))}s"
    )
    e.retry_in = wait  # type: ignore[attr-defined]
    return e


class Authenticator:
    """``authenticate(login, passcode, source)`` for every protocol; wraps the engine's
    ``SecurityManager`` (its users, roles and switches)."""

    def __init__(self, security: SecurityManager, policy: LoginPolicy | None = None) -> None:
        self.security = security
        p = self.policy = policy or LoginPolicy()
        self.by_pair = _Table(p.free_failures, p)
        self.by_user = _Table(p.free_failures_per_user, p)
        self.by_source = _Table(p.free_failures, p)
        self._known: OrderedDict[str, None] = OrderedDict()  # pairs logged in from
        self._verified: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        # keyed digests: a memory dump must not hold fast, unsalted hashes of passwords
        self._digest_key = secrets.token_bytes(32)
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}  # for a source's place
        self._pool: ThreadPoolExecutor | None = None
        self.pending = 0  # checks submitted to the pool and not finished
        self.stats = {
            "hashed": 0,
            "refused_locked": 0,
            "refused_busy": 0,
            "failed": 0,
            "delayed": 0,
        }

    # -- the API --------------------------------------------------------------------------
    async def authenticate(self, login: str | None, passcode: str | None, source: str) -> Principal:
        """The principal, or AuthenticationError("authentication failed...")."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.policy.refusal_delay
        delayed = False
        while True:
            try:
                step = self._before(login, passcode, source)
                break
            except _Wait as w:
                left = give_up - loop.time()
                if w.seconds > left:
                    # answered late: a guessing loop then makes one attempt a second per
                    # connection instead of thousands, and costs the loop that little
                    self.stats["refused_locked"] += 1
                    await asyncio.sleep(max(0.0, left))
                    raise throttled(w.seconds - max(0.0, left)) from None
                if not delayed:
                    self.stats["delayed"] += 1
                    delayed = True
                if w.host is None:
                    await asyncio.sleep(w.seconds)
                else:
                    await self._place_freed(w.host, w.seconds)
        if isinstance(step, Principal):
            return step
        hit = step.user is not None and step.key in self._verified
        if hit:
            return self._after(step, True, hashed=False)
        if self.pending >= self.policy.max_pending:
            self._release(step)
            self.stats["refused_busy"] += 1
            raise AuthenticationError(f"{FAILED}: server busy checking logins, try again")
        self.pending += 1
        self.stats["hashed"] += 1  # counted here: workers share no state with the loop
        try:
            ok = await loop.run_in_executor(
                self._executor(), self._check, step.user, passcode or ""
            )
        except BaseException:
            self._release(step)
            raise
        finally:
            self.pending -= 1
        return self._after(step, ok, hashed=True)

    def certificate(self, subject: str | None, source: str) -> Principal:
        """The user of a TLS client certificate the listener verified (SASL EXTERNAL, MQTT):
        ``subject`` is its RFC 4514 text, None when the client showed no certificate."""
        if subject is None:
            if not self.security.enabled:
                return Principal("anonymous")
            raise AuthenticationError(f"{FAILED}: no client certificate")
        try:
            return self.security.by_certificate(subject)
        except AuthenticationError as e:
            self.stats["failed"] += 1
            raise AuthenticationError(f"{FAILED}: {e}") from None

    def authenticate_blocking(
        self, login: str | None, passcode: str | None, source: str
    ) -> Principal:
        """The same rules with the hash run by the caller: for code not yet async (it still
        blocks the loop per attempt; a throttled attempt is refused at once, not waited)."""
        try:
            step = self._before(login, passcode, source)
        except _Wait as w:
            self.stats["refused_locked"] += 1
            raise throttled(w.seconds) from None
        if isinstance(step, Principal):
            return step
        if step.user is not None and step.key in self._verified:
            return self._after(step, True, hashed=False)
        self.stats["hashed"] += 1
        try:
            ok = self._check(step.user, passcode or "")
        except BaseException:
            self._release(step)
            raise
        return self._after(step, ok, hashed=True)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    # -- steps ----------------------------------------------------------------------------
    def _before(self, login: str | None, passcode: str | None, source: str) -> Principal | _Attempt:
        """A principal at once, or the attempt let through to its check (counted); _Wait
        when it must wait."""
        sec = self.security
        if not sec.enabled:
            return Principal(login or "anonymous")
        if not login:
            if sec.allow_anonymous:
                return Principal(ANONYMOUS.name, sec.anonymous_roles)
            raise AuthenticationError(f"{FAILED}: login required")
        now = time.monotonic()
        host = source_host(source)
        pair = f"{host}\0{login}"
        user = sec.users.get(login)
        digest = hmac.digest(self._digest_key, (passcode or "").encode(), hashlib.sha256)
        key = (login, digest)
        known = pair in self._known
        proven = known and user is not None and key in self._verified
        if proven and user is not None and self.by_pair.within_allowance(pair, now):
            # the user's own place and proven password, nobody guessing it from there
            self._known.move_to_end(pair)
            self._verified.move_to_end(key)
            return Principal(user.name, user.roles)
        wait = self.by_pair.wait(pair, now)
        if not known:  # guesses from elsewhere do not hold a user at a known place
            wait = max(wait, self.by_user.wait(login, now))
        if wait > 0:
            raise _Wait(wait)
        if not known:
            wait = self.by_source.place_wait(host, now, self.policy.source_places)
            if wait > 0:
                raise _Wait(wait, host)
        return _Attempt(
            user,
            key,
            host,
            pair,
            self.by_pair.start(pair, now),
            self.by_user.start(login, now),
            None if known else self.by_source.start(host, now),
        )

    def _check(self, user: User | None, passcode: str) -> bool:
        """Runs in a worker: an unknown login costs a real user's check all the same."""
        if user is not None:
            return user.check_password(passcode)
        stand_in = next(iter(self.security.users.values()), None)
        if stand_in is not None:
            stand_in.check_password(passcode)
        return False

    def _after(self, a: _Attempt, ok: bool, hashed: bool) -> Principal:
        now = time.monotonic()
        failed = not ok or a.user is None
        self.by_pair.finish(a.by_pair, failed, now)
        self.by_user.finish(a.by_user, failed, now)
        if a.by_source is None:
            if failed:
                self.by_source.failure(a.host, now)
        else:
            held = self.by_source.finish(a.by_source, failed, now, lock=False)
            if held:  # a failure of a failing source keeps its place a while
                a.by_source.penalties.append(now + held)
            else:
                self._wake(a.host)
        if failed or a.user is None:
            self.stats["failed"] += 1
            raise AuthenticationError(f"{FAILED}: bad credentials for user {a.key[0]!r}")
        if hashed:  # proven from here: this pair's count starts afresh
            a.by_pair.failures = 0
            a.by_pair.until = 0.0
        _remember(self._known, a.pair, self.policy.verified_cache)
        _remember(self._verified, a.key, self.policy.verified_cache)
        return Principal(a.user.name, a.user.roles)

    def _release(self, a: _Attempt) -> None:
        """An attempt that was not checked after all: uncount it."""
        now = time.monotonic()
        self.by_pair.finish(a.by_pair, False, now)
        self.by_user.finish(a.by_user, False, now)
        if a.by_source is not None:
            self.by_source.finish(a.by_source, False, now)
            self._wake(a.host)

    # -- waiting for a source's place ----------------------------------------------------
    async def _place_freed(self, host: str, seconds: float) -> None:
        """Until a check of ``host`` ends or ``seconds`` pass (a failure's place frees
        then)."""
        f: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(host, [])
        waiters.append(f)
        try:
            await asyncio.wait_for(f, seconds)
        except TimeoutError:
            pass
        finally:
            if f in waiters:
                waiters.remove(f)
            if not waiters and self._waiters.get(host) is waiters:
                del self._waiters[host]

    def _wake(self, host: str) -> None:
        waiters = self._waiters.get(host)
        while waiters:
            f = waiters.pop(0)
            if not f.done():
                f.set_result(None)
                return

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self.policy.workers, thread_name_prefix="waystation-login"
            )
        return self._pool


_BY_ENGINE: weakref.WeakKeyDictionary[Engine, Authenticator] = weakref.WeakKeyDictionary()


def install_authenticator(engine: Engine, authenticator: Authenticator) -> None:
    """Make ``authenticator`` the one every protocol of ``engine`` uses (the node does this
    with the policy from the config)."""
    _BY_ENGINE[engine] = authenticator


def authenticator(engine: Engine) -> Authenticator:
    """The engine's authenticator (one per engine, so throttles count across protocols);
    made with the default policy on first use when none was installed.  When the engine's
    ``security`` was replaced (new users), a new one takes over with the same policy: the
    old one's verified passwords and throttles belong to the old users."""
    a = _BY_ENGINE.get(engine)
    if a is None:
        a = _BY_ENGINE[engine] = Authenticator(engine.security)
    elif a.security is not engine.security:  # the old pool's threads end with it
        a = _BY_ENGINE[engine] = Authenticator(engine.security, a.policy)
    return a


__all__ = [
    "FAILED",
    "Authenticator",
    "LoginPolicy",
    "authenticator",
    "install_authenticator",
    "source_host",
    "throttled",
]
