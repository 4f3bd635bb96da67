"""One message through every protocol of the node: AMQP -> STOMP -> REST and back, and
MQTT 5 <-> AMQP <-> REST, against a real ``waystation run`` process.

Each hop is the protocol's own client (proton's BlockingConnection, stomp.py, aiohttp,
paho-mqtt v5) relaying what it received, so a mapping that drops or retypes something on
the way in or out shows up at the far end."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import pytest
from nodekit import NodeProcess
from pahokit import V5, Paho
from proton import Message, float32, int32, timestamp
from proton.utils import BlockingConnection
from restkit import consume, post
from stompkit import connect, unique

BODY = bytes(range(256)) + "é ünïcode".encode()  # binary, not UTF-8: kept byte for byte
# STOMP headers that describe the delivery, not the message: a relaying client drops them
DELIVERY = ("destination", "message-id", "subscription", "ack", "content-length")


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("interop"), http=True, amqp=True, mqtt=True).start()
    yield n
    n.stop()


def typed_props() -> dict[str, object]:
    return {
        "i": int32(-7),
        "f": float32(0.5),
        "l": 2**40,
        "d": 2.25,
        "b": True,
        "t": timestamp(1_700_000_000_123),
        "u": uuid.UUID(int=0x1234),
        "s": "text ü",
    }


def amqp_send(url: str, address: str, msg: Message) -> None:
    c = BlockingConnection(url, timeout=10)
    try:
        c.create_sender(address).send(msg)
    finally:
        c.close()


def amqp_receive(url: str, address: str, n: int = 1) -> list[Message]:
    c = BlockingConnection(url, timeout=10)
    try:
        rcv = c.create_receiver(address, credit=n)
        out = []
        for _ in range(n):
            out.append(rcv.receive(timeout=10))
            rcv.accept()
        return out
    finally:
        c.close()


def stomp_relay(port: int, source: str, target: str) -> dict[str, str]:
    """Take one message from ``source`` and send it to ``target`` with the headers it had;
    returns those headers."""
    conn, got = connect(port, auto_decode=False)
    try:
        conn.subscribe(source, id="r", ack="auto")
        (frame,) = got.wait_messages(1)
        relay = {k: v for k, v in frame.headers.items() if k not in DELIVERY}
        conn.send(target, frame.body, headers={**relay, "receipt": "sent"})
        got.wait_receipt("sent")
        return dict(frame.headers)
    finally:
        conn.disconnect()


async def rest_pull(s: aiohttp.ClientSession, base: str, q: str):
    async with s.post(f"{base}/queues/{q}/pull-consumers") as r:
        assert r.status == 201, await r.text()
        nxt = r.headers["msg-consume-next"]
    got = await consume(s, nxt, wait=10)
    assert got.status == 200, (got.status, got.body)
    return got


def test_amqp_to_stomp_to_rest_and_back(node, run):
    a, b, c, d = (unique("x") for _ in range(4))
    props = typed_props()
    amqp_send(
        f"amqp://127.0.0.1:{node.amqp_port}",
        f"/queue/{a}",
        Message(
            body=BODY,
            inferred=True,  # a data section: raw bytes
            properties=props,
            correlation_id="corr-1",
            subject="subj",
            content_type="application/x-test",
            durable=True,
        ),
    )
    # AMQP -> STOMP: every typed property arrives with its type named in ws-types
    seen = stomp_relay(node.stomp_port, f"/queue/{a}", f"/queue/{b}")
    types = dict(e.split("=") for e in seen["ws-types"].replace(" ", "").split(","))
    assert types == {
        "i": "int", "f": "float", "l": "long", "d": "double", "b": "bool",
        "t": "timestamp", "u": "uuid",
    }  # fmt: skip
    assert seen["content-type"] == "application/x-test"

    async def rest_leg():
        async with aiohttp.ClientSession() as s:
            got = await rest_pull(s, node.http_url, b)
            # REST -> (back) a POST with the headers the consumer got, as a relaying client
            keep = {
                k: v
                for k, v in got.headers.items()
                if k.lower() not in ("content-length", "date", "server", "link")
                and not k.lower().startswith("msg-")
            }
            await post(s, f"{node.http_url}/queues/{c}/create", got.body, headers=keep)
            return got

    got = run(rest_leg())
    # STOMP -> REST: exact bytes, content type, standard fields and properties as text
    assert got.body == BODY
    h = got.headers
    assert h["Content-Type"] == "application/x-test"
    assert (h["correlation-id"], h["subject"]) == ("corr-1", "subj")
    assert (h["i"], h["l"], h["b"], h["t"]) == ("-7", str(2**40), "true", "1700000000123")
    assert float(h["f"]) == 0.5 and float(h["d"]) == 2.25
    assert h["u"] == str(props["u"]) and h["s"] == "text ü"

    # back: REST -> STOMP -> AMQP, the body still byte for byte
    stomp_relay(node.stomp_port, f"/queue/{c}", f"/queue/{d}")
    (m,) = amqp_receive(f"amqp://127.0.0.1:{node.amqp_port}", f"/queue/{d}")
    assert bytes(m.body) == BODY
    assert m.content_type == "application/x-test"
    # REST named every property with its type (ws-types): all come back as they were sent
    for k, v in props.items():
        assert m.properties.get(k) == v and type(m.properties[k]) is type(v), k


def test_typed_properties_survive_a_rest_hop(node, run):
    a, b = unique("y"), unique("y")
    props = typed_props()
    url = f"amqp://127.0.0.1:{node.amqp_port}"
    amqp_send(url, f"/queue/{a}", Message(body=BODY, inferred=True, properties=props))

    async def rest_leg():
        async with aiohttp.ClientSession() as s:
            got = await rest_pull(s, node.http_url, a)
            keep = {k: v for k, v in got.headers.items() if k in props or k == "ws-types"}
            await post(s, f"{node.http_url}/queues/{b}/create", got.body, headers=keep)

    run(rest_leg())
    (m,) = amqp_receive(url, f"/queue/{b}")
    for k, v in props.items():
        assert m.properties.get(k) == v and type(m.properties[k]) is type(v), k


def test_mqtt5_amqp_rest_in_one_flow(node, run):
    t = unique("m")
    url = f"amqp://127.0.0.1:{node.amqp_port}"
    mq = Paho(node.mqtt_port, version=V5)
    mq.connect()
    amqp = BlockingConnection(url, timeout=10)
    try:
        # consumers first: an MQTT publish is multicast, so they must exist before it
        mq.subscribe(f"{t}/back/#", qos=1)
        rcv = amqp.create_receiver(f"/topic/{t}.up", credit=5)

        async def rest_sub(s: aiohttp.ClientSession) -> str:
            async with s.post(f"{node.http_url}/topics/{t}.up/pull-subscriptions") as r:
                assert r.status == 201, await r.text()
                return r.headers["msg-consume-next"]

        async def flow():
            async with aiohttp.ClientSession() as s:
                nxt = await rest_sub(s)
                # MQTT 5 -> AMQP and REST
                await asyncio.to_thread(
                    mq.publish,
                    f"{t}/up",
                    BODY,
                    1,
                    UserProperty=[("colour", "blue"), ("n", "3")],
                    ContentType="application/x-mqtt",
                    ResponseTopic=f"{t}/back/reply",
                    CorrelationData=b"\x00corr",
                )
                from_rest = await consume(s, nxt, wait=10)
                # REST -> MQTT: a POST to the topic the MQTT client subscribed to
                await post(
                    s,
                    f"{node.http_url}/topics/{t}.back.rest/create",
                    b"from rest",
                    headers={"Content-Type": "text/plain", "X-Order": "42"},
                )
                return from_rest

        from_rest = run(flow())
        m = rcv.receive(timeout=10)
        rcv.accept()
        # AMQP -> MQTT: typed properties go out as user properties (text)
        amqp.create_sender(f"/topic/{t}.back.amqp").send(
            Message(
                body=b"from amqp",
                inferred=True,
                properties={"k": int32(9), "name": "v"},
                correlation_id=b"c2",
                reply_to=f"/topic/{t}.up",
                content_type="text/x-amqp",
            )
        )
        # the reply-to an MQTT requester gave is an address AMQP can answer to
        amqp.create_sender(m.reply_to).send(Message(body=b"answer", inferred=True))
        got = mq.wait_messages(3)
    finally:
        amqp.close()
        mq.close()

    # MQTT -> AMQP: body, user properties, content type, correlation data, response topic
    assert bytes(m.body) == BODY
    assert m.properties == {"colour": "blue", "n": "3"}
    assert m.content_type == "application/x-mqtt"
    assert bytes(m.correlation_id) == b"\x00corr"
    assert m.reply_to == f"{t}.back.reply"  # the topic rule
    # MQTT -> REST
    assert from_rest.status == 200 and from_rest.body == BODY
    assert from_rest.headers["Content-Type"] == "application/x-mqtt"
    assert (from_rest.headers["colour"], from_rest.headers["n"]) == ("blue", "3")

    by_topic = {x.topic: x for x in got}
    r, a = by_topic[f"{t}/back/rest"], by_topic[f"{t}/back/amqp"]
    assert by_topic[f"{t}/back/reply"].payload == b"answer"
    assert r.payload == b"from rest"
    assert r.properties.ContentType == "text/plain"
    assert ("http_x$order", "42") in r.properties.UserProperty
    assert a.payload == b"from amqp"
    assert a.properties.ContentType == "text/x-amqp"
    assert a.properties.CorrelationData == b"c2"
    assert a.properties.ResponseTopic == f"{t}/up"
    assert sorted(a.properties.UserProperty) == [("k", "9"), ("name", "v")]
