"""SockJS HTTP sessions that never log in cannot keep logged-in users out (issue 27,
finding 9): a per-address cap, and ``max_unauthenticated_sessions`` for sessions whose
STOMP CONNECT has not succeeded, a newcomer pushing out the oldest of the address holding
the most.  Security is on.  Flooding addresses are other loopback addresses (127.0.0.x)."""

from __future__ import annotations

import asyncio
import time
import uuid

import aiohttp
import pytest
from nodekit import SECURITY_USERS, NodeProcess
from test_sockjs import Xhr, stomp

HTTP = """
[acceptors.http.sockjs]
max_sessions = 40
max_sessions_per_address = 5
max_unauthenticated_sessions = 10
disconnect_delay = "2s"
"""
LOBBY_FULL = "too many SockJS sessions not logged in yet (max_unauthenticated_sessions = 10)"
PER_ADDRESS = "too many SockJS sessions from your address (max_sessions_per_address = 5)"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("sockjs-caps"), extra_config=SECURITY_USERS, http=HTTP)
    yield n.start()
    n.stop()


def _from(address: str) -> aiohttp.ClientSession:
    """An HTTP client whose requests come from ``address`` (a loopback address)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0)))


def _url(node: NodeProcess, sid: str) -> str:
    return f"{node.http_url}/sockjs/stomp/000/{sid}/xhr"


async def _create(http: aiohttp.ClientSession, node: NodeProcess) -> tuple[int, str, str]:
    """A new session (status, body, its id)."""
    sid = uuid.uuid4().hex
    async with http.post(_url(node, sid)) as r:
        return r.status, await r.text(), sid


def test_sessions_from_one_address_stop_at_max_sessions_per_address(node, run):
    async def go():
        async with _from("127.0.0.2") as http:
            answers = [await _create(http, node) for _ in range(6)]
            assert [a[:2] for a in answers[:5]] == [(200, "o\n")] * 5
            assert answers[5][:2] == (503, PER_ADDRESS)

    run(go())


def test_a_session_flood_that_never_logs_in_leaves_room_for_a_user(node, run):
    """Eight addresses keep creating sessions that never log in (40 wanted: all of
    max_sessions; 10 allowed).  A user logging in meanwhile gets in promptly and stays in;
    a flood session waiting on a poll is told it was pushed out."""

    async def go():
        clients = [_from(f"127.0.0.{10 + i}") for i in range(8)]
        stop = asyncio.Event()
        tally = {"created": 0, "refused": 0, "other": 0}
        texts: set[str] = set()

        async def flood(http: aiohttp.ClientSession) -> None:
            while not stop.is_set():
                status, text, _ = await _create(http, node)
                if status == 200:
                    tally["created"] += 1
                elif status == 503:
                    tally["refused"] += 1
                    texts.add(text)
                else:
                    tally["other"] += 1
                await asyncio.sleep(0.01)

        try:
            # one flood session waits on a poll: it hears why it ends
            status, _, sid = await _create(clients[0], node)
            assert status == 200
            waiting = asyncio.ensure_future(clients[0].post(_url(node, sid)))
            floods = [asyncio.ensure_future(flood(h)) for h in clients]
            await asyncio.sleep(1.5)  # the lobby is full and churning
            async with aiohttp.ClientSession() as http:  # the user, from 127.0.0.1
                t0 = time.monotonic()
                user = await Xhr(http, node).open()
                connect = {"accept-version": "1.2", "host": "/", "login": "app"}
                await user.send(stomp("CONNECT", passcode="secret", **connect))
                cmd, _, _ = await user.read()
                took = time.monotonic() - t0
                assert cmd == "CONNECTED"
                for i in range(5):  # the flood goes on; the user is never pushed out
                    await asyncio.sleep(0.3)
                    await user.send(
                        stomp("SEND", "hi", destination="/queue/caps.q", receipt=f"r{i}")
                    )
                    assert (await user.read())[0] == "RECEIPT"
            stop.set()
            await asyncio.gather(*floods)
            resp = await asyncio.wait_for(waiting, 5)
            pushed = await resp.text()
            return took, tally, texts, pushed
        finally:
            for h in clients:
                await h.close()

    took, tally, texts, pushed = run(go(), 60)
    print(f"\n[measured] SockJS session flood: user logged in after {took:.3f}s; flood {tally}")
    assert took < 2.0, took
    assert tally["created"] > 10 and tally["other"] == 0, tally
    assert texts <= {LOBBY_FULL, PER_ADDRESS}, texts
    assert pushed.startswith('c[3001,"Not logged in'), pushed


def test_a_full_lobby_refuses_the_address_holding_the_most(node, run):
    """Two addresses hold the lobby's 10 places: a third pushes one out; the address
    holding the most is refused (naming the limit) rather than pushing out its own."""

    async def go():
        await asyncio.sleep(2.5)  # the previous test's sessions expire (disconnect_delay)
        async with _from("127.0.0.20") as a, _from("127.0.0.21") as b, _from("127.0.0.22") as c:
            for http in (a, b):
                for _ in range(5):
                    assert (await _create(http, node))[0] == 200
            assert (await _create(c, node))[0] == 200  # pushes out one of a's: 4, 5, 1
            assert (await _create(a, node))[0] == 200  # pushes out one of b's: 5, 4, 1
            assert (await _create(c, node))[0] == 200  # pushes out one of a's: 4, 4, 2
            t0 = time.monotonic()
            status, text, _ = await _create(a, node)  # a is the top: pushes out nobody
            assert (status, text) == (503, LOBBY_FULL)
            assert time.monotonic() - t0 >= 1.0  # a refusal is held a second

    run(go(), 30)
