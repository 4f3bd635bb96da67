"""What the node fuzzers found outside wire/, each as the smallest reproduction, marked as
an expected failure until it is fixed (strict, and only by an AssertionError: the fix makes
the test pass, which fails the run, and then the marker goes, with the bug's entry in
campaign.KNOWN)."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import aiohttp
import pytest

from fuzz.amqpgen import LinkPlan, Plan, record
from fuzz.campaign import log_problems
from fuzz.fuzzkit import PASSWORD, USER, FuzzNode
from waystation.wire.mqtt import MQTT_311, Connect, encode
from waystation.wire.mqtt_properties import encode_vbi
from waystation.wire.stomp import encode_frame


def _reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _read_frame(sock: socket.socket) -> bytes:
    out = b""
    while not out.endswith(b"\0"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        out += chunk
    return out


def test_stomp_bad_heartbeat_after_async_login(tmp_path) -> None:
    node = FuzzNode(tmp_path / "n").start()
    try:
        with socket.create_connection(("127.0.0.1", node.stomp_port), timeout=5) as s:
            s.sendall(encode_frame("CONNECT", {"accept-version": "1.2", "host": "localhost",
                                               "login": USER, "passcode": PASSWORD,
                                               "heart-beat": "x,y"}))  # fmt: skip
            frame = _read_frame(s)
        assert frame.startswith(b"ERROR"), frame
        time.sleep(0.3)
        unknown, known = log_problems(node.log())
        assert not any(known.values()) and not unknown, node.log()[-2000:]
        assert b"heart-beat" in frame, frame  # says what was wrong
    finally:
        node.stop()


def _mqtt_login(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    # a wrong password, and behind it in the same write a malformed packet, which ends
    # the session while its login is still being checked
    s.sendall(encode(Connect("c", MQTT_311, True, 0, USER, b"wrong"), MQTT_311) + b"\0\0")
    return s


def _amqp_login(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    sasl_header, init = record(Plan("c", 0, 0.0, 1, (), (), 0, "none"))[:2]
    s.sendall(sasl_header + init.replace(PASSWORD.encode(), b"wrongx"))
    return s


@pytest.mark.parametrize("login", [_mqtt_login, _amqp_login], ids=["mqtt", "amqp"])
def test_failed_login_of_a_closed_connection_is_retrieved(tmp_path, login) -> None:
    node = FuzzNode(tmp_path / "n").start()
    try:
        port = node.mqtt_port if login is _mqtt_login else node.amqp_port
        for _ in range(20):
            _reset(login(port))
        time.sleep(1.0)
        unknown, known = log_problems(node.log())
        assert not any(known.values()) and not unknown, node.log()[-2000:]
    finally:
        node.stop()


PIECE = 4 * 1024 * 1024  # a packet this big, all but its last byte sent, then a reset
ROUNDS = 20


async def _partial_mqtt_connect(node: FuzzNode) -> None:
    """Before any login: a CONNECT whose remaining length is PIECE, cut short."""
    _, w = await asyncio.open_connection("127.0.0.1", node.mqtt_port)
    w.write(b"\x10" + encode_vbi(PIECE) + b"\0" * (PIECE - 1))
    await w.drain()
    await asyncio.sleep(0.1)
    w.transport.abort()


async def _partial_stomp_send(node: FuzzNode) -> None:
    _, w = await asyncio.open_connection("127.0.0.1", node.stomp_port)
    login = {"accept-version": "1.2", "host": "h", "login": USER, "passcode": PASSWORD}
    w.write(encode_frame("CONNECT", login))
    w.write(b"SEND\ndestination:/queue/fz.x\ncontent-length:%d\n\n" % PIECE + b"x" * (PIECE - 1))
    await w.drain()
    await asyncio.sleep(0.1)
    w.transport.abort()


@pytest.mark.parametrize("attack", [_partial_mqtt_connect, _partial_stomp_send],
                         ids=["mqtt-before-login", "stomp"])  # fmt: skip
def test_closed_connections_release_their_buffers(tmp_path, run, attack) -> None:
    node = FuzzNode(tmp_path / "n").start()
    try:
        before = node.rss_kib()

        async def go() -> None:
            for _ in range(ROUNDS):  # one at a time: what is freed can be used again
                await attack(node)

        run(go())
        time.sleep(1.0)
        grown = node.rss_kib() - before
        # one connection's buffers (a few times PIECE with the copies) may stay cached
        assert grown < 6 * PIECE // 1024, f"RSS grew by {grown // 1024} MiB over {ROUNDS} rounds"
    finally:
        node.stop()


def test_malformed_http_request_is_no_error(tmp_path) -> None:
    node = FuzzNode(tmp_path / "n").start()
    try:
        with socket.create_connection(("127.0.0.1", node.http_port), timeout=5) as s:
            s.sendall(b"GET /tunnel HTTP/1.1\r\nHost: 127.0.0.1\r\n\rX\r\n\r\n")
            assert b" 400 " in s.recv(4096).split(b"\r\n")[0], "not refused"
        time.sleep(0.3)
        unknown, known = log_problems(node.log())
        assert not any(known.values()) and not unknown, node.log()[-2000:]
    finally:
        node.stop()


def test_tunnel_token_with_non_ascii_is_a_403(tmp_path, run) -> None:
    node = FuzzNode(tmp_path / "n").start()
    try:

        async def go() -> bytes:
            async with aiohttp.ClientSession() as http:
                url = f"{node.http_url}/tunnel/open"
                async with http.post(url, params={"protocol": "stomp"}) as r:
                    sid = (await r.json())["session"]
            reader, writer = await asyncio.open_connection("127.0.0.1", node.http_port)
            writer.write(f"GET /tunnel/{sid}/down?ack=0 HTTP/1.1\r\n"
                         f"Host: 127.0.0.1:{node.http_port}\r\n".encode()
                         + b"X-Tunnel-Token: \xc3\xa9\r\nConnection: close\r\n\r\n")  # fmt: skip
            answer = await reader.read()
            writer.close()
            return answer

        status = run(go()).split(b"\r\n")[0]
        assert b" 403 " in status, status
        unknown, known = log_problems(node.log())
        assert not any(known.values()) and not unknown, node.log()[-2000:]
    finally:
        node.stop()


async def _tunnel_body_cut_short(node: FuzzNode) -> None:
    """An upstream POST that announces 100 bytes, sends 8 and goes."""
    async with aiohttp.ClientSession() as http:
        url = f"{node.http_url}/tunnel/open"
        async with http.post(url, params={"protocol": "stomp"}) as r:
            info = await r.json()
    _, writer = await asyncio.open_connection("127.0.0.1", node.http_port)
    writer.write(f"POST /tunnel/{info['session']}/up?offset=0 HTTP/1.1\r\n"
                 f"Host: 127.0.0.1:{node.http_port}\r\n"
                 f"X-Tunnel-Token: {info['token']}\r\nContent-Length: 100\r\n\r\n"
                 "CONNECT\n".encode())  # fmt: skip
    await writer.drain()
    await asyncio.sleep(0.3)
    writer.transport.abort()


async def _websocket_upgrade_then_gone(node: FuzzNode) -> None:
    """An upgrade request with a first frame behind it, and the connection closed at once."""
    with socket.create_connection(("127.0.0.1", node.http_port), timeout=5) as s:
        s.sendall(
            f"GET /stomp HTTP/1.1\r\nHost: 127.0.0.1:{node.http_port}\r\n".encode()
            + b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v12.stomp\r\n"
            b"\r\n\x81\x80\0\0\0\0"
        )


@pytest.mark.parametrize("leave", [_tunnel_body_cut_short, _websocket_upgrade_then_gone],
                         ids=["tunnel-body", "websocket-upgrade"])  # fmt: skip
def test_client_gone_mid_request_is_no_error(tmp_path, run, leave) -> None:
    node = FuzzNode(tmp_path / "n").start()
    try:

        async def go() -> None:
            # the HTTP side starts on first use
            async with aiohttp.ClientSession() as http, http.get(f"{node.http_url}/stomp") as r:
                await r.read()
            for _ in range(10):
                await leave(node)
            await asyncio.sleep(0.5)

        run(go())
        unknown, known = log_problems(node.log())
        assert not any(known.values()) and not unknown, node.log()[-2000:]
    finally:
        node.stop()


@pytest.mark.parametrize(("unit", "text"), [(3, b"fz-c1"), (5, b"fz.a")],
                         ids=["open-container-id", "attach-target-address"])  # fmt: skip
def test_amqp_text_fields_not_utf8_are_refused(tmp_path, unit: int, text: bytes) -> None:
    node = FuzzNode(tmp_path / "n").start()
    try:
        plan = Plan("fz-c1", 0, 0.0, 1, (LinkPlan("sender", "fz.a", False),), (), 0, "none")
        units = record(plan)  # SASL header, sasl-init, AMQP header, open, begin, attach
        assert text in units[unit], units
        units[unit] = units[unit].replace(text, b"\xa1" + text[1:])
        with socket.create_connection(("127.0.0.1", node.amqp_port), timeout=5) as s:
            s.sendall(b"".join(units[:2]))
            time.sleep(0.2)
            s.sendall(b"".join(units[2:]))
            time.sleep(0.5)
        unknown, known = log_problems(node.log())
        assert not any(known.values()) and not unknown, node.log()[-2000:]
    finally:
        node.stop()


def test_xml_with_an_unknown_encoding_is_a_400(tmp_path, run) -> None:
    node = FuzzNode(tmp_path / "n").start()
    try:

        async def go() -> int:
            auth = {"Authorization": aiohttp.encode_basic_auth(USER, PASSWORD)}
            doc = b'<?xml version="1.0" encoding="uuf-8"?><queue name="fz.enc"/>'
            async with (
                aiohttp.ClientSession() as http,
                http.post(f"{node.http_url}/queues", data=doc, headers=auth) as r,
            ):
                return r.status

        assert run(go()) == 400
        unknown, known = log_problems(node.log())
        assert not any(known.values()) and not unknown, node.log()[-2000:]
    finally:
        node.stop()
