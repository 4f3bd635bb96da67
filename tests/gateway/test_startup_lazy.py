"""A fresh node loads only what it serves at once, and every lazily loaded feature works
on its first use: the probes without the web stack, then /metrics, the console, the admin
API, and an MQTT client (each in a fresh interpreter, so nothing was imported before)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import paho.mqtt.client as mqtt

# Started in a fresh interpreter: every listener on port 0, then each step's modules and
# answers printed as one JSON line.
SCRIPT = textwrap.dedent(
    """
    import asyncio, json, socket, sys, threading, urllib.request
    from waystation.config.loader import parse_config
    from waystation.gateway.node import Node

    TOML = '''
    [node]
    data_dir = "DATA"
    [acceptors.stomp]
    url = "tcp://127.0.0.1:0"
    [acceptors.http]
    url = "http://127.0.0.1:0"
    [acceptors.amqp]
    url = "tcp://127.0.0.1:0"
    [acceptors.mqtt]
    url = "tcp://127.0.0.1:0"
    '''
    WATCH = ("aiohttp", "prometheus_client", "proton", "waystation.gateway.amqp",
             "waystation.gateway.mqtt", "waystation.bridges.manager",
             "waystation.gateway.http.server", "waystation.gateway.admin_cli")

    def loaded():
        return sorted(m for m in WATCH if m in sys.modules)

    def raw(port, request):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(request)
            out = b""
            while chunk := s.recv(65536):
                out += chunk
            return out.decode("latin-1")

    def get(port, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
                return r.status, r.headers.get("Content-Type"), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type"), e.read().decode()

    async def main():
        cfg = parse_config(TOML.replace("DATA", sys.argv[1]), "test")
        node = Node(cfg)
        await node.start()
        ports = node.ports()
        out = {"ports": ports, "at_start": loaded()}
        http = ports["http"]
        step = lambda fn, *a: asyncio.get_running_loop().run_in_executor(None, fn, *a)
        out["ready"] = await step(raw, http, b"GET /ready HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n")
        out["health_head"] = await step(raw, http, b"HEAD /health HTTP/1.0\\r\\n\\r\\n")
        out["after_probes"] = loaded()
        out["metrics"] = await step(get, http, "/metrics")
        out["after_metrics"] = loaded()
        out["console"] = await step(get, http, "/console/")
        out["admin"] = await step(get, http, "/admin/api/v1/queues")
        out["ready_app"] = await step(get, http, "/ready")
        print(json.dumps(out), flush=True)
        await step(sys.stdin.readline)  # the test connects an MQTT client meanwhile
        out = {"after_mqtt": loaded()}
        await node.stop()
        print(json.dumps(out), flush=True)

    asyncio.run(main())
    """
)


def mqtt_round_trip(port: int) -> list[bytes]:
    """Subscribe, publish at QoS 1, receive: what the node delivered."""
    got: list[bytes] = []
    subscribed, received = threading.Event(), threading.Event()
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="first", protocol=mqtt.MQTTv311)
    c.on_subscribe = lambda *_: subscribed.set()
    c.on_message = lambda _c, _u, msg: (got.append(msg.payload), received.set())
    c.connect("127.0.0.1", port)
    c.loop_start()
    try:
        c.subscribe("first/use", qos=1)
        assert subscribed.wait(10), "no SUBACK"
        c.publish("first/use", b"hello", qos=1).wait_for_publish(10)
        assert received.wait(10), "no message"
    finally:
        c.disconnect()
        c.loop_stop()
    return got


def test_a_fresh_node_loads_its_http_stack_and_mqtt_on_first_use(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "data")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        out = json.loads(line)
        assert out["at_start"] == []  # nothing of HTTP, Prometheus, AMQP, MQTT, bridges

        # the probes are answered at the door, as the application answers them
        assert out["ready"].startswith("HTTP/1.1 200 OK\r\n"), out["ready"]
        head, body = out["ready"].split("\r\n\r\n", 1)
        assert "Content-Type: application/json; charset=utf-8" in head
        assert "Connection: close" in head
        assert json.loads(body) == {"status": "ready", "node": "waystation"}
        assert out["health_head"].startswith("HTTP/1.1 200 OK\r\n")
        assert out["health_head"].endswith("\r\n\r\n")  # HEAD: no body
        assert out["after_probes"] == []

        # first use of the rest builds the application, and it answers
        status, ctype, text = out["metrics"]
        assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
        assert 'waystation_queue_messages{address="DLQ"' in text
        assert "waystation_event_loop_lag" in text
        assert {"aiohttp", "prometheus_client", "waystation.gateway.http.server"} <= set(
            out["after_metrics"]
        )
        status, ctype, text = out["console"]
        assert status == 200 and "html" in ctype and "<html" in text.lower()
        status, _, text = out["admin"]  # the defaults let a local anonymous user manage
        assert status == 200 and "DLQ" in {q["name"] for q in json.loads(text)["queues"]}
        assert out["ready_app"][0] == 200 and json.loads(out["ready_app"][2])["status"] == "ready"
        assert "waystation.gateway.mqtt" not in out["after_metrics"]

        # an MQTT client on the fresh node: the adapter loads and serves it
        assert mqtt_round_trip(out["ports"]["mqtt"]) == [b"hello"]
        proc.stdin.write("\n")
        proc.stdin.flush()
        out = json.loads(proc.stdout.readline())
        assert "waystation.gateway.mqtt" in out["after_mqtt"]
        assert "proton" not in out["after_mqtt"]
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
