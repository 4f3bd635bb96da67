"""A real node with its MQTT listener, and paho-mqtt clients (3.1.1 and 5) that collect
what they receive and wait for it."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
from nodekit import NodeProcess
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

V311 = mqtt.MQTTv311
V5 = mqtt.MQTTv5


class MqttNode(NodeProcess):
    """A node process whose ``[acceptors.mqtt]`` listens on ``mqtt_port``."""

    def __init__(self, workdir: Path, mqtt_table: str = "", **kw: Any) -> None:
        super().__init__(workdir, mqtt=mqtt_table or True, **kw)


class Paho:
    """One paho client on its own network thread."""

    def __init__(
        self,
        port: int,
        client_id: str = "",
        version: int = V311,
        clean: bool = True,
        username: str | None = None,
        password: str | None = None,
        will: tuple[str, bytes, int, bool] | None = None,
        keepalive: int = 60,
        properties: Properties | None = None,
        will_properties: Properties | None = None,
    ) -> None:
        self.port = port
        self.version = version
        kw: dict[str, Any] = {"client_id": client_id, "protocol": version}
        if version != V5:
            kw["clean_session"] = clean
        self.c = mqtt.Client(CallbackAPIVersion.VERSION2, **kw)
        self.clean = clean
        self.keepalive = keepalive
        self.connect_properties = properties
        if username is not None:
            self.c.username_pw_set(username, password)
        if will is not None:
            self.c.will_set(*will, properties=will_properties)
        self.messages: list[mqtt.MQTTMessage] = []
        self.connack: tuple[Any, Any, Any] | None = None
        self.subacks: dict[int, list[Any]] = {}
        self.disconnects: list[Any] = []
        self.cond = threading.Condition()
        self.c.on_connect = self._on_connect
        self.c.on_message = self._on_message
        self.c.on_subscribe = self._on_subscribe
        self.c.on_disconnect = self._on_disconnect

    # -- callbacks (paho's thread) ---------------------------------------------------------
    def _on_connect(self, c: Any, u: Any, flags: Any, rc: Any, props: Any) -> None:
        with self.cond:
            self.connack = (flags, rc, props)
            self.cond.notify_all()

    def _on_message(self, c: Any, u: Any, msg: mqtt.MQTTMessage) -> None:
        with self.cond:
            self.messages.append(msg)
            self.cond.notify_all()

    def _on_subscribe(self, c: Any, u: Any, mid: int, codes: list[Any], props: Any) -> None:
        with self.cond:
            self.subacks[mid] = codes
            self.cond.notify_all()

    def _on_disconnect(self, c: Any, u: Any, flags: Any, rc: Any, props: Any) -> None:
        with self.cond:
            self.disconnects.append(rc)
            self.cond.notify_all()

    # -- use ---------------------------------------------------------------------------------
    def wait(self, pred: Callable[[], bool], timeout: float = 10.0) -> bool:
        end = time.monotonic() + timeout
        with self.cond:
            while not pred():
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
        return True

    def connect(self, expect_ok: bool = True) -> Any:
        """CONNECT and wait for CONNACK; returns (flags, reason code, properties)."""
        kw: dict[str, Any] = {"keepalive": self.keepalive}
        if self.version == V5:
            kw["clean_start"] = self.clean
            kw["properties"] = self.connect_properties
        self.c.connect("127.0.0.1", self.port, **kw)
        self.c.loop_start()
        assert self.wait(lambda: self.connack is not None or bool(self.disconnects)), "no CONNACK"
        if expect_ok:
            assert self.connack is not None and not self.connack[1].is_failure, self.connack
        return self.connack

    def subscribe(self, topic: str, qos: int = 0, **v5: Any) -> list[Any]:
        if self.version == V5:
            from paho.mqtt.subscribeoptions import SubscribeOptions

            props = v5.pop("properties", None)
            rc, mid = self.c.subscribe(
                topic, options=SubscribeOptions(qos=qos, **v5), properties=props
            )
        else:
            rc, mid = self.c.subscribe(topic, qos)
        assert rc == mqtt.MQTT_ERR_SUCCESS
        assert self.wait(lambda: mid in self.subacks), "no SUBACK"
        return self.subacks[mid]

    def publish(
        self, topic: str, payload: bytes, qos: int = 0, retain: bool = False, **props: Any
    ) -> None:
        p = None
        if props:
            p = Properties(PacketTypes.PUBLISH)
            for k, v in props.items():
                setattr(p, k, v)
        info = self.c.publish(topic, payload, qos, retain, properties=p)
        if qos:
            info.wait_for_publish(10)
            assert info.is_published()

    def wait_messages(self, n: int, timeout: float = 10.0) -> list[mqtt.MQTTMessage]:
        assert self.wait(lambda: len(self.messages) >= n, timeout), (
            f"got {len(self.messages)} of {n} messages"
        )
        return self.messages

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()

    def drop(self) -> None:
        """Lose the connection without DISCONNECT (the will goes)."""
        sock = self.c.socket()
        self.c.loop_stop()
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def props5(**values: Any) -> Properties:
    p = Properties(PacketTypes.CONNECT)
    for k, v in values.items():
        setattr(p, k, v)
    return p


__all__ = ["V311", "V5", "MqttNode", "Paho", "props5"]
