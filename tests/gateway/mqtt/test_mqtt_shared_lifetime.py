"""A shared subscription's queue goes when its last member leaves, unless a persistent
session that subscribed it will come back for what queued meanwhile."""

from __future__ import annotations

from mqtt_inproc_kit import MQTT_5, MQTT_311, Client, in_engine, settle

from waystation.wire.mqtt import (
    Disconnect,
    Publish,
    Subscribe,
    SubscriptionRequest,
    Unsubscribe,
)

SHARED = "$share/g/jobs/+"


def group_queues(engine) -> list[str]:
    return [q for q in engine.post.queues if q.startswith("shared.")]


async def join(c: Client) -> None:
    c.send(Subscribe(1, [SubscriptionRequest(SHARED, 1)]))
    await settle()
    c.recv()


async def publish(engine, body: bytes) -> None:
    p = Client(engine)
    p.connect("pub")
    p.send(Publish("jobs/x", body, 1, packet_id=1))
    await settle()
    p.send(Disconnect())


def test_last_member_out_removes_the_queue(run):
    async def go(engine):
        a, b = Client(engine), Client(engine)
        a.connect("a")
        b.connect("b")
        await join(a)
        await join(b)
        assert len(group_queues(engine)) == 1
        a.send(Disconnect())  # a member leaves: the group goes on
        await settle()
        assert len(group_queues(engine)) == 1
        await publish(engine, b"for b")
        await settle()
        assert [m.payload for m in b.recv()] == [b"for b"]
        b.send(Unsubscribe(2, [SHARED]))  # the last member: the queue goes
        await settle()
        assert group_queues(engine) == []
        await publish(engine, b"nobody")  # and nothing piles up for nobody
        c = Client(engine)
        c.connect("c")
        await join(c)
        await settle()
        assert c.recv() == []

    in_engine(run, go)


def test_a_lost_connection_of_the_last_member_removes_it_too(run):
    async def go(engine):
        a = Client(engine, MQTT_311)
        a.connect("a")
        await join(a)
        assert len(group_queues(engine)) == 1
        a.server.connection_lost()
        await settle()
        assert group_queues(engine) == []

    in_engine(run, go)


def test_a_persistent_member_keeps_the_queue_until_its_session_ends(run):
    async def go(engine):
        keep = {"session_expiry_interval": 60}
        p = Client(engine, MQTT_5)
        p.connect("p", clean_start=False, properties=keep)
        await join(p)
        n = Client(engine)
        n.connect("n")
        await join(n)
        p.server.connection_lost()  # away, coming back
        n.send(Disconnect())  # the last member connected, not the last member
        await settle()
        assert len(group_queues(engine)) == 1
        await publish(engine, b"while away")
        back = Client(engine, MQTT_5)
        ack = back.connect("p", clean_start=False, properties=keep)
        assert ack.session_present
        await settle()
        assert [m.payload for m in back.pending + back.recv()] == [b"while away"]
        back.server.connection_lost()
        again = Client(engine, MQTT_5)
        again.connect("p", clean_start=True)  # the saved session is discarded: so is the group
        await settle()
        assert group_queues(engine) == []

    in_engine(run, go)
