"""STOMP over WebSocket at ``/stomp`` against a real node, driven by the websockets client
(and stomp.py over TCP on the other side)."""

from __future__ import annotations

import asyncio
import re
import socket
import time

import pytest
from nodekit import BLOCKING, NodeProcess
from stompkit import connect, unique
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect

from waystation.gateway.queued_link import QueuedLink


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(
        tmp_path_factory.mktemp("ws-node"),
        http='[acceptors.http.websocket]\nmax_message_size = "64KiB"',
        stomp='heartbeat_send = "500ms"',
        extra_config=BLOCKING,
    ).start()
    yield n
    n.stop()


def ws_url(node: NodeProcess) -> str:
    return f"ws://127.0.0.1:{node.http_port}/stomp"


class WsStomp:
    """A STOMP client over one WebSocket: frames out as messages, frames in parsed from
    whatever messages arrive (several frames per message, or heart-beat newlines)."""

    def __init__(self, node: NodeProcess, subprotocols: list[str] | None = None) -> None:
        kw = {"subprotocols": subprotocols} if subprotocols is not None else {}
        self.ws: ClientConnection = ws_connect(ws_url(node), max_size=None, legacy=True, **kw)  # type: ignore[arg-type]
        self.buf = b""
        self.kinds: list[type] = []

    def send(self, frame: str | bytes) -> None:
        self.ws.send(frame)

    def frame(self, cmd: str, body: bytes = b"", **headers: str) -> None:
        head = cmd + "\n" + "".join(f"{k}:{v}\n" for k, v in headers.items()) + "\n"
        self.ws.send(head.encode() + body + b"\x00")

    def connect(self, version: str = "1.2", **headers: str) -> dict[str, str]:
        self.frame("CONNECT", **{"accept-version": version, "host": "/"}, **headers)
        cmd, h, _ = self.read()
        assert cmd == "CONNECTED", (cmd, h)
        return h

    def read(self, timeout: float = 5.0) -> tuple[str, dict[str, str], bytes]:
        while True:
            self.buf = self.buf.lstrip(b"\r\n")
            end = self._frame_end()
            if end is not None:
                raw, self.buf = self.buf[:end], self.buf[end + 1 :]
                head, _, body = raw.partition(b"\n\n")
                lines = head.decode().split("\n")
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers.setdefault(k, v)
                return lines[0], headers, body
            msg = self.ws.recv(timeout)
            self.kinds.append(type(msg))
            self.buf += msg.encode() if isinstance(msg, str) else msg

    def _frame_end(self) -> int | None:
        head_end = self.buf.find(b"\n\n")
        if head_end < 0:
            return None
        m = re.search(rb"\ncontent-length:(\d+)\n", self.buf[: head_end + 1])
        if m:
            end = head_end + 2 + int(m.group(1))
            return end if len(self.buf) > end else None
        end = self.buf.find(b"\x00", head_end)
        return end if end >= 0 else None

    def close(self) -> None:
        self.ws.close()


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_each_subprotocol_negotiates_its_stomp_version(node, version):
    c = WsStomp(node, [f"v{version.replace('.', '')}.stomp"])
    assert c.ws.subprotocol == f"v{version.replace('.', '')}.stomp"
    assert c.connect(version)["version"] == version
    c.close()


def test_a_client_that_asks_for_no_subprotocol_is_served(node):
    c = WsStomp(node, None)
    assert c.ws.subprotocol is None
    assert c.connect()["version"] == "1.2"
    c.close()


def test_ws_subscriber_gets_what_a_tcp_client_sends_and_the_reverse(node):
    topic, q = unique("t"), unique("q")
    c = WsStomp(node, ["v12.stomp"])
    c.connect()
    c.frame("SUBSCRIBE", id="1", destination=f"/topic/{topic}", receipt="s")
    assert c.read()[0] == "RECEIPT"
    tcp, lst = connect(node.stomp_port)
    tcp.send(f"/topic/{topic}", '{"n": 1}', content_type="application/json", headers={"k": "v"})
    cmd, h, body = c.read()
    assert (cmd, body) == ("MESSAGE", b'{"n": 1}')
    assert h["content-type"] == "application/json" and h["k"] == "v"

    tcp.subscribe(f"/queue/{q}", id="t")
    binary = bytes(range(256)) + b"\x00\xff"
    c.frame("SEND", binary, destination=f"/queue/{q}", **{"content-length": str(len(binary))})
    c.frame("SEND", "héllo".encode(), destination=f"/queue/{q}", receipt="r")
    assert c.read()[0] == "RECEIPT"
    msgs = lst.wait_messages(2)
    assert msgs[1].body == "héllo"
    tcp.disconnect()
    c.close()


def test_binary_bodies_leave_as_binary_messages_and_text_as_text(node):
    q = unique()
    c = WsStomp(node, ["v12.stomp"])
    c.connect()
    c.frame("SUBSCRIBE", id="1", destination=f"/queue/{q}")
    tcp, _ = connect(node.stomp_port, auto_decode=False)
    tcp.send(f"/queue/{q}", b"\xff\xfe not utf-8", headers={"receipt": "r1"})
    cmd, _, body = c.read()
    assert (cmd, body) == ("MESSAGE", b"\xff\xfe not utf-8")
    assert c.kinds[-1] is bytes
    tcp.send(f"/queue/{q}", "plain text")
    assert c.read()[2] == b"plain text"
    assert c.kinds[-1] is str
    tcp.disconnect()
    c.close()


def test_frames_may_share_a_message_or_straddle_two(node):
    q = unique()
    c = WsStomp(node, ["v12.stomp"])
    c.connect()
    c.send(
        f"SUBSCRIBE\nid:1\ndestination:/queue/{q}\n\n\x00"
        f"SEND\ndestination:/queue/{q}\n\none\x00SEND\ndestination:/qu"
    )
    c.send(f"eue/{q}\n\ntwo\x00")
    assert [c.read()[2], c.read()[2]] == [b"one", b"two"]
    c.close()


def test_bad_frame_gets_error_then_close_and_bystanders_carry_on(node):
    q = unique()
    bystander = WsStomp(node, ["v12.stomp"])
    bystander.connect()
    bystander.frame("SUBSCRIBE", id="1", destination=f"/queue/{q}")
    bad = WsStomp(node, ["v12.stomp"])
    bad.connect()
    bad.send("FROB\nx:y\n\n\x00")
    cmd, h, _ = bad.read()
    assert cmd == "ERROR" and "FROB" in h["message"]
    with pytest.raises(ConnectionClosed):
        bad.ws.recv(5)
    tcp, _ = connect(node.stomp_port)
    tcp.send(f"/queue/{q}", "still here")
    assert bystander.read()[2] == b"still here"
    tcp.disconnect()
    bystander.close()


def test_a_plain_get_on_the_websocket_path_is_a_clear_400(node):
    with socket.create_connection(("127.0.0.1", node.http_port), timeout=5) as s:
        s.sendall(b"GET /stomp HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400")
    assert b"WebSocket" in reply


def test_an_oversized_message_closes_only_that_socket_with_1009(node):
    c = WsStomp(node, ["v12.stomp"])
    c.connect()
    c.send(b"SEND\ndestination:/queue/x\n\n" + b"x" * 70000 + b"\x00")
    with pytest.raises(ConnectionClosed) as e:
        c.ws.recv(5)
    assert e.value.rcvd is not None and e.value.rcvd.code == 1009
    other = WsStomp(node, ["v12.stomp"])
    assert other.connect()["version"] == "1.2"
    other.close()


def test_unacked_messages_return_to_the_queue_when_the_socket_drops(node):
    q = unique()
    c = WsStomp(node, ["v12.stomp"])
    c.connect()
    c.frame("SUBSCRIBE", id="1", destination=f"/queue/{q}", ack="client-individual")
    tcp, lst = connect(node.stomp_port)
    tcp.send(f"/queue/{q}", "keep me")
    assert c.read()[2] == b"keep me"
    c.ws.socket.close()  # no DISCONNECT, no close handshake
    tcp.subscribe(f"/queue/{q}", id="t")
    msg = lst.wait_messages(1)[0]
    assert msg.body == "keep me" and msg.headers.get("redelivered") == "true"
    tcp.disconnect()


def test_a_socket_dropped_while_the_session_is_blocked_ends_the_session(node):
    """A send to a full BLOCK address holds the session's input; a client that drops the
    socket meanwhile must not leave its session (and unacked messages) held until the
    address drains."""
    q = unique()
    c = WsStomp(node, ["v12.stomp"])
    c.connect()
    c.frame("SUBSCRIBE", id="1", destination=f"/queue/{q}", ack="client-individual")
    tcp, lst = connect(node.stomp_port)
    tcp.send(f"/queue/{q}", "keep me")
    assert c.read()[2] == b"keep me"
    c.frame("SEND", b"x" * 2000, destination=f"/queue/blk.{unique()}")  # fills it: held
    time.sleep(0.3)
    c.ws.socket.close()
    tcp.subscribe(f"/queue/{q}", id="t")
    msg = lst.wait_messages(1, timeout=8)[0]
    assert msg.body == "keep me" and msg.headers.get("redelivered") == "true"
    tcp.disconnect()


def test_closing_a_link_wakes_a_transport_waiting_to_feed_input(run):
    """The session closed (heart-beats, ERROR) while its input was held: the transport
    waiting on ``reading`` must wake and see the close, or its handler hangs for good."""

    async def go() -> None:
        link = QueuedLink("peer")
        link.pause_reading()
        waiter = asyncio.ensure_future(link.reading.wait())
        link.close()
        await asyncio.wait_for(waiter, 1.0)
        assert link.closing

    run(go())


def test_heart_beats_flow_over_the_websocket(node):
    c = WsStomp(node, ["v12.stomp"])
    c.connect(**{"heart-beat": "0,500"})
    t0 = time.monotonic()
    beats = 0
    while time.monotonic() - t0 < 2.5:
        msg = c.ws.recv(2)
        beats += msg in ("\n", b"\n", "\r\n", b"\r\n")
    assert beats >= 3
    c.close()


def test_a_websocket_consumer_that_does_not_read_does_not_swallow_the_queue(node):
    """The server holds at most its buffer's worth for a stalled socket; the rest of the
    backlog stays in the queue for other consumers."""
    q = unique()
    stuck = ws_connect(ws_url(node), subprotocols=["v12.stomp"], max_size=None, legacy=True)  # type: ignore[list-item]
    stuck.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.send("CONNECT\naccept-version:1.2\nhost:/\n\n\x00")
    stuck.recv(5)
    stuck.send(f"SUBSCRIBE\nid:1\ndestination:/queue/{q}\nreceipt:s\n\n\x00")
    stuck.recv(5)
    n, body = 4000, "x" * 4096
    prod, plst = connect(node.stomp_port)
    for i in range(n):
        prod.send(f"/queue/{q}", body, headers={"receipt": f"r{i}"} if i == n - 1 else {})
    plst.wait_receipt(f"r{n - 1}", timeout=30)
    fast, flst = connect(node.stomp_port)
    fast.subscribe(f"/queue/{q}", id="f")
    time.sleep(2)
    got = len(flst.messages)
    assert got > n // 2, f"the fast consumer only got {got} of {n}"
    stuck.socket.close()
    prod.disconnect()
    fast.disconnect()


def test_stopping_the_node_closes_websockets_with_going_away(tmp_path):
    n = NodeProcess(tmp_path, http=True).start()
    c = WsStomp(n, ["v12.stomp"])
    c.connect()
    n.stop()
    with pytest.raises(ConnectionClosed) as e:
        c.ws.recv(5)
    assert e.value.rcvd is not None and e.value.rcvd.code == 1001


def test_a_client_asking_only_for_other_subprotocols_is_told_which_are_offered(node):
    from websockets.exceptions import InvalidStatus

    with pytest.raises(InvalidStatus) as e:
        ws_connect(ws_url(node), subprotocols=["mqtt"])  # type: ignore[list-item]
    assert e.value.response.status_code == 400
    assert b"v12.stomp, v11.stomp, v10.stomp" in e.value.response.body
    # and the binary protocols' own paths take theirs
    for path, proto in (("/mqtt", "mqttv3.1"), ("/amqp", "amqp")):
        url = f"ws://127.0.0.1:{node.http_port}{path}"
        with ws_connect(url, subprotocols=[proto]) as ws:  # type: ignore[list-item]
            assert ws.subprotocol == proto
