"""Cross-checks of the MQTT codec against paho-mqtt, an independent implementation.

paho's own property encoder (``Properties.pack``) is read by our decoder and ours by its
``unpack``; and a real paho client (3.1.1 and 5) talks to a minimal echo server built only
from this codec over a localhost socket: CONNECT, SUBSCRIBE, PUBLISH at QoS 0/1/2 both
ways (with the v5 flows PUBACK, PUBREC, PUBREL, PUBCOMP), PINGREQ and DISCONNECT.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from waystation.wire.mqtt import (
    MQTT_5,
    MQTT_311,
    ConnAck,
    Connect,
    Disconnect,
    MqttParser,
    Packet,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    encode,
)
from waystation.wire.mqtt_properties import decode_properties, encode_properties

TIMEOUT = 5.0


def snake(paho_name: str) -> str:
    return paho_name.lower().replace(" ", "_")


def paho_props(packet_type: int, **values: Any) -> Properties:
    props = Properties(packet_type)
    for name, value in values.items():
        if isinstance(value, list):
            for v in value:  # paho appends to multi-valued properties
                setattr(props, name, v)
        else:
            setattr(props, name, value)
    return props


CASES = [
    (
        PacketTypes.PUBLISH,
        3,
        {
            "PayloadFormatIndicator": 1,
            "MessageExpiryInterval": 3600,
            "ContentType": "application/json",
            "ResponseTopic": "reply/é",
            "CorrelationData": b"\x00\xffid",
            "TopicAlias": 12,
            "SubscriptionIdentifier": [5, 268_435_455],
            "UserProperty": [("k", "v1"), ("k", "v2"), ("\uffff", "")],
        },
    ),
    (
        PacketTypes.CONNECT,
        1,
        {
            "SessionExpiryInterval": 0xFFFFFFFF,
            "ReceiveMaximum": 20,
            "MaximumPacketSize": 1 << 20,
            "TopicAliasMaximum": 0,
            "RequestResponseInformation": 1,
            "RequestProblemInformation": 0,
            "AuthenticationMethod": "SCRAM-SHA-1",
            "AuthenticationData": b"\x01\x02",
        },
    ),
    (
        PacketTypes.CONNACK,
        2,
        {
            "AssignedClientIdentifier": "auto-7",
            "ServerKeepAlive": 30,
            "MaximumQoS": 1,
            "RetainAvailable": 0,
            "WildcardSubscriptionAvailable": 1,
            "SubscriptionIdentifierAvailable": 0,
            "SharedSubscriptionAvailable": 1,
            "ResponseInformation": "ri",
            "ServerReference": "other:1883",
            "ReasonString": "welcome",
        },
    ),
    (PacketTypes.WILLMESSAGE, 0, {"WillDelayInterval": 10, "ContentType": "text/plain"}),
    (PacketTypes.SUBSCRIBE, 8, {"SubscriptionIdentifier": 99}),
    (PacketTypes.DISCONNECT, 14, {"SessionExpiryInterval": 0, "ServerReference": "s"}),
    (PacketTypes.AUTH, 15, {"AuthenticationMethod": "m", "ReasonString": "r"}),
    (PacketTypes.PUBACK, 4, {"ReasonString": "no", "UserProperty": [("a", "b")]}),
]


def expected(kind: int, values: dict[str, Any], props: Properties) -> dict[str, Any]:
    """paho's attribute names and values in ours (a list of subscription ids only in PUBLISH)."""
    return {
        snake(next(n for n in props.names if n.replace(" ", "") == name)): value
        for name, value in values.items()
    }


@pytest.mark.parametrize(("ptype", "kind", "values"), CASES, ids=[str(c[1]) for c in CASES])
def test_paho_properties_decode_here_and_ours_decode_there(
    ptype: int, kind: int, values: dict[str, Any]
) -> None:
    theirs = paho_props(ptype, **values)
    raw = theirs.pack()
    props, end = decode_properties(raw, 0, len(raw), kind)
    assert end == len(raw)
    assert props == expected(kind, values, theirs)

    ours = encode_properties(props, kind)
    back, used = Properties(ptype).unpack(ours)
    assert used == len(ours)
    assert back.json() == theirs.json()


def test_paho_built_publish_with_properties_decodes() -> None:
    props = paho_props(PacketTypes.PUBLISH, MessageExpiryInterval=7, UserProperty=[("a", "b")])
    body = b"\x00\x03a/b" + b"\x00\x2a" + props.pack() + b"payload"
    data = bytes((0x32, len(body))) + body
    p = MqttParser()
    p.feed(encode(Connect("c", MQTT_5), MQTT_5))
    assert p.feed(data) == [
        Publish("a/b", b"payload", 1, packet_id=42,
                properties={"message_expiry_interval": 7, "user_property": [("a", "b")]})
    ]  # fmt: skip


class EchoServer:
    """One connection: answers CONNECT/SUBSCRIBE/PINGREQ, acks publishes (both QoS flows)
    and sends every publish back to the client, as a broker would to a matching subscriber."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received: list[Packet] = []
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            conn, _ = self.sock.accept()
            conn.settimeout(TIMEOUT)
            with conn:
                self._serve(conn)
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.sock.close()

    def _serve(self, conn: socket.socket) -> None:
        parser = MqttParser()
        next_id = 0
        while True:
            data = conn.recv(65536)
            if not data:
                return
            for packet in parser.feed(data):
                self.received.append(packet)
                v = parser.version
                out: list[Packet] = []
                match packet:
                    case Connect():
                        props = {"topic_alias_maximum": 0, "reason_string": "hi"}
                        out.append(ConnAck(0, False, props if v == MQTT_5 else {}))
                    case Subscribe(packet_id=pid, subscriptions=subs):
                        out.append(SubAck(pid, [s.qos for s in subs]))
                    case Publish(qos=qos, packet_id=pid):
                        if qos and pid:
                            out.append(PubAck(pid) if qos == 1 else PubRec(pid))
                        next_id += 1
                        props = dict(packet.properties)
                        if v == MQTT_5:
                            props["subscription_identifier"] = [1]
                        echo = Publish(packet.topic, packet.payload, qos, False, False,
                                       next_id if qos else None, props)  # fmt: skip
                        out.append(echo)
                    case PubRel(packet_id=pid):
                        out.append(PubComp(pid))
                    case PubRec(packet_id=pid):
                        out.append(PubRel(pid))
                    case PingReq():
                        out.append(PingResp())
                    case Disconnect():
                        return
                conn.sendall(b"".join(encode(p, v) for p in out))


@pytest.mark.parametrize("version", [MQTT_311, MQTT_5])
def test_paho_client_talks_to_a_server_built_from_this_codec(version: int) -> None:
    server = EchoServer()
    v5 = version == MQTT_5
    client = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2,
        client_id="paho-x",
        protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311,
    )
    client.username_pw_set("user", "pw")
    client.will_set("will/t", b"gone", 1, True)
    connected = threading.Event()
    subscribed = threading.Event()
    got: list[mqtt.MQTTMessage] = []
    all_in = threading.Event()

    def on_connect(c: Any, u: Any, flags: Any, rc: Any, props: Any) -> None:
        assert not rc.is_failure
        connected.set()

    def on_message(c: Any, u: Any, msg: mqtt.MQTTMessage) -> None:
        got.append(msg)
        if len(got) == 3:
            all_in.set()

    client.on_connect = on_connect
    client.on_subscribe = lambda *a: subscribed.set()
    client.on_message = on_message
    client.connect("127.0.0.1", server.port, keepalive=30)
    client.loop_start()
    try:
        assert connected.wait(TIMEOUT), server.error
        client.subscribe("t/#", qos=2)
        assert subscribed.wait(TIMEOUT), server.error
        for qos in (0, 1, 2):
            props = None
            if v5:
                props = paho_props(PacketTypes.PUBLISH, ContentType="text/plain",
                                   UserProperty=[("q", str(qos))])  # fmt: skip
            client.publish(f"t/{qos}", f"m{qos}".encode() * 50, qos, properties=props)
        assert all_in.wait(TIMEOUT), (server.error, server.received)
    finally:
        client.disconnect()
        client.loop_stop()
        server.thread.join(TIMEOUT)
    assert server.error is None, server.error
    assert sorted((m.topic, m.payload, m.qos) for m in got) == [
        (f"t/{q}", f"m{q}".encode() * 50, q) for q in (0, 1, 2)
    ]
    first = server.received[0]
    assert isinstance(first, Connect)
    assert (first.client_id, first.username, first.password) == ("paho-x", "user", b"pw")
    assert first.will is not None and (first.will.topic, first.will.qos) == ("will/t", 1)
    pubs = [p for p in server.received if isinstance(p, Publish)]
    assert [p.qos for p in pubs] == [0, 1, 2]
    if v5:
        assert [p.properties["user_property"] for p in pubs] == [[("q", str(q))] for q in (0, 1, 2)]
        for m in got:
            assert m.properties is not None
            assert m.properties.json()["SubscriptionIdentifier"] == [1]
            assert m.properties.json()["ContentType"] == "text/plain"
    types = {type(p) for p in server.received}
    assert {PubRel, PubAck, PubComp} <= types  # paho acked our QoS 1 and 2 publishes
    assert isinstance(server.received[-1], Disconnect)
