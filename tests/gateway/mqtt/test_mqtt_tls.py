"""MQTT over TLS with client certificates: a verified certificate whose subject a user names
(``certificate``) logs in as that user, without a password; one no user names is refused."""

from __future__ import annotations

import time

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from pahokit import V311, MqttNode
from test_stomp_tls import self_signed

USERS = """
[security]
enabled = true

[[users]]
name = "device"
certificate = "{subject}"
roles = ["dev"]

[[permissions]]
match = "#"
send = ["dev"]
consume = ["dev"]
create_non_durable_queue = ["dev"]
"""


def _wait(pred, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize("subject", ["CN=localhost", "CN=someone-else"])
def test_a_client_certificate_logs_in_as_the_user_it_names(tmp_path, subject):
    server_cert, server_key = self_signed(tmp_path)
    device = tmp_path / "device"
    device.mkdir()
    client_cert, client_key = self_signed(device)  # self-signed: the node trusts it as CA
    tls = (
        f'tls = {{ cert = "{server_cert}", key = "{server_key}", ca = "{client_cert}", '
        "require_client_cert = true }"
    )
    node = MqttNode(tmp_path / "node", mqtt_table=tls, extra_config=USERS.format(subject=subject))
    port = node.mqtt_port
    cfg = node.config_path.read_text().replace(f"tcp://127.0.0.1:{port}", f"tls://127.0.0.1:{port}")
    node.config_path.write_text(cfg)
    node.start()
    try:
        codes: list[int] = []
        got: list[bytes] = []
        c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="tls-dev", protocol=V311)
        c.tls_set(ca_certs=str(server_cert), certfile=str(client_cert), keyfile=str(client_key))
        c.on_connect = lambda cl, ud, flags, rc, props: codes.append(int(rc.value))
        c.on_message = lambda cl, ud, m: got.append(m.payload)
        c.connect("127.0.0.1", port)  # no user name, no password
        c.loop_start()
        _wait(lambda: codes)
        if subject == "CN=localhost":
            assert codes == [0]  # the certificate is the login
            c.subscribe("tls/t", qos=1)
            time.sleep(0.2)
            c.publish("tls/t", b"hello", qos=1)
            _wait(lambda: got)
            assert got == [b"hello"]
        else:
            assert codes == [135]  # not authorized (3.1.1 return code 5)
        c.loop_stop()
        c.disconnect()
    finally:
        node.stop()
