"""Tunnel sessions that never log in cannot keep logged-in users out (issue 27, finding 9):
a per-address cap, and ``max_unauthenticated_sessions`` for sessions not logged in yet, a
newcomer pushing out the oldest of the address holding the most.  Security is on.

Flooding addresses are other loopback addresses (127.0.0.x, as the node sees them); the
user comes from 127.0.0.1 through the real tunnel client (``client.tunnel``)."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from nodekit import SECURITY_USERS, NodeProcess
from tunnelkit import AsyncStomp

from waystation.client.tunnel import open_tunnel_connection
from waystation.gateway.admission import Lobby

HTTP = """
[acceptors.http.tunnel]
response_time = "1s"
session_timeout = "30s"
max_sessions = 40
max_sessions_per_address = 5
max_unauthenticated_sessions = 10
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("tunnel-caps"), extra_config=SECURITY_USERS, http=HTTP)
    yield n.start()
    n.stop()


def _from(address: str) -> aiohttp.ClientSession:
    """An HTTP client whose requests come from ``address`` (a loopback address)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(address, 0)))


async def _open(http: aiohttp.ClientSession, base: str) -> tuple[int, str, dict[str, str]]:
    async with http.post(base + "/open", params={"protocol": "stomp"}) as r:
        if r.status == 201:
            return r.status, "", await r.json()
        return r.status, await r.text(), {}


async def _login(base: str) -> tuple[AsyncStomp, float]:
    """The real tunnel client, logging in as app; and how long that took."""
    t0 = time.monotonic()
    reader, writer = await open_tunnel_connection(base, retry_for=10)
    client = AsyncStomp(reader, writer)
    headers = {"accept-version": "1.2", "host": "x", "login": "app", "passcode": "secret"}
    client.frame("CONNECT", **headers)
    f = await client.next()
    assert f.command == "CONNECTED", f
    return client, time.monotonic() - t0


async def _round_trip(client: AsyncStomp, rid: str) -> None:
    client.frame("SEND", b"hi", destination="/queue/caps.q", receipt=rid)
    await client.receipt(rid)


def test_opens_from_one_address_stop_at_max_sessions_per_address(node, run):
    async def go():
        base = node.http_url + "/tunnel"
        async with _from("127.0.0.2") as http:
            answers = [await _open(http, base) for _ in range(6)]
            assert [a[0] for a in answers] == [201] * 5 + [503]
            assert "max_sessions_per_address = 5" in answers[-1][1]
            for _, _, info in answers[:5]:
                hdr = {"X-Tunnel-Token": info["token"]}
                async with http.delete(f"{base}/{info['session']}", headers=hdr) as r:
                    assert r.status == 204

    run(go())


def test_an_open_flood_that_never_logs_in_leaves_room_for_a_user(node, run):
    """Eight addresses keep opening sessions that never log in (40 wanted: all of
    max_sessions; 10 allowed).
    A user opening a tunnel and logging in meanwhile gets in, promptly, and stays in while
    the flood goes on; the flood's own sessions are the ones pushed out."""

    async def go():
        base = node.http_url + "/tunnel"
        clients = [_from(f"127.0.0.{10 + i}") for i in range(8)]
        stop = asyncio.Event()
        tally = {"opened": 0, "refused": 0, "other": 0}
        texts: set[str] = set()
        opened: list[tuple[aiohttp.ClientSession, dict[str, str]]] = []

        async def flood(http: aiohttp.ClientSession) -> None:
            while not stop.is_set():
                status, text, info = await _open(http, base)
                if status == 201:
                    tally["opened"] += 1
                    opened.append((http, info))
                elif status == 503:
                    tally["refused"] += 1
                    texts.add(text.split(";")[0])
                else:
                    tally["other"] += 1
                await asyncio.sleep(0.01)

        try:
            floods = [asyncio.ensure_future(flood(h)) for h in clients]
            await asyncio.sleep(1.5)  # the lobby is full and churning
            user, took = await _login(base)
            for i in range(5):  # the flood goes on; the logged-in session is never pushed out
                await asyncio.sleep(0.3)
                await _round_trip(user, f"r{i}")
            stop.set()
            await asyncio.gather(*floods)

            # the flood's sessions were pushed out (410 Gone), at most 10 are still there
            async def delete(http: aiohttp.ClientSession, info: dict[str, str]) -> int:
                hdr = {"X-Tunnel-Token": info["token"]}
                async with http.delete(f"{base}/{info['session']}", headers=hdr) as r:
                    return r.status

            statuses = await asyncio.gather(*(delete(h, i) for h, i in opened))
            assert set(statuses) <= {204, 410}, set(statuses)
            live = statuses.count(204)
            await _round_trip(user, "last")
            user.writer.close()
            return took, tally, texts, live
        finally:
            for h in clients:
                await h.close()

    took, tally, texts, live = run(go(), 60)
    print(f"\n[measured] tunnel open flood: user logged in after {took:.3f}s; flood {tally}")
    assert took < 2.0, took
    assert tally["opened"] > 10 and tally["other"] == 0, tally  # churned through the lobby
    assert live <= 10, live
    assert texts <= {
        "too many tunnel sessions from your address (max_sessions_per_address = 5)",
        "too many tunnel sessions not logged in yet (max_unauthenticated_sessions = 10)",
    }, texts


def test_a_full_lobby_refuses_the_address_holding_the_most(node, run):
    """With every place of the lobby held by one address, that address is refused (the
    limit named) instead of pushing out its own; another address pushes one out."""

    async def go():
        base = node.http_url + "/tunnel"
        async with _from("127.0.0.20") as a, _from("127.0.0.21") as b, _from("127.0.0.22") as c:
            for http in (a, b):
                for _ in range(5):
                    assert (await _open(http, base))[0] == 201
            status, text, _ = await _open(c, base)  # 0 held: pushes out one of a's or b's
            assert status == 201, text
            t0 = time.monotonic()
            status, text, _ = await _open(a, base)  # a holds 5 or 4, c 1: a pushes b's
            status2, text2, _ = await _open(c, base)
            assert (status, status2) == (201, 201), (text, text2)
            # a, b, c hold 4, 4, 2: a is (one of) the top, so it may push out nobody
            status, text, _ = await _open(a, base)
            assert status == 503, text
            assert text.startswith(
                "too many tunnel sessions not logged in yet (max_unauthenticated_sessions = 10)"
            ), text
            assert time.monotonic() - t0 >= 1.0  # a refusal is held a second

    run(go(), 30)


# -- the Lobby itself ---------------------------------------------------------------------------
def test_lobby_pushes_out_the_oldest_of_the_address_holding_the_most():
    lobby = Lobby("sessions", 6, "max_unauthenticated_sessions")
    for i in range(4):
        lobby.enter(f"a{i}", "A")
    lobby.enter("b0", "B")
    lobby.enter("b1", "B")
    assert lobby.full and lobby.top == 4
    assert lobby.victim("C") == "a0" and lobby.victim("B") == "a0"
    assert lobby.victim("A") is None  # the top address pushes out nobody
    lobby.leave("a0")
    lobby.enter("c0", "C")
    assert lobby.victim("C") == "a1"
    for m in ("a1", "a2", "a3"):
        lobby.leave(m)
    assert lobby.top == 2 and lobby.victim("C") == "b0" and lobby.victim("D") == "b0"
    lobby.leave("b0")
    lobby.leave("b0")  # idempotent
    assert lobby.top == 1 and len(lobby) == 2 and lobby.victim("C") is None
    lobby.leave("b1")
    lobby.leave("c0")
    assert lobby.top == 0 and not lobby.by_host and not lobby.hosts_with and len(lobby) == 0
