"""The SockJS endpoint (``/sockjs/stomp``) at protocol level, against a real node, with
aiohttp's client and the websockets client playing the browser and stomp.py over TCP on
the other side.  The node runs with short heart-beats and disconnect delay so timing rules
are seen quickly."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid

import aiohttp
import pytest
from nodekit import NodeProcess, RawStomp
from stompkit import connect, unique
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

HEARTBEAT = 1.0
DISCONNECT_DELAY = 3.0
Frame = tuple[str, dict[str, str], bytes]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(
        tmp_path_factory.mktemp("sockjs-node"),
        http=(
            "[acceptors.http.sockjs]\n"
            f'heartbeat = "{HEARTBEAT}s"\n'
            f'disconnect_delay = "{DISCONNECT_DELAY}s"\n'
            'response_limit = "4KiB"\n'
            'client_url = "/js/sockjs.min.js"\n'
        ),
    ).start()
    yield n
    n.stop()


def base(node: NodeProcess) -> str:
    return node.http_url + "/sockjs/stomp"


def stomp(cmd: str, body: str = "", **headers: str) -> str:
    return cmd + "\n" + "".join(f"{k}:{v}\n" for k, v in headers.items()) + "\n" + body + "\x00"


def parse_frames(buf: bytes) -> tuple[list[Frame], bytes]:
    """Whole STOMP frames at the front of ``buf`` (heart-beat EOLs skipped), and the rest."""
    out: list[Frame] = []
    while True:
        buf = buf.lstrip(b"\r\n")
        head_end = buf.find(b"\n\n")
        if head_end < 0:
            return out, buf
        m = re.search(rb"\ncontent-length:(\d+)\n", buf[: head_end + 1])
        end = head_end + 2 + int(m.group(1)) if m else buf.find(b"\x00", head_end)
        if end < 0 or len(buf) <= end:
            return out, buf
        head, body = buf[:head_end].decode().split("\n"), buf[head_end + 2 : end]
        headers: dict[str, str] = {}
        for line in head[1:]:
            k, _, v = line.partition(":")
            headers.setdefault(k, v)
        out.append((head[0], headers, body))
        buf = buf[end + 1 :]


class Xhr:
    """A SockJS session over xhr polling, as sockjs-client's xhr-polling transport."""

    def __init__(self, http: aiohttp.ClientSession, node: NodeProcess) -> None:
        self.http = http
        self.url = f"{base(node)}/000/{uuid.uuid4().hex}"
        self.buf = b""
        self.frames: list[Frame] = []
        self.close_frame: str | None = None

    async def poll(self) -> str:
        async with self.http.post(self.url + "/xhr") as r:
            assert r.status == 200
            return await r.text()

    async def open(self) -> Xhr:
        assert await self.poll() == "o\n"
        return self

    async def send(self, *messages: str) -> None:
        async with self.http.post(self.url + "/xhr_send", data=json.dumps(messages)) as r:
            assert r.status == 204, await r.text()

    async def read(self, timeout: float = 5.0) -> Frame:
        end = time.monotonic() + timeout
        while not self.frames:
            assert time.monotonic() < end, "no STOMP frame"
            text = await self.poll()
            if text.startswith("a"):
                self.buf += "".join(json.loads(text[1:])).encode()
                frames, self.buf = parse_frames(self.buf)
                self.frames += frames
            elif text.startswith("c"):
                self.close_frame = text
                raise AssertionError(f"session closed: {text!r}")
            else:
                assert text == "h\n", text
        return self.frames.pop(0)

    async def connect(self) -> dict[str, str]:
        await self.send(stomp("CONNECT", **{"accept-version": "1.2", "host": "/"}))
        cmd, h, _ = await self.read()
        assert cmd == "CONNECTED", (cmd, h)
        return h

    async def subscribe(self, destination: str, sid: str = "1", ack: str = "auto") -> None:
        await self.send(stomp("SUBSCRIBE", id=sid, destination=destination, ack=ack, receipt="s"))
        assert (await self.read())[0] == "RECEIPT"


async def until(pred, timeout: float = 5.0, step: float = 0.05) -> None:
    end = time.monotonic() + timeout
    while not await pred():
        assert time.monotonic() < end, "condition not met in time"
        await asyncio.sleep(step)


# -- static URLs ---------------------------------------------------------------------------


def test_greeting_info_and_cors_preflight(node, run):
    async def go():
        async with aiohttp.ClientSession() as http:
            for url in (base(node), base(node) + "/"):
                async with http.get(url) as r:
                    assert r.status == 200 and await r.text() == "Welcome to SockJS!\n"
                    assert r.headers["Content-Type"] == "text/plain; charset=UTF-8"
            entropy = set()
            for _ in range(2):
                origin = {"Origin": "http://127.0.0.1:9"}
                async with http.get(base(node) + "/info", headers=origin) as r:
                    assert r.status == 200
                    assert r.headers["Content-Type"] == "application/json; charset=UTF-8"
                    assert r.headers["Cache-Control"].startswith("no-store, no-cache")
                    assert r.headers["Access-Control-Allow-Origin"] == "http://127.0.0.1:9"
                    assert r.headers["Access-Control-Allow-Credentials"] == "true"
                    assert "Set-Cookie" not in r.headers
                    info = json.loads(await r.text())
                assert info["websocket"] is True and info["cookie_needed"] is False
                assert info["origins"] == ["*:*"]
                entropy.add(info["entropy"])
            assert len(entropy) == 2
            for path, methods in (("/info", "OPTIONS, GET"), ("/0/s/xhr_send", "OPTIONS, POST")):
                hdrs = {"Origin": "null", "Access-Control-Request-Headers": "a, b"}
                async with http.options(base(node) + path, headers=hdrs) as r:
                    assert r.status == 204 and not await r.read()
                    assert r.headers["Access-Control-Allow-Origin"] == "*"
                    assert r.headers["Access-Control-Allow-Methods"] == methods
                    assert r.headers["Access-Control-Allow-Headers"] == "a, b"
                    assert int(r.headers["Access-Control-Max-Age"]) >= 1_000_000
                    assert "public" in r.headers["Cache-Control"] and r.headers["Expires"]

    run(go())


def test_iframe_page_is_cacheable_and_loads_the_configured_client(node, run):
    async def go():
        async with aiohttp.ClientSession() as http:
            tags = set()
            for page in ("/iframe.html", "/iframe-1.6.1.html", "/iframe-a.html?t=123"):
                async with http.get(base(node) + page) as r:
                    assert r.status == 200
                    assert r.headers["Content-Type"] == "text/html; charset=UTF-8"
                    assert '<script src="/js/sockjs.min.js"></script>' in await r.text()
                    assert "max-age=31536000" in r.headers["Cache-Control"]
                    tags.add(r.headers["ETag"])
            assert len(tags) == 1
            async with http.get(
                base(node) + "/iframe.html", headers={"If-None-Match": tags.pop()}
            ) as r:
                assert r.status == 304 and not await r.read()
            for bad in ("/iframe.htm", "/IFRAME.HTML", "/iframe-/.html", "/a", "/a/a"):
                async with http.get(base(node) + bad) as r:
                    assert r.status == 404, bad

    run(go())


# -- sessions over xhr polling ---------------------------------------------------------------


def test_session_paths_and_unknown_sessions(node, run):
    async def go():
        async with aiohttp.ClientSession() as http:
            for part in ("/a./a", "/a/a.", "//a", "/a"):
                async with http.post(base(node) + part + "/xhr") as r:
                    assert r.status == 404, part
            async with http.post(base(node) + "/000/nobody/xhr_send", data='["x"]') as r:
                assert r.status == 404
            # the server id is a load-balancer hint: any value reaches the same session
            c = await Xhr(http, node).open()
            c.url = c.url.replace("/000/", "/999/")
            assert (await c.connect())["version"] == "1.2"

    run(go())


def test_xhr_polling_exchange_with_a_tcp_client_in_order(node, run):
    q, q2 = unique(), unique()
    tcp, lst = connect(node.stomp_port)
    tcp.subscribe(f"/queue/{q2}", id="t")

    async def go():
        async with aiohttp.ClientSession() as http:
            c = await Xhr(http, node).open()
            await c.connect()
            await c.subscribe(f"/queue/{q}")
            tcp.send(f"/queue/{q}", "from tcp", headers={"k": "v"})
            cmd, h, body = await c.read()
            assert (cmd, body, h["k"]) == ("MESSAGE", b"from tcp", "v")
            # 30 frames in 10 requests, some straddling two SockJS messages, some persistent
            # (the session holds its input while those are written to the journal)
            n = 0
            for _ in range(10):
                msgs = [
                    stomp("SEND", str(n + i), destination=f"/queue/{q2}", persistent="true")
                    if i == 1
                    else stomp("SEND", str(n + i), destination=f"/queue/{q2}")
                    for i in range(3)
                ]
                n += 3
                cut = len(msgs[1]) // 2
                await c.send(msgs[0], msgs[1][:cut], msgs[1][cut:], msgs[2])
            body = "héllo"
            await c.send(stomp("SEND", body, destination=f"/queue/{q2}", **{"content-length": "6"}))

    run(go())
    got = [m.body for m in lst.wait_messages(31)]
    assert got == [str(i) for i in range(30)] + ["héllo"]
    tcp.disconnect()


def test_xhr_send_refuses_bad_payloads_with_the_spec_errors(node, run):
    async def go():
        async with aiohttp.ClientSession() as http:
            c = await Xhr(http, node).open()
            for payload, text in (
                ("", "Payload expected."),
                ('["x', "Broken JSON encoding."),
                ('{"a": 1}', "Broken JSON encoding."),
                ("[1, 2]", "Broken JSON encoding."),
            ):
                async with http.post(c.url + "/xhr_send", data=payload) as r:
                    assert (r.status, await r.text()) == (500, text)
            assert (await c.connect())["version"] == "1.2"  # the session is unharmed

    run(go())


def test_a_second_receiver_is_refused_and_the_first_keeps_going(node, run):
    async def go():
        async with aiohttp.ClientSession() as http:
            c = await Xhr(http, node).open()
            first = asyncio.ensure_future(c.poll())
            await asyncio.sleep(0.3)
            assert await c.poll() == 'c[2010,"Another connection still open"]\n'
            assert await first == "h\n"  # undisturbed: ends with a heart-beat
            assert (await c.connect())["version"] == "1.2"

    run(go())


def test_a_receiver_dropped_by_the_client_ends_the_session(node, run):
    async def go():
        async with aiohttp.ClientSession() as http:
            c = Xhr(http, node)
            r = await http.post(c.url + "/xhr_streaming")
            assert await r.content.readline() == b"h" * 2048 + b"\n"
            assert await r.content.readline() == b"o\n"
            r.close()  # drops the connection mid-stream

            async def interrupted() -> bool:
                return await c.poll() == 'c[1002,"Connection interrupted"]\n'

            await until(interrupted, timeout=4.0, step=0.3)

    run(go())


def test_a_poll_dropped_by_the_client_ends_the_session_before_taking_a_message(node, run):
    """A message arriving just after the client dropped its poll must not be written to the
    dead request while the session carries on: the session ends (c[1002]) and, under client
    acks, the message goes back to the queue."""
    q = unique()
    tcp, lst = connect(node.stomp_port)

    async def go():
        async with aiohttp.ClientSession() as http:
            c = await Xhr(http, node).open()
            await c.connect()
            await c.subscribe(f"/queue/{q}", ack="client-individual")
            reader, writer = await asyncio.open_connection("127.0.0.1", node.http_port)
            path = c.url.removeprefix(node.http_url) + "/xhr"
            writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
            await writer.drain()
            await asyncio.sleep(0.2)  # the poll is held now
            writer.close()  # the client gives up on it
            await asyncio.sleep(0.1)
            tcp.send(f"/queue/{q}", "m1")  # well within the server's 1 s look at the socket
            await asyncio.sleep(0.5)
            assert await c.poll() == 'c[1002,"Connection interrupted"]\n'

    run(go())
    tcp.subscribe(f"/queue/{q}", id="t")
    msg = lst.wait_messages(1)[0]
    assert msg.body == "m1" and msg.headers.get("redelivered") == "true"
    tcp.disconnect()


def test_xhr_streaming_prelude_framing_and_response_limit(node, run):
    q = unique()

    async def go():
        async with aiohttp.ClientSession() as http:
            c = Xhr(http, node)
            r = await http.post(c.url + "/xhr_streaming")
            assert r.headers["Content-Type"] == "application/javascript; charset=UTF-8"
            assert r.headers["Access-Control-Allow-Credentials"] == "true"
            assert await r.content.readline() == b"h" * 2048 + b"\n"
            assert await r.content.readline() == b"o\n"
            await c.send(stomp("CONNECT", **{"accept-version": "1.2", "host": "/"}))
            line = await r.content.readline()
            assert line.startswith(b'a["CONNECTED\\n') and line.endswith(b'\\u0000"]\n')
            await c.send(stomp("SUBSCRIBE", id="1", destination=f"/queue/{q}"))
            for i in range(3):
                await c.send(stomp("SEND", f"{i}" * 1500, destination=f"/queue/{q}"))
            rest = await asyncio.wait_for(r.read(), 5)  # the response ends past 4 KiB
            r.close()
            lines = rest.splitlines(keepends=True)
            assert all(x.startswith(b"a[") or x == b"h\n" for x in lines)
            sent = len(line) + len(rest)  # what followed the open frame
            assert sent >= 4096 > sent - len(lines[-1])
            # the next streaming request joins the same session (no new "o")
            async with http.post(c.url + "/xhr_streaming") as r2:
                assert await r2.content.readline() == b"h" * 2048 + b"\n"
                await c.send(stomp("SEND", "next", destination=f"/queue/{q}"))
                line = await asyncio.wait_for(r2.content.readline(), 5)
                assert line.startswith(b'a["MESSAGE\\n') and b"\\n\\nnext" in line

    run(go())


def test_heartbeat_frames_at_the_configured_interval(node, run):
    async def streaming(http: aiohttp.ClientSession) -> None:
        async with http.post(Xhr(http, node).url + "/xhr_streaming") as r:
            await r.content.readline()
            assert await r.content.readline() == b"o\n"
            t0 = time.monotonic()
            for i in (1, 2):
                assert await asyncio.wait_for(r.content.readline(), 5) == b"h\n"
                assert 0.8 * i * HEARTBEAT < time.monotonic() - t0 < 3 * i * HEARTBEAT

    async def polling(http: aiohttp.ClientSession) -> None:
        c = await Xhr(http, node).open()
        t0 = time.monotonic()
        assert await c.poll() == "h\n"  # an idle poll is answered with a heart-beat
        assert 0.8 * HEARTBEAT < time.monotonic() - t0 < 3 * HEARTBEAT

    async def go():
        async with aiohttp.ClientSession() as http:
            await asyncio.gather(streaming(http), polling(http))

    run(go())


def test_a_session_without_receiver_is_closed_after_disconnect_delay(node, run):
    q = unique()
    tcp, lst = connect(node.stomp_port)

    async def go():
        async with aiohttp.ClientSession() as http:
            c = await Xhr(http, node).open()
            await c.connect()
            await c.subscribe(f"/queue/{q}")
            t0 = time.monotonic()

            async def forgotten() -> bool:
                async with http.post(c.url + "/xhr_send", data='["\\n"]') as r:
                    return r.status == 404

            await until(forgotten, timeout=DISCONNECT_DELAY + 3, step=0.2)
            assert time.monotonic() - t0 > DISCONNECT_DELAY - 0.5
            # a new receiving request on that id opens a fresh session
            assert await c.poll() == "o\n"

    run(go())
    # the SockJS subscription went with the session: the TCP consumer gets every message
    tcp.subscribe(f"/queue/{q}", id="t")
    for i in range(4):
        tcp.send(f"/queue/{q}", str(i))
    assert [m.body for m in lst.wait_messages(4)] == ["0", "1", "2", "3"]
    tcp.disconnect()


def test_a_closed_session_answers_with_its_close_frame(node, run):
    async def go():
        async with aiohttp.ClientSession() as http:
            c = await Xhr(http, node).open()
            await c.connect()
            await c.send(stomp("DISCONNECT", receipt="bye"))
            cmd, h, _ = await c.read()
            assert (cmd, h["receipt-id"]) == ("RECEIPT", "bye")
            for _ in range(2):
                assert await c.poll() == 'c[3000,"Go away!"]\n'

    run(go())


# -- STOMP over SockJS ---------------------------------------------------------------------


def test_stomp_sees_the_same_frames_as_over_tcp(node, run):
    q = unique()
    script = [
        stomp("CONNECT", **{"accept-version": "1.2", "host": "/", "heart-beat": "0,0"}),
        stomp("SUBSCRIBE", id="1", destination=f"/queue/{q}", receipt="r1"),
        stomp("SEND", "hi", destination=f"/queue/{q}", receipt="r2", k="v"),
    ]

    def shape(frames: list[Frame]) -> list[tuple[str, list[str], bytes]]:
        return sorted((c, sorted(h), b) for c, h, b in frames)

    raw = RawStomp(node.stomp_port)
    raw.send("".join(script).encode())
    tcp_frames = [parse_frames(raw.read_frame())[0][0] for _ in range(4)]
    raw.close()

    async def go() -> list[Frame]:
        async with aiohttp.ClientSession() as http:
            c = await Xhr(http, node).open()
            await c.send(*script)
            return [await c.read() for _ in range(4)]

    sockjs_frames = run(go())
    assert shape(sockjs_frames) == shape(tcp_frames)


def test_a_stomp_error_closes_only_that_session(node, run):
    q = unique()

    async def go():
        async with aiohttp.ClientSession() as http:
            bad, good = await Xhr(http, node).open(), await Xhr(http, node).open()
            await bad.connect()
            await good.connect()
            await good.subscribe(f"/queue/{q}")
            await bad.send(stomp("FROB", x="y"))
            cmd, h, _ = await bad.read()
            assert cmd == "ERROR" and "FROB" in h["message"]
            assert await bad.poll() == 'c[3000,"Go away!"]\n'
            await good.send(stomp("SEND", "still here", destination=f"/queue/{q}"))
            assert (await good.read())[2] == b"still here"

    run(go())


@pytest.mark.parametrize("ack", ["auto", "client-individual"])
def test_a_binary_body_cannot_cross_sockjs_so_it_is_dead_lettered(node, run, ack):
    """SockJS carries text: a message whose body is not UTF-8 goes to the dead-letter
    address with a reason (never lost, even with auto-ack) and the session carries on."""
    q = unique()
    tcp, lst = connect(node.stomp_port, auto_decode=False)

    async def go():
        async with aiohttp.ClientSession() as http:
            c = await Xhr(http, node).open()
            await c.connect()
            await c.subscribe(f"/queue/{q}", ack=ack)
            tcp.send(f"/queue/{q}", b"text first")
            tcp.send(f"/queue/{q}", b"\xff\xfe binary", headers={"persistent": "true"})
            tcp.send(f"/queue/{q}", b"text after")
            assert (await c.read())[2] == b"text first"
            assert (await c.read())[2] == b"text after"

    run(go())
    tcp.subscribe("/queue/DLQ", id="dlq", selector=f"_WS_ORIG_ADDRESS = '{q}'")
    dead = lst.wait_messages(1)[0]
    assert dead.body == b"\xff\xfe binary"
    assert dead.headers["_WS_DLQ_REASON"] == "body-not-text"
    tcp.disconnect()


def test_a_browser_that_stops_polling_pauses_its_consumer(node, run):
    """Past the link's 1 MiB high-water mark the session's consumer pauses: the rest stays
    in the queue for another consumer, and nothing is lost or duplicated."""
    q, n, size = unique(), 300, 8192
    producer, plst = connect(node.stomp_port)

    async def go() -> tuple[list[str], list[str]]:
        async with aiohttp.ClientSession() as http:
            c = await Xhr(http, node).open()
            await c.connect()
            await c.subscribe(f"/queue/{q}")
            for i in range(n):
                headers = {"receipt": "last"} if i == n - 1 else {}
                producer.send(f"/queue/{q}", f"{i:04d}".ljust(size, "x"), headers=headers)
            plst.wait_receipt("last")
            other, olst = connect(node.stomp_port)
            other.subscribe(f"/queue/{q}", id="o")
            await asyncio.sleep(0.3)
            count = -1
            while count != len(olst.messages):  # until the queue is drained
                count = len(olst.messages)
                await asyncio.sleep(0.3)
            other.disconnect()
            mine: list[str] = []
            while len(mine) + count < n:
                mine.append((await c.read())[2][:4].decode())
            return mine, [m.body[:4] for m in olst.messages]

    mine, others = run(go())
    assert len(others) > n // 3, (
        f"only {len(others)} left in the queue: the consumer was not paused"
    )
    assert sorted(mine + others) == [f"{i:04d}" for i in range(n)]
    assert mine == sorted(mine)
    producer.disconnect()


# -- other transports ----------------------------------------------------------------------


def test_eventsource_htmlfile_and_jsonp_framing(node, run):
    connect_frame = stomp("CONNECT", **{"accept-version": "1.2", "host": "/"})

    async def go():
        async with aiohttp.ClientSession() as http:
            c = Xhr(http, node)
            async with http.get(c.url + "/eventsource") as r:
                assert r.headers["Content-Type"] == "text/event-stream; charset=UTF-8"
                assert await r.content.readline() == b"\r\n"
                assert await r.content.readuntil(b"\r\n\r\n") == b"data: o\r\n\r\n"
                await c.send(connect_frame)
                event = await r.content.readuntil(b"\r\n\r\n")
                assert event.startswith(b'data: a["CONNECTED\\n')

            c = Xhr(http, node)
            async with http.get(c.url + "/htmlfile?c=cb.x") as r:
                assert r.headers["Content-Type"] == "text/html; charset=UTF-8"
                head = await r.content.readuntil(b"\r\n\r\n")
                assert b"var c = parent.cb.x;" in head and len(head) > 1024
                assert await r.content.readuntil(b"\r\n") == b'<script>\np("o");\n</script>\r\n'
                await c.send(connect_frame)
                script = await r.content.readuntil(b"\r\n")
                assert script.startswith(b'<script>\np("a[\\"CONNECTED')
                q = unique()
                await c.send(stomp("SUBSCRIBE", id="1", destination=f"/queue/{q}"))
                await c.send(stomp("SEND", "</script>", destination=f"/queue/{q}"))
                script = await r.content.readuntil(b"\r\n")  # the body cannot end the script
                assert script.count(b"</script>") == 1 and b"<\\/script>" in script
            for transport in ("htmlfile", "jsonp"):
                async with http.get(f"{c.url}/{transport}") as r:
                    assert (r.status, await r.text()) == (500, '"callback" parameter required')
                async with http.get(f"{c.url}/{transport}?c=alert(1)") as r:
                    assert (r.status, await r.text()) == (500, 'invalid "callback" parameter')

            c = Xhr(http, node)
            async with http.get(c.url + "/jsonp?c=cb") as r:
                assert await r.text() == '/**/cb("o");\r\n'
            form = {"d": json.dumps([connect_frame])}
            async with http.post(c.url + "/jsonp_send", data=form) as r:
                assert (r.status, await r.text()) == (200, "ok")
            async with http.get(c.url + "/jsonp?c=cb") as r:
                text = await r.text()
                assert text.startswith('/**/cb("a[\\"CONNECTED\\\\n') and text.endswith(");\r\n")

    run(go())


def test_websocket_transport_with_sockjs_framing(node, run):
    q = unique()
    tcp, _ = connect(node.stomp_port)

    async def go():
        url = base(node).replace("http", "ws", 1) + f"/000/{uuid.uuid4().hex}/websocket"
        async with ws_connect(url) as ws:
            assert await ws.recv() == "o"
            await ws.send("")  # ignored, as the spec asks
            await ws.send(json.dumps([stomp("CONNECT", **{"accept-version": "1.2", "host": "/"})]))
            reply = await ws.recv()
            assert isinstance(reply, str) and reply.startswith('a["CONNECTED\\n')
            await ws.send(json.dumps(stomp("SUBSCRIBE", id="1", destination=f"/queue/{q}")))
            tcp.send(f"/queue/{q}", "over ws")
            frames, _ = parse_frames("".join(json.loads((await ws.recv())[1:])).encode())
            assert frames[0][0] == "MESSAGE" and frames[0][2] == b"over ws"
            t0 = time.monotonic()
            assert await ws.recv() == "h"
            assert time.monotonic() - t0 < 3 * HEARTBEAT
            await ws.send('["broken')
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 5)
        async with aiohttp.ClientSession() as http:
            async with http.get(url.replace("ws", "http", 1)) as r:
                assert (r.status, await r.text()) == (400, 'Can "Upgrade" only to "WebSocket".')
            async with http.post(url.replace("ws", "http", 1)) as r:
                assert r.status == 405 and r.headers["Allow"] == "GET"

    run(go())
    tcp.disconnect()


def test_raw_websocket_carries_plain_stomp_text(node, run):
    q = unique()

    async def go():
        url = base(node).replace("http", "ws", 1) + "/websocket"
        async with ws_connect(url, subprotocols=["v12.stomp"]) as ws:  # type: ignore[list-item]
            await ws.send(stomp("CONNECT", **{"accept-version": "1.2", "host": "/"}))
            reply = await ws.recv()
            assert isinstance(reply, str) and reply.startswith("CONNECTED\n")
            await ws.send(stomp("SUBSCRIBE", id="1", destination=f"/queue/{q}"))
            await ws.send(stomp("SEND", "raw", destination=f"/queue/{q}"))
            frames, _ = parse_frames((await ws.recv()).encode())  # type: ignore[union-attr]
            assert (frames[0][0], frames[0][2]) == ("MESSAGE", b"raw")

    run(go())


def test_stopping_the_node_ends_open_receivers_with_a_close_frame(tmp_path, run):
    n = NodeProcess(tmp_path / "node", http=True).start()

    async def go():
        url = f"{base(n)}/000/{uuid.uuid4().hex}/xhr_streaming"
        async with aiohttp.ClientSession() as http, http.post(url) as r:
            await r.content.readline()
            assert await r.content.readline() == b"o\n"
            stopping = asyncio.get_running_loop().run_in_executor(None, n.stop)
            rest = await asyncio.wait_for(r.content.read(), 10)
            assert rest == b'c[1001,"Server shutting down"]\n'
            assert await stopping == 0

    try:
        run(go())
    finally:
        n.kill9()
