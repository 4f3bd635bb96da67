"""A raw MQTT client (3.1.1 or 5) on a plain socket, written with the node's own codec: for
tests that must control every packet (a QoS 2 publisher that never sends PUBREL), which
paho would not let them do.  Also what the tests read of the node process: its memory, the
bytes it has written, the size of its data folder."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from waystation.wire.mqtt import (
    MQTT_5,
    MQTT_311,
    ConnAck,
    Connect,
    Disconnect,
    MqttParser,
    Publish,
    PubRec,
    encode,
)

# Two users with the same rights everywhere (security on): what one holds, the other may not.
USERS = """
[[users]]
name = "alice"
password = "a"
roles = ["rw"]

[[users]]
name = "bob"
password = "b"
roles = ["rw"]

[[permissions]]
match = "#"
send = ["rw"]
consume = ["rw"]
create_durable_queue = ["rw"]
create_non_durable_queue = ["rw"]
delete_durable_queue = ["rw"]
delete_non_durable_queue = ["rw"]
"""


class Raw:
    def __init__(self, port: int, version: int = MQTT_311) -> None:
        self.version = version
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.parser = MqttParser(version=version)
        self.closed = False

    def send(self, *packets: Any) -> None:
        self.sock.sendall(b"".join(encode(p, self.version) for p in packets))

    def connect(
        self, cid: str, user: str, password: str, clean: bool = False, **props: Any
    ) -> ConnAck:
        self.send(
            Connect(
                cid,
                protocol_level=self.version,
                clean_start=clean,
                keepalive=0,
                username=user,
                password=password.encode(),
                properties=props,
            )
        )
        got = self.read_until(lambda ps: any(isinstance(p, ConnAck) for p in ps))
        return next(p for p in got if isinstance(p, ConnAck))

    def read_until(self, done: Any, timeout: float = 10.0) -> list[Any]:
        """Packets until ``done(packets)`` holds, the connection ends, or ``timeout``."""
        out: list[Any] = []
        end = time.monotonic() + timeout
        while not done(out) and not self.closed:
            left = end - time.monotonic()
            if left <= 0:
                break
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed = True
                break
            out += self.parser.feed(data)
        return out

    def qos2(self, topic: str, pids: range, payload: bytes = b"x" * 100) -> list[Any]:
        """QoS 2 PUBLISHes with these packet ids (never released); what came back once every
        one is answered or the connection ended."""
        self.send(*(Publish(topic, payload, 2, packet_id=pid) for pid in pids))
        want = set(pids)
        return self.read_until(
            lambda ps: (
                want <= {p.packet_id for p in ps if isinstance(p, PubRec)}
                or any(isinstance(p, Disconnect) for p in ps)
            )
        )

    def close(self) -> None:
        self.sock.close()


def pubrecs(packets: list[Any]) -> list[int]:
    return [p.packet_id for p in packets if isinstance(p, PubRec)]


def disconnects(packets: list[Any]) -> list[int]:
    return [p.reason_code for p in packets if isinstance(p, Disconnect)]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def written(pid: int) -> int:
    """Bytes the process has passed to write calls (its journals' appends, mostly)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


def dir_bytes(path: Path) -> int:
    """Bytes on disk under ``path`` (journal files are preallocated: what they occupy)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


__all__ = [
    "MQTT_5",
    "MQTT_311",
    "USERS",
    "Raw",
    "dir_bytes",
    "disconnects",
    "pubrecs",
    "rss_mib",
    "written",
]
