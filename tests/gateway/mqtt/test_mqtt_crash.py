"""kill -9 with persistent sessions: every QoS 1 message the node acknowledged arrives at
least once, every QoS 2 message exactly once, across node crashes while publishing and while
delivering.  Raw sockets and the codec, so the test controls every packet a client sends."""

from __future__ import annotations

import socket
import time
from typing import Any

from pahokit import MqttNode

from waystation.wire.mqtt import (
    MQTT_311,
    Connect,
    Disconnect,
    MqttParser,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    SubscriptionRequest,
    encode,
)

N = 150  # messages per QoS


class Raw:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.parser = MqttParser(version=MQTT_311)

    def send(self, *packets: Any) -> None:
        self.sock.sendall(b"".join(encode(p, MQTT_311) for p in packets))

    def read_some(self, timeout: float) -> list[Any]:
        """The packets of one read (none if nothing came within ``timeout``)."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except TimeoutError:
            return []
        if not data:
            raise ConnectionError("closed")
        return self.parser.feed(data)

    def read(self, timeout: float = 5.0) -> list[Any]:
        """Packets until the server has been quiet a moment (or the connection ended)."""
        self.sock.settimeout(timeout)
        out: list[Any] = []
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    raise ConnectionError("closed")
                out += self.parser.feed(data)
                self.sock.settimeout(0.3)
        except TimeoutError:
            return out

    def connect(self, cid: str) -> Any:
        self.send(Connect(cid, clean_start=False, keepalive=0))
        got = self.read()
        assert got and got[0].reason_code == 0, got
        return got

    def close(self) -> None:
        self.sock.close()


def reconnect(port: int, cid: str) -> tuple[Raw, list[Any]]:
    end = time.monotonic() + 15
    while True:
        try:
            c = Raw(port)
            return c, c.connect(cid)[1:]
        except (OSError, ConnectionError, AssertionError):
            if time.monotonic() > end:
                raise
            time.sleep(0.1)


class Publisher:
    """The QoS 1/2 sender's state, as a client keeps it across reconnects."""

    def __init__(self) -> None:
        self.unacked: dict[int, Publish] = {}  # pid -> PUBLISH not yet PUBACK/PUBREC
        self.released: set[int] = set()  # PUBREC came, PUBCOMP not yet
        self.acked1: set[bytes] = set()
        self.done2: set[bytes] = set()
        self.payload: dict[int, bytes] = {}

    def handle(self, c: Raw, packets: list[Any]) -> None:
        for p in packets:
            if isinstance(p, PubAck) and p.packet_id in self.unacked:
                self.acked1.add(self.unacked.pop(p.packet_id).payload)
            elif isinstance(p, PubRec) and p.packet_id in self.unacked:
                del self.unacked[p.packet_id]
                self.released.add(p.packet_id)
                c.send(PubRel(p.packet_id))
            elif isinstance(p, PubComp) and p.packet_id in self.released:
                self.released.discard(p.packet_id)
                self.done2.add(self.payload[p.packet_id])


class Subscriber:
    """The receiver: QoS 2 delivered on first PUBLISH of a packet id, duplicates dropped
    until PUBREL (method B of the spec, with the ids kept across reconnects)."""

    def __init__(self) -> None:
        self.got1: list[bytes] = []
        self.got2: list[bytes] = []
        self.awaiting_rel: set[int] = set()

    def handle(self, c: Raw, packets: list[Any]) -> None:
        for p in packets:
            if isinstance(p, Publish) and p.qos == 1:
                self.got1.append(p.payload)
                c.send(PubAck(p.packet_id))
            elif isinstance(p, Publish) and p.qos == 2:
                if p.packet_id not in self.awaiting_rel:
                    self.awaiting_rel.add(p.packet_id)
                    self.got2.append(p.payload)
                c.send(PubRec(p.packet_id))
            elif isinstance(p, PubRel):
                self.awaiting_rel.discard(p.packet_id)
                c.send(PubComp(p.packet_id))


def pump(c: Raw, who: Any, until: Any, timeout: float = 20) -> None:
    """Answer what comes, a read at a time, until ``until()`` (checked after each read)."""
    end = time.monotonic() + timeout
    while not until() and time.monotonic() < end:
        who.handle(c, c.read_some(0.5))


def test_kill9_keeps_qos1_at_least_once_and_qos2_exactly_once(tmp_path):
    node = MqttNode(tmp_path).start()
    try:
        sink = Raw(node.mqtt_port)
        sink.connect("sink")
        sink.send(Subscribe(1, [SubscriptionRequest("crash/+", 2)]))  # one queue, mixed
        assert isinstance(sink.read()[0], SubAck)
        sink.send(Disconnect())
        sink.close()

        pub = Publisher()
        src = Raw(node.mqtt_port)
        src.connect("src")
        packets = []
        for i in range(N):
            for qos in (1, 2):
                pid = len(packets) + 1
                p = Publish(f"crash/q{qos}", f"{qos}-{i}".encode(), qos, packet_id=pid)
                pub.unacked[pid] = p
                pub.payload[pid] = p.payload
                packets.append(p)
        src.send(*packets)
        pump(src, pub, lambda: len(pub.acked1) + len(pub.released) + len(pub.done2) >= N // 4)
        node.kill9()  # in the middle of publishing
        src.close()
        node.start()

        src, first = reconnect(node.mqtt_port, "src")
        pub.handle(src, first)
        src.send(*(PubRel(pid) for pid in sorted(pub.released)))
        for p in list(pub.unacked.values()):
            p.dup = True
            src.send(p)
        pump(src, pub, lambda: not pub.unacked and not pub.released)
        assert not pub.unacked and not pub.released
        assert len(pub.acked1) == N and len(pub.done2) == N
        src.send(Disconnect())
        src.close()

        sub = Subscriber()
        sink, first = reconnect(node.mqtt_port, "sink")
        sub.handle(sink, first)
        pump(sink, sub, lambda: len(sub.got2) >= N // 3)
        node.kill9()  # in the middle of delivering
        sink.close()
        node.start()
        sink, first = reconnect(node.mqtt_port, "sink")
        sub.handle(sink, first)
        pump(sink, sub, lambda: set(sub.got1) >= pub.acked1 and len(sub.got2) >= N)
        time.sleep(0.5)
        sub.handle(sink, sink.read(0.5))

        assert set(sub.got1) >= pub.acked1  # at least once
        assert sorted(sub.got2) == sorted(pub.done2)  # exactly once
        assert len(sub.got2) == len(set(sub.got2))
    finally:
        node.stop()
