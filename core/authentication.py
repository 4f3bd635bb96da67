"""Logins for every protocol: the slow password hash off the event loop, failed logins
throttled, and one answer whatever went wrong.

Why each rule:

- The hash (PBKDF2, ~0.3 s) runs in a small worker pool: on the event loop, a few threads of
  wrong passwords stall every connection of the node.  At most ``max_pending`` checks wait
  for a worker; beyond that an attempt is refused at once, so a flood costs a bounded
  queue, not memory or latency for the others.
- Failed logins are counted per source address and per login name.  After ``free_failures``
  (``free_failures_per_user`` for a name) each further failure locks that key for a delay
  that doubles up to ``max_delay``; an attempt on a locked key is refused without hashing.
  A refused attempt is answered after ``refusal_delay`` (tarpit), so a guessing loop is
  slowed to the server's pace instead of costing it thousands of requests a second.
  A success clears its keys; a password already verified (kept as a keyed digest) passes
  a login's lock, so a stranger's guesses cannot lock a user out who knows the password.
  Both tables are bounded (least recently failed forgotten first) and a key with no
  failure for ``forget_after`` is dropped.
- An unknown login runs a real user's check on the passcode (the result ignored), so timing
  does not tell which users exist; every refusal starts ``authentication failed`` (a locked
  key adds how long to wait, which says nothing about the user either: unknown names lock
  the same way).  The text of a wrong password echoes the login given, known or not.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING

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


@dataclass(frozen=True, slots=True)
class LoginPolicy:
    """Throttling and worker limits (``[security]`` in the config; these are the defaults)."""

    free_failures: int = 5  # failed logins from one source before delays start
    free_failures_per_user: int = 10  # failed logins for one name before delays start
    base_delay: float = 1.0  # seconds locked after the first counted failure
    max_delay: float = 60.0  # the longest lock (the delay doubles up to it)
    forget_after: float = 900.0  # a key with no failure for this long starts afresh
    max_entries: int = 10_000  # keys kept per table (oldest failure forgotten first)
    workers: int = 2  # threads running password hashes
    max_pending: int = 64  # checks waiting for a worker; more are refused at once
    verified_cache: int = 10_000  # successful (login, passcode digest) pairs remembered
    refusal_delay: float = 1.0  # a refused attempt is answered after this (or the lock's end)


class _Throttle:
    """Failure counts and lock deadlines per key, bounded."""

    def __init__(self, free: int, policy: LoginPolicy) -> None:
        self.free = free
        self.policy = policy
        self.entries: OrderedDict[str, tuple[int, float, float]] = OrderedDict()
        # key -> (failures, last failure, locked until)

    def locked_for(self, key: str, now: float) -> float:
        """Seconds ``key`` stays locked (0: free to try)."""
        e = self.entries.get(key)
        if e is None:
            return 0.0
        failures, last, until = e
        if now - last > self.policy.forget_after:
            del self.entries[key]
            return 0.0
        return max(0.0, until - now)

    def failed(self, key: str, now: float) -> None:
        p = self.policy
        failures, last, _ = self.entries.pop(key, (0, now, 0.0))
        if now - last > p.forget_after:
            failures = 0
        failures += 1
        over = failures - self.free
        delay = min(p.max_delay, p.base_delay * 2 ** (over - 1)) if over > 0 else 0.0
        self.entries[key] = (failures, now, now + delay)
        while len(self.entries) > p.max_entries:
            self.entries.popitem(last=False)

    def succeeded(self, key: str) -> None:
        self.entries.pop(key, None)


def source_host(source: str) -> str:
    """The host part of ``host:port``, ``[v6]:port`` or a bare host (a bare IPv6 address
    is taken whole: transports write IPv6 peers in brackets)."""
    s = source.strip()
    if s.startswith("["):
        return s[1 : s.find("]")] if "]" in s else s
    if s.count(":") == 1:
        return s.rsplit(":", 1)[0]
    return s


class Authenticator:
    """``authenticate(login, passcode, source)`` for every protocol; wraps the engine's
    ``SecurityManager`` (its users, roles and switches)."""

    def __init__(self, security: SecurityManager, policy: LoginPolicy | None = None) -> None:
        self.security = security
        self.policy = policy or LoginPolicy()
        self.by_source = _Throttle(self.policy.free_failures, self.policy)
        self.by_user = _Throttle(self.policy.free_failures_per_user, self.policy)
        self._verified: OrderedDict[tuple[str, bytes], None] = OrderedDict()
        # keyed digests: a memory dump must not hold fast, unsalted hashes of passwords
        self._digest_key = secrets.token_bytes(32)
        self._pool: ThreadPoolExecutor | None = None
        self.pending = 0  # checks submitted to the pool and not finished
        self.stats = {"hashed": 0, "refused_locked": 0, "refused_busy": 0, "failed": 0}

    # -- the API --------------------------------------------------------------------------
    async def authenticate(self, login: str | None, passcode: str | None, source: str) -> Principal:
        """The principal, or AuthenticationError("authentication failed...")."""
        try:
            quick = self._before(login, passcode, source)
        except AuthenticationError as e:
            # answer a throttled attempt late: a guessing loop then makes one attempt a
            # second per connection instead of thousands, and costs the loop that little
            wait = getattr(e, "retry_in", 0.0)
            if wait > 0:
                await asyncio.sleep(min(wait, self.policy.refusal_delay))
            raise
        if isinstance(quick, Principal):
            return quick
        user, key = quick
        if self.pending >= self.policy.max_pending:
            self.stats["refused_busy"] += 1
            raise AuthenticationError(f"{FAILED}: server busy checking logins, try again")
        self.pending += 1
        self.stats["hashed"] += 1  # counted here: workers share no state with the loop
        try:
            loop = asyncio.get_running_loop()
            ok = await loop.run_in_executor(self._executor(), self._check, user, passcode or "")
        finally:
            self.pending -= 1
        return self._after(login or "", source, user, key, ok)

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
        blocks the loop per attempt, but a flood is cut short by the throttle)."""
        quick = self._before(login, passcode, source)
        if isinstance(quick, Principal):
            return quick
        user, key = quick
        self.stats["hashed"] += 1
        ok = self._check(user, passcode or "")
        return self._after(login or "", source, user, key, ok)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    # -- steps ----------------------------------------------------------------------------
    def _before(
        self, login: str | None, passcode: str | None, source: str
    ) -> Principal | tuple[User | None, tuple[str, bytes]]:
        sec = self.security
        if not sec.enabled:
            return Principal(login or "anonymous")
        if not login:
            if sec.allow_anonymous:
                return Principal(ANONYMOUS.name, sec.anonymous_roles)
            raise AuthenticationError(f"{FAILED}: login required")
        now = time.monotonic()
        wait = self.by_source.locked_for(source_host(source), now)
        user = sec.users.get(login)
        digest = hmac.digest(self._digest_key, (passcode or "").encode(), hashlib.sha256)
        key = (login, digest)
        if wait <= 0 and user is not None and key in self._verified:
            # a password already proven right is no guess: a user locked by someone else's
            # wrong guesses still gets in with it (no lock-out of a user by a stranger)
            self._verified.move_to_end(key)
            return Principal(user.name, user.roles)
        wait = max(wait, self.by_user.locked_for(login, now))
        if wait > 0:
            self.stats["refused_locked"] += 1
            e = AuthenticationError(
                f"{FAILED}: too many failed logins from this address or for this login "
                f"(login throttle); retry in {max(1, round(wait))}s"
            )
            e.retry_in = wait  # type: ignore[attr-defined]
            raise e
        return user, key

    def _check(self, user: User | None, passcode: str) -> bool:
        """Runs in a worker: an unknown login costs a real user's check all the same."""
        if user is not None:
            return user.check_password(passcode)
        stand_in = next(iter(self.security.users.values()), None)
        if stand_in is not None:
            stand_in.check_password(passcode)
        return False

    def _after(
        self, login: str, source: str, user: User | None, key: tuple[str, bytes], ok: bool
    ) -> Principal:
        host = source_host(source)
        if not ok or user is None:
            now = time.monotonic()
            self.stats["failed"] += 1
            self.by_source.failed(host, now)
            self.by_user.failed(login, now)
            raise AuthenticationError(f"{FAILED}: bad credentials for user {login!r}")
        self.by_source.succeeded(host)
        self.by_user.succeeded(login)
        self._verified[key] = None
        while len(self._verified) > self.policy.verified_cache:
            self._verified.popitem(last=False)
        return Principal(user.name, user.roles)

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
]
