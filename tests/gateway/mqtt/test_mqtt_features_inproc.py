"""Retained messages, persistent sessions, shared subscriptions and the MQTT 5 extras,
in process (fake link, in-memory engine)."""

from __future__ import annotations

import asyncio

from mqtt_inproc_kit import MQTT_5, MQTT_311, Client, in_engine, settle

from waystation.core.security import Permission, SecurityManager, User
from waystation.wire.mqtt import (
    Disconnect,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    SubscriptionRequest,
    UnsubAck,
    Unsubscribe,
)


async def rx(c: Client) -> list:
    await settle()
    return c.recv()


async def sub(c: Client, *reqs: SubscriptionRequest, pid: int = 1, **props) -> SubAck:
    c.send(Subscribe(pid, list(reqs), props))
    got = await rx(c)
    assert isinstance(got[0], SubAck), got
    c.rest = got[1:]
    return got[0]


def R(f: str, qos: int = 0, **kw) -> SubscriptionRequest:
    return SubscriptionRequest(f, qos, **kw)


def test_retained_message_on_subscribe_and_cleared_by_empty_payload(run):
    async def go(engine):
        p = Client(engine)
        p.connect("pub")
        p.send(Publish("home/temp", b"21", 1, retain=True, packet_id=1))
        await rx(p)
        s = Client(engine)
        s.connect("s")
        await sub(s, R("home/#", 1))
        [m] = s.rest
        assert (m.topic, m.payload, m.retain, m.qos) == ("home/temp", b"21", True, 1)
        p.send(Publish("home/temp", b"22", retain=True))  # live: RETAIN off [MQTT-3.3.1-9]
        [live] = await rx(s)
        assert live.payload == b"22" and not live.retain
        p.send(Publish("home/temp", b"", retain=True))  # clears it [MQTT-3.3.1-10]
        await rx(s)
        s2 = Client(engine)
        s2.connect("s2")
        await sub(s2, R("home/#"))
        assert s2.rest == []

    in_engine(run, go)


def test_v5_retain_handling_and_retain_as_published(run):
    async def go(engine):
        p = Client(engine, MQTT_5)
        p.connect("pub")
        p.send(Publish("r/a", b"kept", retain=True))
        s = Client(engine, MQTT_5)
        s.connect("s")
        await sub(s, R("r/#", retain_handling=2))
        assert s.rest == []  # 2: never
        await sub(s, R("r/+", retain_handling=1), pid=2)
        assert [m.payload for m in s.rest] == [b"kept"]  # 1: a new subscription
        await sub(s, R("r/+", retain_handling=1), pid=3)
        assert s.rest == []  # ... and not again when it existed
        await sub(s, R("x/#", retain_as_published=True), pid=4)
        p.send(Publish("x/y", b"flag", retain=True))
        [m] = await rx(s)
        assert m.retain  # retain as published

    in_engine(run, go)


def test_persistent_session_keeps_subscriptions_and_queues_while_away(run):
    async def go(engine):
        s = Client(engine)
        assert not s.connect("dev", clean_start=False).session_present
        await sub(s, R("cmd/#", 1))
        s.send(Disconnect())
        p = Client(engine)
        p.connect("pub")
        p.send(Publish("cmd/reboot", b"now", 1, packet_id=1))
        await rx(p)
        back = Client(engine)
        ack = back.connect("dev", clean_start=False)
        assert ack.session_present
        [m] = await rx(back)
        assert (m.topic, m.payload, m.qos) == ("cmd/reboot", b"now", 1)
        back.send(PubAck(m.packet_id), Disconnect())
        clean = Client(engine)
        assert not clean.connect("dev", clean_start=True).session_present
        clean.send(Disconnect())
        p.send(Publish("cmd/reboot", b"lost", 1, packet_id=2))
        await rx(p)
        again = Client(engine)
        assert not again.connect("dev", clean_start=False).session_present
        assert await rx(again) == []  # the clean session dropped the subscription

    in_engine(run, go)


def test_unacknowledged_qos1_is_redelivered_to_the_resumed_session(run):
    async def go(engine):
        s = Client(engine)
        s.connect("dev", clean_start=False)
        await sub(s, R("t", 1))
        p = Client(engine)
        p.connect("pub")
        p.send(Publish("t", b"m1", 1, packet_id=1))
        [m] = await rx(s)
        s.server.connection_lost()  # no PUBACK
        back = Client(engine)
        back.connect("dev", clean_start=False)
        [again] = await rx(back)
        assert again.payload == b"m1" and again.qos == 1

    in_engine(run, go)


def test_v5_session_expiry_ends_the_session(run):
    async def go(engine):
        s = Client(engine, MQTT_5)
        s.connect("dev", clean_start=False, properties={"session_expiry_interval": 1})
        await sub(s, R("t", 1))
        s.send(Disconnect())
        await asyncio.sleep(1.2)
        back = Client(engine, MQTT_5)
        ack = back.connect("dev", clean_start=False, properties={"session_expiry_interval": 1})
        assert not ack.session_present
        assert not [q for q in engine.post.queues if "mqtt." in q]

    in_engine(run, go)


def test_shared_subscription_splits_messages_between_members(run):
    async def go(engine):
        a, b = Client(engine), Client(engine)
        a.connect("a")
        b.connect("b")
        await sub(a, R("$share/workers/jobs/+", 1))
        await sub(b, R("$share/workers/jobs/+", 1))
        p = Client(engine)
        p.connect("pub")
        p.send(*(Publish("jobs/x", str(i).encode(), 1, packet_id=i + 1) for i in range(6)))
        await settle()
        got_a, got_b = await rx(a), await rx(b)
        assert len(got_a) + len(got_b) == 6 and got_a and got_b
        assert all(m.topic == "jobs/x" for m in got_a + got_b)

    in_engine(run, go)


def test_v5_no_local_and_subscription_identifier(run):
    async def go(engine):
        c = Client(engine, MQTT_5)
        c.connect("c")
        await sub(c, R("chat/#", no_local=True), subscription_identifier=42)
        c.send(Publish("chat/room", b"mine"))
        assert await rx(c) == []
        o = Client(engine, MQTT_5)
        o.connect("o")
        o.send(Publish("chat/room", b"theirs"))
        [m] = await rx(c)
        assert m.payload == b"theirs"
        assert m.properties["subscription_identifier"] == [42]

    in_engine(run, go)


def test_v5_properties_travel(run):
    async def go(engine):
        s = Client(engine, MQTT_5)
        s.connect("s")
        await sub(s, R("rpc/#"))
        p = Client(engine, MQTT_5)
        p.connect("p")
        props = {
            "user_property": [("a", "1")],
            "content_type": "text/plain",
            "response_topic": "rpc/reply",
            "correlation_data": b"id7",
            "payload_format_indicator": 1,
        }
        p.send(Publish("rpc/call", b"hi", properties=props))
        [m] = await rx(s)
        assert m.properties == props

    in_engine(run, go)


def test_v5_topic_alias_inbound(run):
    async def go(engine):
        s = Client(engine, MQTT_5)
        s.connect("s")
        await sub(s, R("long/topic/name"))
        p = Client(engine, MQTT_5)
        ack = p.connect("p")
        assert ack.properties["topic_alias_maximum"] >= 1
        p.send(Publish("long/topic/name", b"1", properties={"topic_alias": 1}))
        p.send(Publish("", b"2", properties={"topic_alias": 1}))
        assert [m.payload for m in await rx(s)] == [b"1", b"2"]
        p.send(Publish("", b"3", properties={"topic_alias": 2}))  # never set
        [d] = await rx(p)
        assert isinstance(d, Disconnect) and d.reason_code == 0x82 and p.link.closed

    in_engine(run, go)


def test_v5_client_maximum_packet_size_drops_what_is_too_big(run):
    async def go(engine):
        s = Client(engine, MQTT_5)
        s.connect("s", properties={"maximum_packet_size": 64})
        await sub(s, R("t"))
        p = Client(engine, MQTT_5)
        p.connect("p")
        p.send(Publish("t", b"x" * 100), Publish("t", b"small"))
        assert [m.payload for m in await rx(s)] == [b"small"]  # [MQTT-3.1.2-25]

    in_engine(run, go)


def test_v5_receive_maximum_bounds_deliveries_across_subscriptions(run):
    async def go(engine):
        s = Client(engine, MQTT_5)
        s.connect("s", properties={"receive_maximum": 1})
        await sub(s, R("a/#", 1), R("a/+", 1))
        p = Client(engine, MQTT_5)
        p.connect("p")
        p.send(Publish("a/b", b"m", 1, packet_id=1))
        first = await rx(s)
        assert len(first) == 1  # one copy per subscription, but one at a time
        s.send(PubAck(first[0].packet_id))
        second = await rx(s)
        assert len(second) == 1 and second[0].payload == b"m"

    in_engine(run, go)


def test_unsubscribe_reason_codes(run):
    async def go(engine):
        c = Client(engine, MQTT_5)
        c.connect("c")
        await sub(c, R("a"))
        c.send(Unsubscribe(2, ["a", "nope"]))
        assert await rx(c) == [UnsubAck(2, [0, 0x11])]
        c3 = Client(engine, MQTT_311)
        c3.connect("c3")
        c3.send(Unsubscribe(3, ["x"]))
        assert await rx(c3) == [UnsubAck(3, [])]

    in_engine(run, go)


def secure(engine) -> None:
    engine.security = SecurityManager(
        enabled=True,
        users={
            "app": User("app", lambda p: p == "secret", frozenset({"rw"})),
            "ro": User("ro", lambda p: p == "r", frozenset({"ro"})),
        },
        permissions={
            "#": {
                Permission.SEND: frozenset({"rw"}),
                Permission.CONSUME: frozenset({"rw", "ro"}),
                Permission.CREATE_NON_DURABLE_QUEUE: frozenset({"rw", "ro"}),
                Permission.CREATE_DURABLE_QUEUE: frozenset({"rw"}),
                Permission.DELETE_DURABLE_QUEUE: frozenset({"rw"}),
            },
            "secret.#": {Permission.SEND: frozenset({"rw"})},
        },
    )


async def connect_async(c: Client, cid: str, **fields):
    from waystation.wire.mqtt import Connect

    fields.setdefault("protocol_level", c.version)
    c.send(Connect(cid, **fields))
    for _ in range(200):
        got = c.recv()
        if got:
            return got[0]
        await asyncio.sleep(0.01)
    raise AssertionError("no CONNACK")


def test_bad_password_is_refused_with_the_versions_code(run):
    async def go(engine):
        secure(engine)
        c3 = Client(engine)
        ack = await connect_async(c3, "x", username="app", password=b"wrong")
        assert ack.reason_code == 0x86 and c3.link.closed  # 3.1.1 return code 4
        c5 = Client(engine, MQTT_5)
        ack = await connect_async(c5, "y", username="app", password=b"wrong")
        assert ack.reason_code == 0x86 and c5.link.closed
        assert not engine.sessions

    in_engine(run, go)


def test_permissions_map_to_reason_codes(run):
    async def go(engine):
        secure(engine)
        ro = Client(engine, MQTT_5)
        assert (await connect_async(ro, "ro", username="ro", password=b"r")).reason_code == 0
        ro.send(Publish("a/b", b"x", 1, packet_id=5))
        [ack] = await rx(ro)
        assert isinstance(ack, PubAck) and ack.reason_code == 0x87
        assert (await sub(ro, R("a/#"), R("secret/#"))).reason_codes == [0, 0x87]
        ro3 = Client(engine)
        await connect_async(ro3, "ro3", username="ro", password=b"r")
        assert (await sub(ro3, R("secret/x", 1))).reason_codes == [0x80]
        ro3.send(Publish("a/b", b"x", 1, packet_id=5))
        assert await rx(ro3) == [PubAck(5)]  # 3.1.1: acknowledged, dropped [MQTT-3.3.5-2]
        app = Client(engine, MQTT_5)
        await connect_async(app, "app", username="app", password=b"secret")
        app.send(Publish("a/b", b"ok"))
        assert [m.payload for m in await rx(ro)] == [b"ok"]

    in_engine(run, go)


def test_a_will_the_user_may_not_send_refuses_the_connect(run):
    async def go(engine):
        from waystation.wire.mqtt import Will

        secure(engine)
        c = Client(engine, MQTT_5)
        ack = await connect_async(c, "w", username="ro", password=b"r", will=Will("a/w", b"x"))
        assert ack.reason_code == 0x87 and c.link.closed

    in_engine(run, go)


def test_qos2_delivery_keeps_its_packet_id_across_a_reconnect(run):
    async def go(engine):
        from waystation.wire.mqtt import PubComp, PubRec, PubRel

        s = Client(engine)
        s.connect("q2", clean_start=False)
        await sub(s, R("q2/#", 2))
        p = Client(engine)
        p.connect("pub")
        p.send(Publish("q2/a", b"A", 2, packet_id=1), Publish("q2/b", b"B", 2, packet_id=2))
        await settle()
        p.send(PubRel(1), PubRel(2))
        a, b = await rx(s)
        s.send(PubRec(b.packet_id))  # B: PUBREC sent, PUBCOMP never
        assert await rx(s) == [PubRel(b.packet_id)]
        s.server.connection_lost()  # A: never acknowledged
        back = Client(engine)
        assert back.connect("q2", clean_start=False).session_present
        got = await rx(back)
        assert got[0] == PubRel(b.packet_id)  # [MQTT-4.4.0-1]
        [again] = got[1:]
        assert (again.payload, again.packet_id, again.dup) == (b"A", a.packet_id, True)
        back.send(PubComp(b.packet_id), PubRec(a.packet_id))
        assert await rx(back) == [PubRel(a.packet_id)]
        back.send(PubComp(a.packet_id))
        await settle()
        assert not back.server.outbound.entries and not back.server.outbound.saved()

    in_engine(run, go)


def test_qos2_publish_of_a_persistent_session_is_routed_once_across_a_reconnect(run):
    async def go(engine):
        from waystation.wire.mqtt import PubComp, PubRec, PubRel

        s = Client(engine, MQTT_5)
        s.connect("watch")
        await sub(s, R("once/#"))
        p = Client(engine, MQTT_5)
        props = {"session_expiry_interval": 60}
        p.connect("src", clean_start=False, properties=props)
        p.send(Publish("once/t", b"m", 2, packet_id=9))
        assert await rx(p) == [PubRec(9)]
        p.server.connection_lost()  # PUBREC lost on the way: the client sends again
        again = Client(engine, MQTT_5)
        assert again.connect("src", clean_start=False, properties=props).session_present
        again.send(Publish("once/t", b"m", 2, dup=True, packet_id=9))
        assert await rx(again) == [PubRec(9)]
        again.send(PubRel(9))
        assert await rx(again) == [PubComp(9)]
        [m] = await rx(s)  # once, and the duplicate id stays inside the node
        assert m.payload == b"m" and "user_property" not in m.properties

    in_engine(run, go)
