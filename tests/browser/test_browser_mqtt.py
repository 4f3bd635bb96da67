"""A real browser page using MQTT.js over the node's WebSocket at ``/mqtt``, as MQTT 3.1.1,
as MQTT 5, and as MQTT 3.1 (expected to fail until the node offers the subprotocol
``mqttv3.1``, which MQTT.js asks for when it speaks 3.1).

The page subscribes to a wildcard filter at QoS 1, publishes at QoS 0 and QoS 1 under it
and receives both back (at the QoS each was published with); paho-mqtt over TCP publishes
one message that reaches the page, and receives one the page publishes.  For MQTT 5 a user
property set in the browser must come back.  The page's WebSocket must have negotiated the
``mqtt`` subprotocol and received only binary messages.  A screenshot is kept in
tests/browser/artifacts.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import paho.mqtt.client as paho
import pytest
from browserkit import keep_evidence, launch, screenshot
from nodekit import NodeProcess
from stompkit import unique


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[NodeProcess]:
    n = NodeProcess(tmp_path_factory.mktemp("browser-mqtt"), http=True, mqtt=True).start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def browser(playwright, chromium) -> Iterator[Any]:
    b = launch(playwright, chromium)
    yield b
    b.close()


class Paho:
    """paho-mqtt over TCP, subscribed to one topic (QoS 1) once started."""

    def __init__(self, port: int, version: int, topic: str) -> None:
        protocol = {3: paho.MQTTv31, 4: paho.MQTTv311, 5: paho.MQTTv5}[version]
        self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2, client_id=unique("paho"), protocol=protocol
        )
        self.messages: queue.Queue[tuple[str, str, int]] = queue.Queue()
        self.subscribed = threading.Event()
        self.client.on_connect = lambda c, *_: c.subscribe(topic, qos=1)
        self.client.on_subscribe = lambda *_: self.subscribed.set()
        self.client.on_message = lambda _c, _u, m: self.messages.put(
            (m.topic, m.payload.decode(), m.qos)
        )
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert self.subscribed.wait(5), "paho: no SUBACK"

    def publish(self, topic: str, body: str) -> None:
        self.client.publish(topic, body, qos=1).wait_for_publish(5)

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.mark.parametrize(
    "version",
    [4, 5, 3],
    ids=["mqtt-3.1.1", "mqtt-5", "mqtt-3.1"],
)
def test_mqttjs_over_websocket_at_mqtt(node, browser, page_server, version):
    base = f"ws/{unique('v' + str(version))}"
    shot = f"mqtt-v{version}.png"
    page = browser.new_page(viewport={"width": 900, "height": 460})
    tcp = Paho(node.mqtt_port, version, f"{base}/to-paho")
    try:
        ws = f"ws://127.0.0.1:{node.http_port}/mqtt"
        params = {"url": ws, "version": str(version), "filter": f"{base}/#"}
        page.goto(f"{page_server.url}/mqtt?{urlencode(params)}")
        page.wait_for_function("window.mqttTest.ready || window.mqttTest.closed", timeout=10000)
        subprotocol = "mqttv3.1" if version == 3 else "mqtt"
        [sock] = page.evaluate("window.wsRecord")
        assert sock["asked"] == [subprotocol]
        assert sock["protocol"] == subprotocol, f"handshake failed: {sock}"
        assert page.evaluate("window.mqttTest.ready"), page.evaluate("window.mqttTest.errors")
        props = [["from", "browser"]] if version == 5 else None
        pub = "([t, b, q, p]) => window.publish(t, b, q, p && Object.fromEntries(p))"
        assert page.evaluate(pub, [f"{base}/a/zero", "qos 0 from the page", 0, None]) == "ok"
        assert page.evaluate(pub, [f"{base}/b/one", "qos 1 from the page", 1, props]) == "ok"
        assert page.evaluate(pub, [f"{base}/to-paho", "page to paho", 1, None]) == "ok"
        assert tcp.messages.get(timeout=5) == (f"{base}/to-paho", "page to paho", 1)
        tcp.publish(f"{base}/from/paho", "paho to the page")
        page.evaluate("(t) => window.note(t)", "paho over TCP received: page to paho")
        page.wait_for_function("window.mqttTest.received.length >= 4", timeout=10000)
        state: dict[str, Any] = page.evaluate("window.mqttTest")
        assert state["connack"] == {"sessionPresent": False, "code": 0}
        assert state["granted"] == [1]
        got = sorted((m["topic"], m["body"], m["qos"]) for m in state["received"])
        assert got == sorted(
            [
                (f"{base}/a/zero", "qos 0 from the page", 0),
                (f"{base}/b/one", "qos 1 from the page", 1),
                (f"{base}/to-paho", "page to paho", 1),
                (f"{base}/from/paho", "paho to the page", 1),
            ]
        )
        if version == 5:
            [one] = [m for m in state["received"] if m["topic"].endswith("/b/one")]
            assert one["userProperties"] == {"from": "browser"}
        assert state["errors"] == []
        [sock] = page.evaluate("window.wsRecord")
        assert sock["binary"] > 0 and sock["text"] == 0
        screenshot(page, shot)
        page.evaluate("window.stopMqtt()")
        page.wait_for_function("window.mqttTest.closed", timeout=5000)
    finally:
        tcp.stop()
        page.close()
    keep_evidence(shot, f"browser-{shot}")
