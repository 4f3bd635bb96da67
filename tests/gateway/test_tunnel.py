"""The HTTP tunnel against a real node: STOMP over plain HTTP requests, the tunnel's own
requests one by one, timeouts and bad input."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time

import aiohttp
import pytest
from nodekit import NodeProcess
from stompkit import unique
from test_stomp_tls import self_signed
from tunnelkit import (
    CONNECT,
    HTTP,
    RESPONSE_TIME,
    SESSION_TIMEOUT,
    AsyncStomp,
    RawTunnel,
    stomp_bytes,
)

from waystation.client.tunnel import TunnelError, open_tunnel_connection
from waystation.wire.stomp import Frame, StompParser, encode_frame


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("tunnel-node"), http=HTTP).start()
    yield n
    n.stop()


@pytest.fixture
def url(node):
    return node.http_url + "/tunnel"


async def _raw(url: str):
    http = aiohttp.ClientSession()
    return http, RawTunnel(http, url)


async def _read_frames(raw: RawTunnel, ack: int, want: int) -> tuple[int, bytes]:
    """Poll until ``want`` NUL-terminated frames arrived; (new ack, bytes)."""
    data = b""
    while data.count(b"\0") < want:
        status, headers, body = await raw.down(ack)
        assert status == 200
        assert int(headers["X-Tunnel-Offset"]) == ack
        data += body
        ack += len(body)
    return ack, data


def test_stomp_send_subscribe_receipt(url, run):
    async def go():
        c = await AsyncStomp.tunnel(url)
        q = unique()
        c.frame("SUBSCRIBE", destination=f"/queue/{q}", id="s1", ack="auto", receipt="sub")
        await c.receipt("sub")
        c.frame("SEND", b"hello \x00 tunnel", destination=f"/queue/{q}", color="red", receipt="r1")
        await c.receipt("r1")
        m = await c.next()
        assert m.command == "MESSAGE"
        assert m.body == b"hello \x00 tunnel"
        assert m.headers["color"] == "red"
        assert m.headers["destination"] == f"/queue/{q}"
        await c.close()

    run(go(), 30)


def test_two_concurrent_sessions_do_not_mix(url, run):
    async def go():
        a, b = await AsyncStomp.tunnel(url), await AsyncStomp.tunnel(url)
        assert a.session_id != b.session_id
        qa, qb = unique(), unique()
        a.frame("SUBSCRIBE", destination=f"/queue/{qa}", id="s", ack="auto")
        b.frame("SUBSCRIBE", destination=f"/queue/{qb}", id="s", ack="auto")
        for i in range(300):
            a.frame("SEND", f"a{i}".encode(), destination=f"/queue/{qa}")
            b.frame("SEND", f"b{i}".encode(), destination=f"/queue/{qb}")
            if i % 50 == 0:
                await asyncio.sleep(0)
        got_a = [(await a.next()).body for _ in range(300)]
        got_b = [(await b.next()).body for _ in range(300)]
        assert got_a == [f"a{i}".encode() for i in range(300)]
        assert got_b == [f"b{i}".encode() for i in range(300)]
        await a.close()
        await b.close()

    run(go(), 30)


def test_idle_session_stays_up_with_empty_polls_at_response_time(url, run):
    async def go():
        http, raw = await _raw(url)
        async with http:
            info = await raw.open()
            assert info["response_time"] == RESPONSE_TIME
            assert info["session_timeout"] == SESSION_TIMEOUT
            await raw.up(0, CONNECT)  # (a session that never sends anything is ended)
            ack, _ = await _read_frames(raw, 0, 1)
            for _ in range(2):
                t0 = time.monotonic()
                status, headers, body = await raw.down(ack)
                took = time.monotonic() - t0
                assert (status, body, headers["X-Tunnel-Offset"]) == (200, b"", str(ack))
                assert RESPONSE_TIME * 0.9 <= took < RESPONSE_TIME * 2.5, took
                assert headers["Cache-Control"] == "no-store"
                assert "X-Tunnel-Closed" not in headers
        # the client keeps a poll outstanding: idle past the session timeout, still up, with
        # one empty poll per response_time
        c = await AsyncStomp.tunnel(url)
        q = unique()
        c.frame("SUBSCRIBE", destination=f"/queue/{q}", id="s", ack="auto", receipt="r")
        await c.receipt("r")
        stats = c.writer.get_extra_info("tunnel_stats")
        before = stats["requests"]
        await asyncio.sleep(SESSION_TIMEOUT + 1.2)
        polls = stats["requests"] - before
        assert 2 <= polls <= 6 and stats["failures"] == 0, stats
        c.frame("SEND", b"still here", destination=f"/queue/{q}")
        assert (await c.next()).body == b"still here"
        await c.close()

    run(go(), 30)


def test_a_newer_poll_makes_the_held_one_answer_empty(url, run):
    """One poll per session: a second poll (the client gave up on the first, a proxy retried
    it) answers the held one at once, empty, and itself gets what comes next."""

    async def go():
        http, raw = await _raw(url)
        async with http:
            await raw.open()
            await raw.up(0, CONNECT)
            ack, _ = await _read_frames(raw, 0, 1)
            t0 = time.monotonic()
            first = asyncio.ensure_future(raw.down(ack))
            await asyncio.sleep(0.3)
            second = asyncio.ensure_future(raw.down(ack))
            status, headers, body = await first
            assert (status, body, headers["X-Tunnel-Offset"]) == (200, b"", str(ack))
            assert time.monotonic() - t0 < RESPONSE_TIME * 0.9  # not held to the end
            sub = stomp_bytes("SUBSCRIBE", destination=f"/queue/{unique()}", id="s", receipt="r")
            await raw.up(len(CONNECT), sub)
            status, headers, body = await second
            assert status == 200 and headers["X-Tunnel-Offset"] == str(ack)
            assert body.startswith(b"RECEIPT") and b"receipt-id:r" in body

    run(go(), 30)


def test_a_session_that_never_sends_anything_ends_although_it_polls(url, run):
    """Polling alone does not keep a session whose protocol never started: it ends
    session_timeout after it was opened."""

    async def go():
        http, raw = await _raw(url)
        async with http:
            await raw.open()
            t0 = time.monotonic()
            while True:
                assert time.monotonic() - t0 < SESSION_TIMEOUT * 3, "still open"
                status, headers, body = await raw.down(0)
                if status == 410 or headers.get("X-Tunnel-Closed"):
                    break
                assert (status, body) == (200, b"")
            assert time.monotonic() - t0 >= SESSION_TIMEOUT * 0.9
            assert (await raw.down(0))[0] == 410

    run(go(), 30)


def test_a_session_closed_by_its_protocol_is_deleted_by_the_client(url, run):
    """After an ERROR the server's stream ends; the client DELETEs the session even though
    an upstream POST was refused (410) before the ERROR came down, so the session does not
    linger until session_timeout."""

    async def go():
        reader, writer = await open_tunnel_connection(url, limit=1024)
        q = unique()
        writer.write(CONNECT)
        writer.write(encode_frame("SUBSCRIBE", {"destination": f"/queue/{q}", "id": "s"}))
        for i in range(20):
            writer.write(encode_frame("SEND", {"destination": f"/queue/{q}"}, b"%04d" % i * 250))
        await asyncio.sleep(1.0)  # the reader is full: no poll goes out
        assert not writer.transport.is_reading()
        writer.write(b"BOGUS\n\n\0")  # the server answers ERROR and ends its stream
        await asyncio.sleep(0.5)
        writer.write(encode_frame("SEND", {"destination": "/queue/x"}, b"too late"))  # 410
        await asyncio.sleep(0.5)
        data = await asyncio.wait_for(reader.read(), 10)  # polls resume; EOF after the ERROR
        assert b"\0ERROR\nmessage:unknown command 'BOGUS'" in data, data[-300:]
        await asyncio.sleep(0.3)  # the DELETE, best effort, on the way
        http, raw = await _raw(url)
        async with http:
            raw.sid = str(writer.get_extra_info("tunnel_session"))
            status, headers, _ = await raw.down(0)
            assert status == 410, (status, headers)  # ended at once, not session_timeout later

    run(go(), 30)


def test_repeated_upstream_and_lost_answer_are_harmless(url, run):
    """A POST sent twice feeds its bytes once; a poll answer asked again with the same ack
    brings the same bytes."""

    async def go():
        http, raw = await _raw(url)
        async with http:
            await raw.open()
            for _ in range(2):
                status, headers, _ = await raw.up(0, CONNECT)
                assert status == 200 and headers["X-Tunnel-Received"] == str(len(CONNECT))
            first = await raw.down(0)
            again = await raw.down(0)  # as if the first answer had been lost
            assert first[2] == again[2] and first[2].startswith(b"CONNECTED")
            assert first[2].count(b"CONNECTED") == 1  # one CONNECT reached the session
            ack = len(first[2])
            # an overlapping POST: only the bytes past what the server has are new
            q = unique()
            sub = stomp_bytes("SUBSCRIBE", destination=f"/queue/{q}", id="s", receipt="x")
            status, headers, _ = await raw.up(0, CONNECT + sub)
            assert headers["X-Tunnel-Received"] == str(len(CONNECT + sub))
            _, data = await _read_frames(raw, ack, 1)
            assert data.startswith(b"RECEIPT") and b"receipt-id:x" in data

    run(go(), 30)


def test_session_timeout_closes_the_stomp_session(url, run):
    """A client-ack message held by a session that stops polling is redelivered to another
    consumer once the session times out, and the old session id answers 410."""

    async def go():
        q = unique()
        http, raw = await _raw(url)
        async with http:
            await raw.open()
            sub = stomp_bytes("SUBSCRIBE", destination=f"/queue/{q}", id="s", ack="client")
            await raw.up(0, CONNECT + sub)
            producer = await AsyncStomp.tunnel(url)
            producer.frame("SEND", b"precious", destination=f"/queue/{q}", receipt="p")
            await producer.receipt("p")
            _, data = await _read_frames(raw, 0, 2)  # CONNECTED, MESSAGE
            assert b"precious" in data
            t0 = time.monotonic()
            producer.frame("SUBSCRIBE", destination=f"/queue/{q}", id="s2", ack="auto")
            m = await producer.next(timeout=SESSION_TIMEOUT + 5)  # the abandoned one's message
            assert m.body == b"precious"
            assert time.monotonic() - t0 >= SESSION_TIMEOUT * 0.8
            status, _, text = await raw.up(len(CONNECT + sub), b"\n")
            assert status == 410 and "closed" in text
            assert (await raw.down(0))[0] == 410
            await producer.close()

    run(go(), 30)


def test_bad_frame_gets_error_and_ends_only_that_session(url, run):
    async def go():
        good = await AsyncStomp.tunnel(url)
        bad = await AsyncStomp.tunnel(url)
        bad.writer.write(b"BOGUS\nx:y\n\n\0")
        await asyncio.sleep(0.3)
        bad.frame("SEND", b"too late", destination="/queue/x")  # upstream now answers 410
        err = await bad.next()
        assert err.command == "ERROR" and "BOGUS" in err.headers["message"]
        assert await bad.ended() == []  # the tunnel ended after the ERROR: EOF, no error
        assert bad.eof is None
        http, raw = await _raw(url)
        async with http:
            raw.sid = bad.session_id
            assert (await raw.down(0))[0] == 410
        q = unique()
        good.frame("SUBSCRIBE", destination=f"/queue/{q}", id="s", ack="auto")
        good.frame("SEND", b"unaffected", destination=f"/queue/{q}")
        assert (await good.next()).body == b"unaffected"
        await good.close()
        await bad.close()

    run(go(), 30)


def test_bad_tunnel_requests_get_precise_4xx(url, node, run):
    async def go():
        http, raw = await _raw(url)
        async with http:

            async def req(method: str, path: str, **kw: object) -> tuple[int, str, dict]:
                async with http.request(method, url + path, **kw) as r:
                    return r.status, await r.text(), dict(r.headers)

            status, text, headers = await req("POST", "/open", params={"protocol": "smtp"})
            assert status == 400 and "'smtp'" in text and "stomp" in text
            assert headers["Cache-Control"] == "no-store"
            status, text, _ = await req("POST", "/open")
            assert status == 400 and "missing" in text and "stomp" in text
            assert (await req("GET", "/open"))[0] == 405
            unknown = "A" * 22
            status, text, headers = await req("GET", f"/{unknown}/down", params={"ack": "0"})
            assert status == 404 and unknown in text
            assert headers["Cache-Control"] == "no-store"
            assert (await req("POST", "/not-a-session/up", params={"offset": "0"}))[0] == 404
            assert (await req("DELETE", f"/{unknown}"))[0] == 404

            await raw.open()
            status, _, text = await raw.up(5, b"x")
            assert status == 409 and "beyond" in text
            status, text, headers = await req("POST", f"/{raw.sid}/up", data=b"x")
            assert status == 400 and "offset is required" in text
            status, text, _ = await req("POST", f"/{raw.sid}/up", params={"offset": "-1"})
            assert status == 400 and "non-negative integer" in text
            status, text, _ = await req("GET", f"/{raw.sid}/down")
            assert status == 400 and "ack is required" in text
            status, headers, body = await raw.down(99)
            assert status == 409 and headers["X-Tunnel-Sent"] == "0"
            status, _, headers = await req("POST", f"/{raw.sid}/up", params={"offset": "9"})
            assert status == 409 and headers["X-Tunnel-Received"] == "0"
            # the session survived all that
            assert (await raw.up(0, CONNECT))[0] == 200
            assert (await raw.down(0))[2].startswith(b"CONNECTED")
            assert (await req("DELETE", f"/{raw.sid}"))[0] == 204
            status, text, _ = await req("GET", f"/{raw.sid}/down", params={"ack": "0"})
            assert status == 410 and "closed" in text

        with pytest.raises(TunnelError, match="400"):
            await open_tunnel_connection(url, protocol="smtp")
        with pytest.raises(TunnelError, match="404"):
            await open_tunnel_connection(node.http_url + "/elsewhere")

    run(go(), 30)


def test_a_token_that_is_not_ascii_is_a_403(url, node, run):
    """Any wrong ``X-Tunnel-Token`` is a 403, whatever its bytes (non-ASCII UTF-8, not UTF-8
    at all, or empty), never a 500; the session itself is unharmed."""

    async def raw_get(path: str, token: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", node.http_port)
        writer.write(
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{node.http_port}\r\n".encode()
            + b"X-Tunnel-Token: "
            + token
            + b"\r\nConnection: close\r\n\r\n"
        )
        answer = await reader.read()
        writer.close()
        return answer.split(b"\r\n")[0]

    start = len(node.log())

    async def go():
        http, raw = await _raw(url)
        async with http:
            info = await raw.open()
            path = f"/tunnel/{raw.sid}/down?ack=0"
            for token in (b"\xc3\xa9", b"\xff\xfe", str(info["token"]).encode() + b"\xc3\xa9", b""):
                assert b" 403 " in await raw_get(path, token), token
            assert (await raw.up(0, CONNECT))[0] == 200
            assert (await raw.down(0))[2].startswith(b"CONNECTED")
        assert "Traceback" not in node.log()[start:]

    run(go(), 30)


def test_client_reports_loss_after_retry_for(tmp_path, run):
    """With the server gone the client retries, then the reader fails with TunnelError."""
    n = NodeProcess(tmp_path / "node", http=HTTP).start()

    async def go():
        reader, writer = await open_tunnel_connection(n.http_url + "/tunnel", retry_for=1.5)
        await asyncio.to_thread(n.kill9)
        t0 = time.monotonic()
        with pytest.raises(TunnelError):
            await asyncio.wait_for(reader.read(100), 10)
        assert 1.4 <= time.monotonic() - t0 < 6
        assert writer.is_closing()
        with pytest.raises(TunnelError):  # as with TCP: wait_closed reports why it ended
            await asyncio.wait_for(writer.wait_closed(), 5)

    try:
        run(go(), 30)
    finally:
        n.kill9()


def test_server_shutdown_ends_sessions(tmp_path, run):
    n = NodeProcess(tmp_path / "node", http=HTTP).start()

    async def go():
        c = await AsyncStomp.tunnel(n.http_url + "/tunnel")
        await asyncio.sleep(0.2)  # a poll is held now
        t0 = time.monotonic()
        await asyncio.to_thread(n.stop)
        assert await c.ended(timeout=5) == []
        assert c.eof is None  # told "closed", not left to time out
        assert time.monotonic() - t0 < 4
        await c.close()

    try:
        run(go(), 30)
    finally:
        n.kill9()


def test_slow_client_leaves_messages_in_the_queue(url, run):
    """A session that does not poll holds about 1 MiB (link + one response) of deliveries;
    the rest stays in the queue, where another consumer gets it.  Nothing is lost or
    doubled when the slow one finally reads."""
    count, body = 4000, b"m" * 1000

    async def go():
        q = unique()
        http, raw = await _raw(url)
        async with http:
            await raw.open()
            sub = stomp_bytes("SUBSCRIBE", destination=f"/queue/{q}", id="s", ack="auto")
            await raw.up(0, CONNECT + sub)
            ack, _ = await _read_frames(raw, 0, 1)  # CONNECTED
            producer = await AsyncStomp.tunnel(url)
            for i in range(count):
                producer.frame("SEND", body, destination=f"/queue/{q}", n=str(i))
            producer.frame("SEND", b"", destination=f"/queue/{unique()}", receipt="sent")
            await producer.receipt("sent", timeout=20)
            await raw.up(len(CONNECT + sub), b"\n")  # keeps the session alive, reads nothing
            producer.frame("SUBSCRIBE", destination=f"/queue/{q}", id="s2", ack="auto")
            fast: list[int] = []
            with contextlib.suppress(TimeoutError):
                while True:
                    fast.append(int((await producer.next(timeout=1.0)).headers["n"]))
            assert len(fast) > count - 1100, len(fast)  # at most ~1.2 MiB sat in the server
            _, data = await _read_frames(raw, ack, count - len(fast))
            slow = [int(h.split(b"\n", 1)[0]) for h in data.split(b"\nn:")[1:]]
            assert sorted(fast + slow) == list(range(count))
            await producer.close()

    run(go(), 40)


def test_tunnel_over_https_verifies_the_server(tmp_path, run):
    cert, key = self_signed(tmp_path)
    n = NodeProcess(
        tmp_path / "node", http=f'tls = {{ cert = "{cert}", key = "{key}" }}\n{HTTP}'
    ).start()
    url = f"https://127.0.0.1:{n.http_port}/tunnel"

    async def go():
        with pytest.raises(TunnelError, match="CERTIFICATE_VERIFY_FAILED"):
            await asyncio.wait_for(open_tunnel_connection(url), 5)  # not retried
        c = await AsyncStomp.tunnel(url, ssl=ssl.create_default_context(cafile=str(cert)))
        q = unique()
        c.frame("SUBSCRIBE", destination=f"/queue/{q}", id="s", ack="auto")
        c.frame("SEND", b"secret", destination=f"/queue/{q}")
        assert (await c.next()).body == b"secret"
        await c.close()

    try:
        run(go(), 30)
    finally:
        n.stop()


def test_reader_that_stops_reading_keeps_its_session(url, run):
    """A full StreamReader pauses the polls; the session must outlive session_timeout
    meanwhile and deliver everything once the reader drains."""

    async def go():
        reader, writer = await open_tunnel_connection(url, limit=4096)
        q = unique()
        writer.write(CONNECT)
        writer.write(encode_frame("SUBSCRIBE", {"destination": f"/queue/{q}", "id": "s"}))
        for i in range(2000):  # more than one poll answer (256 KiB)
            writer.write(encode_frame("SEND", {"destination": f"/queue/{q}"}, b"%05d" % i * 60))
        await writer.drain()
        await asyncio.sleep(SESSION_TIMEOUT + 1.5)  # not reading: the polls stop
        assert not writer.transport.is_reading()
        parser, bodies = StompParser(), []
        while len(bodies) < 2000:
            for f in parser.feed(await asyncio.wait_for(reader.read(1 << 16), 10)):
                if isinstance(f, Frame) and f.command == "MESSAGE":
                    bodies.append(f.body)
        assert bodies == [b"%05d" % i * 60 for i in range(2000)]
        writer.close()

    run(go(), 30)
