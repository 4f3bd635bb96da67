"""REST consumers (issue 10): capped per source address and per user, so one client (or a
flood of anonymous requests) cannot take every place; unauthenticated requests take none;
error bodies carry no internals.  On a node without the caps the flood fills
``max_consumers`` and everyone else gets 503."""

from __future__ import annotations

import aiohttp
import pytest
from nodekit import NodeProcess

HTTP = """
[acceptors.http.rest]
max_consumers_per_address = 5
max_consumers_per_user = 3
push_allow = ["127.0.0.1/32"]
"""
USERS = """
[[users]]
name = "app"
password = "secret"
roles = ["rw"]

[[users]]
name = "other"
password = "o"
roles = ["rw"]

[[permissions]]
match = "#"
send = ["rw"]
consume = ["rw"]
create_durable_queue = ["rw"]
create_non_durable_queue = ["rw"]
"""


def _basic(user: str, pw: str) -> dict[str, str]:
    return {"Authorization": aiohttp.encode_basic_auth(user, pw)}


@pytest.fixture
def open_node(tmp_path):
    n = NodeProcess(tmp_path, http=HTTP).start()
    yield n
    n.stop()


@pytest.fixture
def secure_node(tmp_path):
    n = NodeProcess(tmp_path, extra_config=USERS, http=HTTP).start()
    yield n
    n.stop()


def test_pull_consumers_per_address_are_capped_with_503_naming_the_limit(open_node, run):
    async def go():
        base = open_node.http_url
        async with aiohttp.ClientSession() as s:
            made = []
            for i in range(5):
                async with s.post(f"{base}/queues/lim.q{i % 2}/pull-consumers") as r:
                    assert r.status == 201
                    made.append(r.headers["Location"])
            async with s.post(f"{base}/topics/lim.t/pull-subscriptions") as r:
                assert r.status == 503
                assert "max_consumers_per_address = 5" in await r.text()
                assert r.headers.get("Retry-After")
            async with s.delete(made.pop()) as r:
                assert r.status == 204
            async with s.post(f"{base}/queues/lim.q0/pull-consumers") as r:
                assert r.status == 201  # the place came free

    run(go())


def test_per_user_cap_and_unauthenticated_requests_take_no_place(secure_node, run):
    async def go():
        base = secure_node.http_url
        async with aiohttp.ClientSession() as s:
            for _ in range(4):  # a flood without (or with bad) credentials takes nothing
                for h in ({}, _basic("app", "wrong")):
                    async with s.post(f"{base}/queues/lim.q/pull-consumers", headers=h) as r:
                        assert r.status == 401
            for _ in range(3):
                h = _basic("app", "secret")
                async with s.post(f"{base}/queues/lim.q/pull-consumers", headers=h) as r:
                    assert r.status == 201, await r.text()
            h = _basic("app", "secret")
            async with s.post(f"{base}/queues/lim.q/pull-consumers", headers=h) as r:
                assert r.status == 503
                assert "for user 'app' (max_consumers_per_user = 3)" in await r.text()
            h = _basic("other", "o")  # another user still gets one
            async with s.post(f"{base}/queues/lim.q/pull-consumers", headers=h) as r:
                assert r.status == 201

    run(go())


def test_push_registrations_count_against_the_same_caps(open_node, run):
    async def go():
        base = open_node.http_url
        doc = '<push-registration><link href="http://127.0.0.1:9/hook"/></push-registration>'
        hdr = {"Content-Type": "application/xml"}
        async with aiohttp.ClientSession() as s:
            for _ in range(5):
                async with s.post(
                    f"{base}/queues/lim.p/push-consumers", data=doc, headers=hdr
                ) as r:
                    assert r.status == 201, await r.text()
            async with s.post(f"{base}/queues/lim.p/push-consumers", data=doc, headers=hdr) as r:
                assert r.status == 503
                assert "max_consumers_per_address = 5" in await r.text()

    run(go())


def test_each_rest_consumer_is_a_core_session_counted_per_user(tmp_path, run):
    """A pull consumer holds one core session of its user: ``max_sessions_per_user`` refuses
    the next one with 503 naming the limit, and a DELETE gives the session back."""
    n = NodeProcess(tmp_path, extra_config=USERS + "\n[limits]\nmax_sessions_per_user = 2\n",
                    http=HTTP).start()  # fmt: skip

    async def go():
        base = n.http_url
        h = _basic("app", "secret")
        async with aiohttp.ClientSession() as s:
            made = []
            for _ in range(2):
                async with s.post(f"{base}/queues/lim.s/pull-consumers", headers=h) as r:
                    assert r.status == 201, await r.text()
                    made.append(r.headers["Location"])
            async with s.post(f"{base}/queues/lim.s/pull-consumers", headers=h) as r:
                assert r.status == 503
                assert r.headers["Retry-After"]
                assert "(limit max_sessions_per_user)" in await r.text()
            async with s.post(f"{base}/queues/lim.s/create", headers=h, data=b"x") as r:
                assert r.status == 503  # a send needs the user's request session too
                assert "max_sessions_per_user" in await r.text()
            async with s.post(f"{base}/queues/lim.s/create", headers=_basic("other", "o"),
                              data=b"x") as r:  # fmt: skip
                assert r.status == 201  # another user's sessions are not counted
            async with s.delete(made[0], headers=h) as r:
                assert r.status == 204
            async with s.post(f"{base}/queues/lim.s/pull-consumers", headers=h) as r:
                assert r.status == 201, await r.text()

    try:
        run(go())
    finally:
        n.stop()
