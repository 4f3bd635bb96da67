"""MQTT sessions in process: packets in through ``data_received``, packets out through a
fake link decoded by the codec's client-side parser; an in-memory engine, no sockets."""

from __future__ import annotations

import asyncio
from typing import Any

from waystation.core.engine import Engine
from waystation.gateway.mqtt.options import MqttOptions
from waystation.gateway.mqtt.session import MqttSession
from waystation.wire.mqtt import MQTT_5, MQTT_311, Connect, MqttParser, encode


class FakeLink:
    def __init__(self, peer: str = "fake:1") -> None:
        self.peer = peer
        self.out = bytearray()
        self.closed = False
        self.paused = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        self.out += data

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


class Client:
    """One fake connection: ``send`` client packets, ``recv`` what the server wrote."""

    def __init__(self, engine: Engine, version: int = MQTT_311, **options: Any) -> None:
        self.version = version
        self.link = FakeLink()
        self.server = MqttSession(engine, self.link, MqttOptions(**options))
        self.parser = MqttParser(version=version)
        self.pending: list[Any] = []  # what came with the CONNACK

    def send(self, *packets: Any) -> None:
        self.server.data_received(b"".join(encode(p, self.version) for p in packets))

    def raw(self, data: bytes) -> None:
        self.server.data_received(data)

    def recv(self) -> list[Any]:
        data = bytes(self.link.out)
        self.link.out.clear()
        got, self.pending = self.pending + self.parser.feed(data), []
        return got

    def connect(self, client_id: str = "c1", **fields: Any) -> Any:
        fields.setdefault("protocol_level", self.version)
        self.send(Connect(client_id, **fields))
        got = self.recv()
        assert got, "no CONNACK"
        self.pending = got[1:]
        return got[0]


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


def in_engine(run: Any, test: Any, **engine_args: Any) -> None:
    """Run ``test(engine)`` on one loop with a started in-memory engine."""

    async def go() -> None:
        eng = Engine(**engine_args)
        await eng.start()
        try:
            await test(eng)
        finally:
            await eng.stop()

    run(go())


__all__ = ["MQTT_5", "MQTT_311", "Client", "FakeLink", "in_engine", "settle"]
