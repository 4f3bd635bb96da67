"""The MQTT session's state machine in process (fake link, in-memory engine): connect,
client ids, takeover, QoS 0/1/2 both ways, wildcards, keep-alive, wills, malformed input."""

from __future__ import annotations

import asyncio

from mqtt_inproc_kit import MQTT_5, Client, in_engine, settle

from waystation.wire.mqtt import (
    ConnAck,
    Disconnect,
    PingReq,
    PingResp,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    SubscriptionRequest,
    Will,
)


async def rx(c: Client) -> list:
    """What the server wrote to ``c`` once the loop has run what was scheduled."""
    await settle()
    return c.recv()


async def sub(c: Client, *filters: str, qos: int = 0, pid: int = 1) -> SubAck:
    c.send(Subscribe(pid, [SubscriptionRequest(f, qos) for f in filters]))
    [ack] = [p for p in await rx(c) if isinstance(p, SubAck)]
    return ack


def test_connect_311_and_ping(run):
    async def go(engine):
        c = Client(engine)
        ack = c.connect("dev-1")
        assert ack == ConnAck(0, False)
        assert c.server.connected and engine.sessions
        c.send(PingReq())
        assert await rx(c) == [PingResp()]

    in_engine(run, go)


def test_a_packet_before_connect_closes_the_connection(run):
    async def go(engine):
        c = Client(engine)
        c.send(Publish("a/b", b"x"))
        assert c.link.closed and not engine.sessions

    in_engine(run, go)


def test_empty_client_id_rules(run):
    async def go(engine):
        c = Client(engine)
        assert c.connect("", clean_start=True).reason_code == 0  # assigned, 3.1.1 silently
        c2 = Client(engine)
        ack = c2.connect("", clean_start=False)
        assert ack.reason_code == 0x85 and c2.link.closed  # return code 2 [MQTT-3.1.3-8]
        c5 = Client(engine, MQTT_5)
        ack5 = c5.connect("")
        assert ack5.reason_code == 0
        assert ack5.properties["assigned_client_identifier"].startswith("ws-")

    in_engine(run, go)


def test_qos0_round_trip_with_wildcards(run):
    async def go(engine):
        s = Client(engine)
        s.connect("sub")
        assert (await sub(s, "sensors/+/temp", "alarms/#")).reason_codes == [0, 0]
        p = Client(engine)
        p.connect("pub")
        p.send(
            Publish("sensors/k1/temp", b"21"),
            Publish("sensors/k1/hum", b"40"),
            Publish("alarms", b"a0"),
            Publish("alarms/fire/floor2", b"a2"),
        )
        got = await rx(s)
        assert [(x.topic, x.payload, x.qos) for x in got] == [
            ("sensors/k1/temp", b"21", 0),
            ("alarms", b"a0", 0),
            ("alarms/fire/floor2", b"a2", 0),
        ]

    in_engine(run, go)


def test_dollar_topics_are_not_matched_by_leading_wildcards(run):
    async def go(engine):
        s = Client(engine)
        s.connect("sub")
        await sub(s, "#", "+/info", "$SYS/#")
        p = Client(engine)
        p.connect("pub")
        p.send(Publish("$SYS/info", b"sys"), Publish("x/info", b"x"))
        got = [(x.topic, x.payload) for x in await rx(s)]
        # '#' and '+/info' see x/info; only '$SYS/#' sees $SYS/info [MQTT-4.7.2-1]
        assert sorted(got) == [("$SYS/info", b"sys"), ("x/info", b"x"), ("x/info", b"x")]

    in_engine(run, go)


def test_qos1_both_ways_puback_and_window(run):
    async def go(engine):
        s = Client(engine, max_inflight=2)
        s.connect("sub")
        assert (await sub(s, "q/#", qos=1)).reason_codes == [1]
        p = Client(engine)
        p.connect("pub")
        p.send(*(Publish("q/x", str(i).encode(), 1, packet_id=10 + i) for i in range(4)))
        await settle()
        assert await rx(p) == [PubAck(10 + i) for i in range(4)]
        got = await rx(s)
        assert [x.payload for x in got] == [b"0", b"1"]  # the window holds two
        assert all(x.qos == 1 and x.packet_id for x in got)
        s.send(PubAck(got[0].packet_id))
        more = await rx(s)
        assert [x.payload for x in more] == [b"2"]
        s.send(PubAck(got[1].packet_id), PubAck(more[0].packet_id))
        assert [x.payload for x in await rx(s)] == [b"3"]

    in_engine(run, go)


def test_delivered_qos_is_the_lower_of_publish_and_subscription(run):
    async def go(engine):
        s0, s2 = Client(engine), Client(engine)
        s0.connect("s0")
        s2.connect("s2")
        await sub(s0, "t", qos=0)
        await sub(s2, "t", qos=2)
        p = Client(engine)
        p.connect("pub")
        p.send(Publish("t", b"one", 1, packet_id=1))
        await settle()
        assert [x.qos for x in await rx(s0)] == [0]
        assert [x.qos for x in await rx(s2)] == [1]

    in_engine(run, go)


def test_qos2_inbound_exactly_once(run):
    async def go(engine):
        s = Client(engine)
        s.connect("sub")
        await sub(s, "t")
        p = Client(engine)
        p.connect("pub")
        p.send(Publish("t", b"once", 2, packet_id=7))
        await settle()
        assert await rx(p) == [PubRec(7)]
        p.send(Publish("t", b"once", 2, dup=True, packet_id=7))  # PUBREC lost: resent
        await settle()
        assert await rx(p) == [PubRec(7)]
        p.send(PubRel(7))
        await settle()
        assert await rx(p) == [PubComp(7)]
        assert [x.payload for x in await rx(s)] == [b"once"]
        p.send(Publish("t", b"again", 2, packet_id=7))  # the id is free again
        await settle()
        p.send(PubRel(7))
        await settle()
        assert [x.payload for x in await rx(s)] == [b"again"]

    in_engine(run, go)


def test_qos2_outbound_flow(run):
    async def go(engine):
        s = Client(engine)
        s.connect("sub")
        await sub(s, "t", qos=2)
        p = Client(engine)
        p.connect("pub")
        p.send(Publish("t", b"x", 2, packet_id=1))
        await settle()
        [d] = await rx(s)
        assert d.qos == 2 and d.packet_id
        s.send(PubRec(d.packet_id))
        assert await rx(s) == [PubRel(d.packet_id)]
        s.send(PubComp(d.packet_id))
        assert not s.server.outbound.entries

    in_engine(run, go)


def test_takeover_closes_the_first_connection(run):
    async def go(engine):
        a = Client(engine, MQTT_5)
        a.connect("same")
        b = Client(engine, MQTT_5)
        assert b.connect("same").reason_code == 0
        assert a.link.closed
        [d] = await rx(a)
        assert isinstance(d, Disconnect) and d.reason_code == 0x8E
        assert len(engine.sessions) == 1

    in_engine(run, go)


def test_malformed_packet_closes_only_that_connection(run):
    async def go(engine):
        good, bad = Client(engine), Client(engine)
        good.connect("good")
        await sub(good, "t")
        bad.connect("bad")
        bad.raw(b"\x30\xff\xff\xff\xff\x7f")  # a remaining length of five bytes
        assert bad.link.closed and not good.link.closed
        p = Client(engine)
        p.connect("pub")
        p.send(Publish("t", b"still here"))
        assert [x.payload for x in await rx(good)] == [b"still here"]

    in_engine(run, go)


def test_v5_malformed_packet_gets_a_disconnect_with_reason(run):
    async def go(engine):
        c = Client(engine, MQTT_5)
        c.connect("c")
        c.raw(b"\x36\x00")  # PUBLISH with QoS 3 [MQTT-3.3.1-4]
        [d] = await rx(c)
        assert isinstance(d, Disconnect) and d.reason_code == 0x81
        assert c.link.closed

    in_engine(run, go)


def test_will_on_lost_connection_not_after_disconnect(run):
    async def go(engine):
        w = Client(engine)
        w.connect("watcher")
        await sub(w, "wills/#")
        a = Client(engine)
        a.connect("a", will=Will("wills/a", b"a died"))
        a.server.connection_lost()
        assert [x.payload for x in await rx(w)] == [b"a died"]
        b = Client(engine)
        b.connect("b", will=Will("wills/b", b"b died"))
        b.send(Disconnect())
        assert b.link.closed and await rx(w) == []

    in_engine(run, go)


def test_keepalive_timeout_closes_and_publishes_the_will(run):
    async def go(engine):
        w = Client(engine)
        w.connect("watcher")
        await sub(w, "wills/#")
        a = Client(engine, MQTT_5)
        a.connect("a", keepalive=1, will=Will("wills/a", b"silent"))
        await asyncio.sleep(1.0)
        a.send(PingReq())  # a packet keeps it alive
        await asyncio.sleep(1.0)
        assert not a.link.closed
        await asyncio.sleep(1.2)
        assert a.link.closed
        assert [type(x).__name__ for x in await rx(a)] == ["PingResp", "Disconnect"]
        assert [x.payload for x in await rx(w)] == [b"silent"]

    in_engine(run, go)


def test_v5_will_delay_cancelled_by_reconnect(run):
    async def go(engine):
        w = Client(engine)
        w.connect("watcher")
        await sub(w, "wills/#")
        a = Client(engine, MQTT_5)
        will = Will("wills/a", b"late", properties={"will_delay_interval": 1})
        a.connect("a", clean_start=False, will=will, properties={"session_expiry_interval": 60})
        a.server.connection_lost()
        assert await rx(w) == []
        again = Client(engine, MQTT_5)
        again.connect("a", clean_start=False, properties={"session_expiry_interval": 60})
        await asyncio.sleep(1.2)
        assert await rx(w) == []  # [MQTT-3.1.3-9]
        again.server.connection_lost()  # no will given this time
        b = Client(engine, MQTT_5)
        b.connect("b", will=Will("wills/b", b"delayed", properties={"will_delay_interval": 1}))
        b.server.connection_lost()  # expiry 0: the session ends now, so does the delay
        assert [x.payload for x in await rx(w)] == [b"delayed"]

    in_engine(run, go)


def test_listener_settings_come_from_the_acceptor_config():
    from waystation.config.listeners import MqttAcceptor
    from waystation.gateway.mqtt.options import options_from

    o = options_from(
        MqttAcceptor(max_topic_aliases=7, max_keepalive="30s", max_session_expiry="1h")
    )
    assert (o.topic_alias_maximum, o.max_keepalive, o.max_session_expiry) == (7, 30, 3600)
    assert o.session_expiry_311 == 3600


def test_keepalive_over_the_limit(run):
    async def go(engine):
        c3 = Client(engine, max_keepalive=30)
        ack = c3.connect("k3", keepalive=60)
        assert ack.reason_code == 0x88 and c3.link.closed  # 3.1.1: cannot be told: refused
        c5 = Client(engine, MQTT_5, max_keepalive=30)
        ack = c5.connect("k5", keepalive=60)
        assert ack.reason_code == 0 and ack.properties["server_keep_alive"] == 30

    in_engine(run, go)
