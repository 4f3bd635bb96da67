"""HTTP tunnel and SockJS sessions (issue 10): bound to their creator, capped per source
address, and ended when they do not log in.  Real node, real HTTP requests; on a node
without these rules a stranger reads and writes the session, and unauthenticated sessions
hold their places until session_timeout."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from nodekit import NodeProcess
from tunnelkit import RawTunnel, stomp_bytes

HTTP = """
[acceptors.http.tunnel]
response_time = "1s"
session_timeout = "30s"
max_sessions_per_address = 3
connect_timeout = "1s"

[acceptors.http.sockjs]
max_sessions_per_address = 3
connect_timeout = "1s"
heartbeat = "0s"
disconnect_delay = "1s"
"""
CONNECT = stomp_bytes("CONNECT", **{"accept-version": "1.2", "host": "x"})


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("sessions"), http=HTTP).start()
    yield n
    n.stop()


# -- tunnel ---------------------------------------------------------------------------------
def test_tunnel_session_refuses_requests_without_its_token(node, run):
    async def go():
        base = node.http_url + "/tunnel"
        async with aiohttp.ClientSession() as owner, aiohttp.ClientSession() as stranger:
            raw = RawTunnel(owner, base)
            info = await raw.open()
            assert len(str(info["token"])) == 43  # 256 random bits
            assert (await raw.up(0, CONNECT))[0] == 200
            for method, path, params in (
                ("GET", f"/{raw.sid}/down", {"ack": "0"}),
                ("POST", f"/{raw.sid}/up", {"offset": str(len(CONNECT))}),
                ("DELETE", f"/{raw.sid}", {}),
            ):
                for headers in ({}, {"X-Tunnel-Token": "A" * 43}):
                    async with stranger.request(
                        method, base + path, params=params, headers=headers, data=b"SEND"
                    ) as r:
                        assert r.status == 403, (method, headers, r.status)
                        assert "X-Tunnel-Token" in await r.text()
            status, _, body = await raw.down(0)  # the owner's session is untouched
            assert status == 200 and body.startswith(b"CONNECTED")
            async with owner.delete(f"{base}/{raw.sid}") as r:
                assert r.status == 204

    run(go())


def test_tunnel_sessions_per_address_are_capped_with_503_naming_the_limit(node, run):
    async def go():
        base = node.http_url + "/tunnel"
        async with aiohttp.ClientSession() as http:
            made: list[dict[str, str]] = []
            for _ in range(3):
                async with http.post(base + "/open", params={"protocol": "stomp"}) as r:
                    assert r.status == 201
                    made.append(await r.json())
            async with http.post(base + "/open", params={"protocol": "stomp"}) as r:
                assert r.status == 503
                assert "max_sessions_per_address = 3" in await r.text()
            for info in made:
                hdr = {"X-Tunnel-Token": info["token"]}
                async with http.delete(f"{base}/{info['session']}", headers=hdr) as r:
                    assert r.status == 204
            async with http.post(base + "/open", params={"protocol": "stomp"}) as r:
                assert r.status == 201  # places came free
                info = await r.json()
            hdr = {"X-Tunnel-Token": info["token"]}
            async with http.delete(f"{base}/{info['session']}", headers=hdr) as r:
                assert r.status == 204

    run(go())


def test_tunnel_session_that_does_not_log_in_is_failed_naming_connect_timeout(node, run):
    async def go():
        async with aiohttp.ClientSession() as http:
            raw = RawTunnel(http, node.http_url + "/tunnel")
            await raw.open()
            assert (await raw.up(0, b"CONNECT\naccept-version:1.2\n"))[0] == 200  # unfinished
            t0 = time.monotonic()
            got = b""
            while True:
                assert time.monotonic() - t0 < 8, f"still open; got {got!r}"
                status, headers, body = await raw.down(len(got))
                if status == 410:
                    break
                assert status == 200
                got += body
                if headers.get("X-Tunnel-Closed"):
                    break
            assert got.startswith(b"ERROR\n") and b"connect_timeout" in got, got

    run(go(), 20)


# -- SockJS ---------------------------------------------------------------------------------
def _url(node: NodeProcess, sid: str, transport: str) -> str:
    return f"{node.http_url}/sockjs/stomp/000/{sid}/{transport}"


def test_sockjs_session_cannot_be_read_or_written_by_another_client(node, run):
    async def go():
        sid = "bound1"
        a = {"Cookie": "JSESSIONID=owner-cookie"}
        async with aiohttp.ClientSession() as http:
            async with http.post(_url(node, sid, "xhr"), headers=a) as r:
                assert (await r.text()) == "o\n"
            frame = json.dumps([CONNECT.decode()])
            for headers in ({}, {"Cookie": "JSESSIONID=someone-else"}):
                async with http.post(_url(node, sid, "xhr_send"), data=frame, headers=headers) as r:
                    assert r.status == 403, headers
                    assert "belongs to another client" in await r.text()
                async with http.post(_url(node, sid, "xhr"), headers=headers) as r:
                    assert r.status == 403, headers
            async with http.post(_url(node, sid, "xhr_send"), data=frame, headers=a) as r:
                assert r.status == 204
            async with http.post(_url(node, sid, "xhr"), headers=a) as r:
                text = await r.text()
                assert text.startswith("a[") and "CONNECTED" in text, text

        # another address, no cookie needed to tell: a session made without a cookie is
        # bound to its creator's address
        sid2 = "bound2"
        async with aiohttp.ClientSession() as http, http.post(_url(node, sid2, "xhr")) as r:
            assert (await r.text()) == "o\n"
        other = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
        async with aiohttp.ClientSession(connector=other) as http:
            async with http.post(_url(node, sid2, "xhr_send"), data=json.dumps(["x"])) as r:
                assert r.status == 403
            async with http.post(_url(node, sid2, "xhr")) as r:
                assert r.status == 403

    run(go())


def test_sockjs_sessions_per_address_are_capped_with_503_naming_the_limit(node, run):
    async def go():
        await asyncio.sleep(2.5)  # sessions of earlier tests expire (disconnect_delay 1 s)
        async with aiohttp.ClientSession() as http:
            for i in range(3):
                async with http.post(_url(node, f"cap{i}", "xhr")) as r:
                    assert r.status == 200
            async with http.post(_url(node, "cap3", "xhr")) as r:
                assert r.status == 503
                assert "max_sessions_per_address = 3" in await r.text()

    run(go())


def test_sockjs_session_that_does_not_log_in_is_closed_naming_connect_timeout(node, run):
    async def go():
        await asyncio.sleep(2.5)  # the capped sessions above expire
        async with aiohttp.ClientSession() as http:
            async with http.post(_url(node, "nologin", "xhr")) as r:
                assert (await r.text()) == "o\n"
            t0 = time.monotonic()
            async with http.post(_url(node, "nologin", "xhr")) as r:  # held until there is news
                text = await r.text()
            assert "connect_timeout" in text and "ERROR" in text, text
            assert time.monotonic() - t0 < 5

    run(go(), 20)
