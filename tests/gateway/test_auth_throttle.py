"""Logins (issue 10): failed logins throttled per source address and per login, one answer
whether the user exists or not, the hash off the event loop.  REST Basic and STOMP CONNECT
share one throttle.  Timing figures are in bench/flood_bench.py, not asserted here, except
one coarse ratio below (an unknown user must cost a hash too)."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
import stomp
from nodekit import SECURITY_USERS, NodeProcess, RawStomp, header

from waystation.config.passwords import hash_password
from waystation.core.authentication import (
    Authenticator,
    LoginPolicy,
    authenticator,
    install_authenticator,
)
from waystation.core.security import AuthenticationError, SecurityManager, User

ITERATIONS = 200_000  # ~0.1 s a check: slow enough to see, quick enough for a test


def _user(name: str, password: str, iterations: int = ITERATIONS) -> str:
    """A ``[[users]]`` entry (role rw) whose password is a PBKDF2 hash: each check costs."""
    pw_hash = hash_password(password, iterations=iterations)
    return f'\n[[users]]\nname = "{name}"\npassword_hash = "{pw_hash}"\nroles = ["rw"]\n'


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    # nodekit's users and rw grants, with app ("secret") hashed; app stays the first user,
    # whose check an unknown login costs
    plain = 'password = "secret"'
    assert SECURITY_USERS.count(plain) == 1
    app_hashed = f'password_hash = "{hash_password("secret", iterations=ITERATIONS)}"'
    users = SECURITY_USERS.replace(plain, app_hashed) + _user("victim", "v-pass")
    n = NodeProcess(tmp_path_factory.mktemp("auth"), extra_config=users, http=True).start()
    yield n
    n.stop()


async def _rest_text(s: aiohttp.ClientSession, base: str, user: str, pw: str) -> tuple[int, str]:
    headers = {"Authorization": aiohttp.encode_basic_auth(user, pw)}
    async with s.post(f"{base}/queues/auth.q/pull-consumers", headers=headers) as r:
        return r.status, await r.text()


def test_wrong_passwords_lock_the_source_then_even_the_right_one_waits(node, run):
    """Today each wrong password just costs a hash; after a few the source must be held."""

    async def go():
        async with aiohttp.ClientSession() as s:
            texts = []
            for _ in range(8):
                status, text = await _rest_text(s, node.http_url, "victim", "guess")
                assert status == 401
                texts.append(text)
            assert any("login throttle" in t for t in texts), texts
            status, text = await _rest_text(s, node.http_url, "victim", "v-pass")
            assert status == 401 and "login throttle" in text and "retry in" in text

    run(go())
    # the same throttle holds STOMP CONNECT from this address
    raw = RawStomp(node.stomp_port)
    try:
        frame = raw.connect(extra="login:app\npasscode:secret\n")
        assert frame.startswith(b"ERROR"), frame
        assert "authentication failed" in (header(frame, "message") or "")
        assert b"login throttle" in frame
    finally:
        raw.close()


def test_unknown_and_known_users_get_the_same_answer_and_cost(tmp_path, run):
    """Today an unknown login is refused at once (no hash): timing tells who exists."""
    users = _user("app", "secret", ITERATIONS * 3)
    n = NodeProcess(tmp_path, extra_config=users, http=True).start()
    try:

        async def go():
            async with aiohttp.ClientSession() as s:
                await _rest_text(s, n.http_url, "app", "secret")  # warm up
                times: dict[str, float] = {}
                for who in ("app", "nobody-here"):
                    t0 = time.monotonic()
                    status, text = await _rest_text(s, n.http_url, who, "wrong")
                    times[who] = time.monotonic() - t0
                    assert status == 401
                    assert text == f"authentication failed: bad credentials for user {who!r}\n"
                return times

        times = run(go())
        assert times["nobody-here"] > 0.4 * times["app"], times
    finally:
        n.stop()


def test_a_right_password_after_a_few_wrong_ones_still_works(tmp_path, run):
    """The throttle starts after free_failures: a user who mistyped twice is not locked."""
    n = NodeProcess(
        tmp_path,
        extra_config='[[users]]\nname = "app"\npassword = "secret"\nroles = ["rw"]\n',
        http=True,
    ).start()
    try:
        for _ in range(2):
            bad = stomp.Connection12([("127.0.0.1", n.stomp_port)])
            with pytest.raises(stomp.exception.ConnectFailedException):
                bad.connect("app", "wrong", wait=True)
        c = stomp.Connection12([("127.0.0.1", n.stomp_port)])
        c.connect("app", "secret", wait=True)
        assert c.is_connected()
        c.disconnect()
    finally:
        n.stop()


# -- the Authenticator itself --------------------------------------------------------------
def _auth(policy: LoginPolicy, checks: list[str]) -> Authenticator:
    def check(pw: str) -> bool:
        checks.append(pw)
        time.sleep(0.05)
        return pw == "right"

    sec = SecurityManager(enabled=True, users={"u": User("u", check, frozenset({"r"}))})
    return Authenticator(sec, policy)


def test_authenticator_runs_the_hash_off_the_loop_and_bounds_its_tables(run):
    checks: list[str] = []
    a = _auth(LoginPolicy(free_failures=100, free_failures_per_user=100, max_entries=50), checks)

    async def go():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        t = asyncio.ensure_future(ticker())
        for i in range(6):
            with pytest.raises(AuthenticationError, match="^authentication failed"):
                await a.authenticate(f"x{i}", "wrong", f"10.0.0.{i}:1")
        t.cancel()
        return ticks

    ticks = run(go())
    assert ticks > 20, "the loop stalled while passwords were checked"
    assert len(checks) == 6  # unknown logins were checked against a real user's hash
    for i in range(200):  # bounded memory whatever the number of names and sources
        a.by_user.failed(f"n{i}", 0.0)
        a.by_source.failed(f"h{i}", 0.0)
    assert len(a.by_user.entries) == 50 and len(a.by_source.entries) == 50
    a.close()


def test_authenticator_locks_after_free_failures_and_success_clears(run):
    checks: list[str] = []
    a = _auth(LoginPolicy(free_failures=2, base_delay=0.3, max_delay=1.0), checks)

    async def go():
        for _ in range(3):
            with pytest.raises(AuthenticationError):
                await a.authenticate("u", "wrong", "1.2.3.4:5")
        with pytest.raises(AuthenticationError, match="login throttle"):
            await a.authenticate("u", "right", "1.2.3.4:6")  # locked: not even checked
        assert len(checks) == 3
        p = await a.authenticate("u", "right", "5.6.7.8:1")  # another source is not locked
        assert p.name == "u" and p.roles == frozenset({"r"})
        await asyncio.sleep(0.35)
        assert (await a.authenticate("u", "right", "1.2.3.4:7")).name == "u"
        assert a.by_source.locked_for("1.2.3.4", time.monotonic()) == 0

    run(go())
    a.close()


def test_engine_authenticator_follows_new_users_and_keeps_the_installed_policy():
    """Replacing the engine's users (a reload, a test) must not fall back to the default
    policy, nor keep the old users' verified passwords."""

    class FakeEngine:  # authenticator() needs only ``security`` (and a weak reference)
        def __init__(self, security: SecurityManager) -> None:
            self.security = security

    engine = FakeEngine(SecurityManager(enabled=True))
    policy = LoginPolicy(free_failures=3, refusal_delay=0.2)
    installed = Authenticator(engine.security, policy)
    install_authenticator(engine, installed)  # type: ignore[arg-type]
    assert authenticator(engine) is installed  # type: ignore[arg-type]
    engine.security = SecurityManager(enabled=True)
    after = authenticator(engine)  # type: ignore[arg-type]
    assert after is not installed and after.security is engine.security
    assert after.policy is policy
    assert authenticator(engine) is after  # type: ignore[arg-type]
