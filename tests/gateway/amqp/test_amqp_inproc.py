"""The AMQP session's state machine in process: a proton engine client, a fake link, an
engine without sockets."""

from __future__ import annotations

import pytest
from amqpkit import Client, in_engine
from proton import Delivery, Endpoint, Message

from waystation.gateway.amqp.session import AmqpOptions


def test_anonymous_send_and_receive_on_a_queue(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        snd = c.sender("/queue/q")
        await c.pump()
        assert c.server.connected
        assert snd.state & Endpoint.REMOTE_ACTIVE
        assert snd.credit > 0
        dlv = c.send(snd, Message(body="hello", properties={"k": 1}))
        await c.pump()
        assert dlv.remote_state == Delivery.ACCEPTED
        rcv = c.receiver("/queue/q")
        rcv.flow(10)
        await c.pump()
        got = c.received(rcv)
        assert [m.body for _, m in got] == ["hello"]
        assert got[0][1].properties == {"k": 1}

    in_engine(run, go)


def _secure(engine, **extra):
    from waystation.core.security import Permission, SecurityManager, User

    perms = {
        "#": {
            p: frozenset({"rw"})
            for p in (
                Permission.SEND,
                Permission.CONSUME,
                Permission.CREATE_DURABLE_QUEUE,
                Permission.CREATE_NON_DURABLE_QUEUE,
                Permission.DELETE_DURABLE_QUEUE,
            )
        }
    }
    engine.security = SecurityManager(
        enabled=True,
        users={
            "app": User("app", lambda p: p == "secret", frozenset({"rw"})),
            "ro": User("ro", lambda p: p == "r", frozenset({"ro"})),
        },
        permissions=perms,
        **extra,
    )


def test_plain_login_with_the_right_password_opens_the_connection(run):
    async def go(engine):
        _secure(engine)
        c = Client(engine, user="app", password="secret")
        c.open()
        snd = c.sender("/queue/q")
        await c.pump()
        assert c.server.connected
        assert c.server.session.principal.name == "app"
        dlv = c.send(snd, Message(body="x"))
        await c.pump()
        assert dlv.remote_state == Delivery.ACCEPTED
        # the user id is the authenticated user's
        rcv = c.receiver("/queue/q")
        rcv.flow(1)
        await c.pump()
        ((_, m),) = c.received(rcv)
        assert m.user_id == b"app"

    in_engine(run, go)


def test_wrong_password_fails_sasl_and_closes(run):
    async def go(engine):
        _secure(engine)
        c = Client(engine, user="app", password="nope")
        c.open()
        await c.pump()
        assert c.link.closed
        assert not c.server.connected
        assert c.transport.sasl().outcome == 1  # auth

    in_engine(run, go)


def test_anonymous_is_refused_while_security_is_on(run):
    async def go(engine):
        _secure(engine)
        c = Client(engine)
        c.open()
        await c.pump()
        assert not c.server.connected
        assert c.transport.condition is not None  # proton found no common mechanism
        # a client that insists on ANONYMOUS gets outcome auth (1) and the door
        from waystation.gateway.amqp.codec import encode_symbol
        from waystation.gateway.amqp.sasl import INIT, SASL_HEADER, frame

        c2 = Client(engine)
        c2.server.data_received(SASL_HEADER + frame(INIT, [encode_symbol("ANONYMOUS")]))
        await c2.pump(2)
        assert c2.link.closed
        assert not c2.server.connected

    in_engine(run, go)


def test_no_sasl_at_all_is_accepted_only_while_security_is_off(run):
    async def go(engine):
        c = Client(engine, sasl=False)
        c.open()
        snd = c.sender("/queue/q")
        await c.pump()
        assert c.server.connected
        dlv = c.send(snd, Message(body="x"))
        await c.pump()
        assert dlv.remote_state == Delivery.ACCEPTED
        _secure(engine)
        c2 = Client(engine, sasl=False)
        c2.open()
        await c2.pump()
        assert c2.link.closed and not c2.server.connected

    in_engine(run, go)


def test_not_authorized_target_detaches_only_that_link(run):
    async def go(engine):
        _secure(engine)
        c = Client(engine, user="ro", password="r")
        c.open()
        bad = c.sender("/queue/q", name="bad")
        await c.pump()
        assert bad.state & Endpoint.REMOTE_CLOSED
        assert bad.remote_condition.name == "amqp:unauthorized-access"
        assert "send" in bad.remote_condition.description.lower()
        assert c.conn.state & Endpoint.REMOTE_ACTIVE  # the connection lives on
        ok = c.receiver("/queue/other", name="also-bad")
        await c.pump()
        assert ok.remote_condition.name == "amqp:unauthorized-access"
        assert c.conn.state & Endpoint.REMOTE_ACTIVE

    in_engine(run, go)


def test_unknown_queue_without_auto_create_is_not_found(run):
    async def go(engine):
        from waystation.core.settings import AddressSettings

        engine.settings.set(
            "strict.#", AddressSettings(auto_create_queues=False, auto_create_addresses=False)
        )
        c = Client(engine)
        c.open()
        snd = c.sender("/queue/strict.q")
        rcv = c.receiver("/queue/strict.q")
        await c.pump()
        assert snd.remote_condition.name == "amqp:not-found"
        assert rcv.remote_condition.name == "amqp:not-found"
        assert "strict.q" in rcv.remote_condition.description

    in_engine(run, go)


async def _drain_queue(c, address, n=10, name="drain"):
    rcv = c.receiver(address, name=name)
    rcv.flow(n)
    await c.pump()
    got = c.received(rcv)
    for d, _ in got:
        d.update(Delivery.ACCEPTED)
        d.settle()
    await c.pump()
    return rcv, [m for _, m in got]


def test_anonymous_relay_routes_by_each_messages_to(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        await c.pump()
        assert "ANONYMOUS-RELAY" in [str(x) for x in c.conn.remote_offered_capabilities]
        relay = c.sender(None, name="relay")
        await c.pump()
        assert relay.state & Endpoint.REMOTE_ACTIVE
        d1 = c.send(relay, Message(address="/queue/a", body="to a"), tag="1")
        d2 = c.send(relay, Message(address="b", body="to b"), tag="2")
        d3 = c.send(relay, Message(body="nowhere"), tag="3")
        await c.pump()
        assert d1.remote_state == d2.remote_state == Delivery.ACCEPTED
        assert d3.remote_state == Delivery.REJECTED
        assert d3.remote.condition.name == "amqp:decode-error"
        assert "'to'" in d3.remote.condition.description
        assert relay.state & Endpoint.REMOTE_ACTIVE  # a bad message does not cost the link
        _, a = await _drain_queue(c, "/queue/a", name="ra")
        _, b = await _drain_queue(c, "/queue/b", name="rb")
        assert [m.body for m in a] == ["to a"] and a[0].address == "/queue/a"
        assert [m.body for m in b] == ["to b"]

    in_engine(run, go)


def test_presettled_sends_are_routed_without_a_disposition(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        snd = c.sender("/queue/p", presettled=True)
        await c.pump()
        for i in range(5):
            c.send(snd, Message(body=f"m{i}"), tag=str(i), settle=True)
        await c.pump()
        _, got = await _drain_queue(c, "/queue/p")
        assert [m.body for m in got] == [f"m{i}" for i in range(5)]

    in_engine(run, go)


def test_garbage_payload_is_rejected_with_decode_error_and_the_link_lives(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        snd = c.sender("/queue/g")
        await c.pump()
        dlv = snd.delivery("bad")
        snd.send(b"\x00\x53\x77\xa1\x05ab")  # a string that claims 5 bytes and has 2
        snd.advance()
        await c.pump()
        assert dlv.remote_state == Delivery.REJECTED
        assert dlv.remote.condition.name == "amqp:decode-error"
        assert "truncated" in dlv.remote.condition.description
        ok = c.send(snd, Message(body="fine"), tag="good")
        await c.pump()
        assert ok.remote_state == Delivery.ACCEPTED

    in_engine(run, go)


def test_credit_is_consumed_per_delivery_and_more_credit_sends_more(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        snd = c.sender("/queue/cr")
        await c.pump()
        for i in range(5):
            c.send(snd, Message(body=str(i)), tag=str(i))
        await c.pump()
        rcv = c.receiver("/queue/cr")
        rcv.flow(2)
        await c.pump()
        got = c.received(rcv)
        assert [m.body for _, m in got] == ["0", "1"]
        assert rcv.credit == 0
        rcv.flow(2)
        await c.pump()
        assert [m.body for _, m in c.received(rcv)] == ["2", "3"]

    in_engine(run, go)


def test_drain_uses_what_there_is_and_gives_back_the_rest(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        snd = c.sender("/queue/dr")
        await c.pump()
        c.send(snd, Message(body="only"))
        await c.pump()
        rcv = c.receiver("/queue/dr")
        rcv.drain(10)
        await c.pump()
        assert [m.body for _, m in c.received(rcv)] == ["only"]
        assert rcv.credit == 0
        assert not rcv.draining()  # the node echoed the drain

    in_engine(run, go)


def test_outcomes_map_onto_the_core(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        snd = c.sender("/queue/o")
        await c.pump()
        for i in range(4):
            c.send(snd, Message(body=str(i)), tag=str(i))
        await c.pump()
        rcv = c.receiver("/queue/o")
        rcv.flow(4)
        await c.pump()
        got = c.received(rcv)
        assert [m.delivery_count for _, m in got] == [0, 0, 0, 0]
        assert all(m.first_acquirer for _, m in got)
        (d0, _), (d1, _), (d2, _), (d3, _) = got
        d0.update(Delivery.ACCEPTED)
        d0.settle()
        d1.update(Delivery.RELEASED)  # back, no attempt counted
        d1.settle()
        d2.local.failed = True  # modified, delivery-failed: attempt counted
        d2.update(Delivery.MODIFIED)
        d2.settle()
        from proton import Condition

        d3.local.condition = Condition("app:bad", "cannot parse")
        d3.update(Delivery.REJECTED)  # dead-lettered
        d3.settle()
        await c.pump()
        rcv.flow(10)
        await c.pump()
        again = {m.body: m for _, m in c.received(rcv)}
        assert set(again) == {"1", "2"}
        assert again["1"].delivery_count == 0 and again["1"].first_acquirer
        assert again["2"].delivery_count == 1 and not again["2"].first_acquirer

    in_engine(run, go)


def _filtered_receiver(c, address, name, selector=None, no_local=False, caps=None, durable=False):
    from proton import Described, Terminus, symbol, ulong

    rcv = c.ssn.receiver(name)
    src = rcv.source
    src.address = address
    f = {}
    if selector is not None:
        f[symbol("selector")] = Described(symbol("apache.org:selector-filter:string"), selector)
    if no_local:
        f[symbol("no-local")] = Described(ulong(0x0000468C00000003), [])
    if f:
        src.filter.put_dict(f)
    if caps:
        src.capabilities.put_object([symbol(x) for x in caps])
    if durable:
        src.durability = Terminus.DELIVERIES
        src.expiry_policy = Terminus.EXPIRE_NEVER
    rcv.target.address = name
    rcv.open()
    return rcv


def test_selector_filter_and_topic_capability(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        red = _filtered_receiver(c, "colours", "red", selector="colour = 'red'", caps=["topic"])
        red.flow(10)
        snd = c.sender("/topic/colours")
        await c.pump()
        assert red.state & Endpoint.REMOTE_ACTIVE
        for colour in ("red", "blue", "red"):
            c.send(snd, Message(body=colour, properties={"colour": colour}), tag=colour)
        await c.pump()
        assert [m.body for _, m in c.received(red)] == ["red", "red"]
        bad = _filtered_receiver(c, "/topic/colours", "bad", selector="colour = ")
        await c.pump()
        assert bad.remote_condition.name == "amqp:invalid-field"
        assert "selector" in bad.remote_condition.description

    in_engine(run, go)


def test_no_local_skips_the_connections_own_messages(run):
    async def go(engine):
        a, b = Client(engine, container="a"), Client(engine, container="b")
        a.open()
        b.open()
        mine = _filtered_receiver(a, "/topic/chat", "mine", no_local=True)
        mine.flow(10)
        sa = a.sender("/topic/chat")
        sb = b.sender("/topic/chat")
        await a.pump()
        await b.pump()
        a.send(sa, Message(body="from a"), tag="a")
        b.send(sb, Message(body="from b"), tag="b")
        await a.pump()
        await b.pump()
        await a.pump()
        assert [m.body for _, m in a.received(mine)] == ["from b"]

    in_engine(run, go)


def test_dynamic_source_is_a_temporary_queue_for_replies(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        rcv = c.ssn.receiver("replies")
        rcv.source.dynamic = True
        rcv.open()
        rcv.flow(5)
        await c.pump()
        name = rcv.remote_source.address
        assert name and rcv.remote_source.dynamic
        snd = c.sender(None, name="relay")
        await c.pump()
        c.send(snd, Message(address=name, body="reply"))
        await c.pump()
        assert [m.body for _, m in c.received(rcv)] == ["reply"]
        rcv.close()
        await c.pump()
        assert engine.queue(name) is None  # gone with its link

    in_engine(run, go)


def test_durable_subscription_survives_detach_and_goes_on_close(run):
    async def go(engine):
        c = Client(engine, container="jms-1")
        c.open()
        sub = _filtered_receiver(c, "/topic/news", "sub1", durable=True)
        snd = c.sender("/topic/news")
        await c.pump()
        assert sub.state & Endpoint.REMOTE_ACTIVE
        sub.detach()  # closed=false: the subscription stays
        await c.pump()
        c.send(snd, Message(body="while away"), tag="1")
        await c.pump()
        qname = c.server.session.durable_queue_name("sub1")
        assert qname.startswith("jms-1") and engine.queue(qname) is not None
        # reattach by name with a null source: the lookup JMS clients do
        again = c.ssn.receiver("sub1")
        again.target.address = "sub1"
        again.open()
        again.flow(5)
        await c.pump()
        assert again.state & Endpoint.REMOTE_ACTIVE
        assert [m.body for _, m in c.received(again)] == ["while away"]
        again.close()  # closed=true: the subscription goes
        await c.pump()
        assert engine.queue(qname) is None
        missing = c.ssn.receiver("sub1")
        missing.target.address = "sub1"
        missing.open()
        await c.pump()
        assert missing.remote_condition.name == "amqp:not-found"

    in_engine(run, go)


def test_typed_properties_fields_and_body_round_trip(run):
    async def go(engine):
        import uuid

        from proton import byte, char, float32, int32, short, symbol, timestamp, ubyte, uint, ulong

        c = Client(engine)
        c.open()
        snd = c.sender("/queue/types")
        await c.pump()
        u = uuid.uuid4()
        props = {
            "i": int32(7),
            "l": 2**40,
            "f": float32(1.5),
            "d": 2.25,
            "s": "text",
            "b": b"\x00\xff",
            "t": timestamp(1700000000000),
            "u": u,
            "n": None,
            "yes": True,
            "ub": ubyte(200),
            "sh": short(-3),
            "by": byte(-1),
            "ui": uint(4000000000),
            "ul": ulong(2**63 + 5),
            "sym": symbol("a-symbol"),
            "ch": char("x"),
        }
        m = Message(
            id=ulong(42),
            correlation_id=u,
            subject="subj",
            reply_to="/queue/replies",
            content_type="text/plain",
            content_encoding="utf-8",
            group_id="g1",
            group_sequence=3,
            reply_to_group_id="rg",
            creation_time=1700000000.5,
            durable=True,
            priority=7,
            body={"a": [1, 2]},
            properties=props,
            annotations={symbol("x-opt-custom"): "ann"},
        )
        c.send(snd, m)
        await c.pump()
        stored = engine.queue("types").depth
        assert stored == 1
        _, (got,) = await _drain_queue(c, "/queue/types")
        for k, v in props.items():
            g = got.properties[k]
            g = bytes(g) if isinstance(g, memoryview) else g  # proton reads binary so
            assert g == v and type(g) is type(v), k
        assert got.id == 42  # sent as a ulong (proton reads ids back as int)
        assert got.correlation_id == u
        assert (got.subject, got.reply_to, got.content_type, got.content_encoding) == (
            "subj",
            "/queue/replies",
            "text/plain",
            "utf-8",
        )
        assert (got.group_id, got.group_sequence, got.reply_to_group_id) == ("g1", 3, "rg")
        assert got.creation_time == 1700000000.5
        assert got.durable and got.priority == 7
        assert got.body == {"a": [1, 2]}
        assert got.annotations == {symbol("x-opt-custom"): "ann"}

    in_engine(run, go)


async def _declare(c, coord, tag):
    from proton import Described, ulong

    d = c.send(coord, Message(body=Described(ulong(0x31), [])), tag=tag)
    await c.pump()
    assert d.remote_state == 0x33, d.remote_state
    return d.remote.data[0]


async def _discharge(c, coord, txn, fail, tag):
    from proton import Described, ulong

    d = c.send(coord, Message(body=Described(ulong(0x32), [txn, fail])), tag=tag)
    await c.pump()
    return d


def _coordinator(c):
    from proton import Terminus, symbol

    coord = c.ssn.sender("coordinator")
    coord.target.type = Terminus.COORDINATOR
    coord.target.capabilities.put_object(symbol("amqp:local-transactions"))
    coord.open()
    return coord


def test_transactional_sends_appear_on_commit_and_vanish_on_rollback(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        coord = _coordinator(c)
        snd = c.sender("/queue/tx")
        await c.pump()
        assert coord.state & Endpoint.REMOTE_ACTIVE
        for fail, body in ((False, "kept"), (True, "dropped")):
            txn = await _declare(c, coord, f"declare-{body}")
            d = snd.delivery(body)
            snd.send(Message(body=body).encode())
            d.local.data = [txn]
            d.update(0x34)
            snd.advance()
            await c.pump()
            assert d.remote_state == 0x34
            q = engine.queue("tx")
            assert (q.depth if q else 0) == (0 if body == "kept" else 1)  # not before discharge
            dis = await _discharge(c, coord, txn, fail, f"discharge-{body}")
            assert dis.remote_state == Delivery.ACCEPTED
        _, got = await _drain_queue(c, "/queue/tx")
        assert [m.body for m in got] == ["kept"]
        bad = await _discharge(c, coord, b"no-such-txn", False, "bad")
        assert bad.remote_state == Delivery.REJECTED
        assert bad.remote.condition.name == "amqp:transaction:unknown-id"

    in_engine(run, go)


def test_transactional_acknowledgements(run):
    async def go(engine):
        from proton import Described, ulong

        c = Client(engine)
        c.open()
        coord = _coordinator(c)
        snd = c.sender("/queue/txa")
        await c.pump()
        c.send(snd, Message(body="one"), tag="1")
        await c.pump()
        rcv = c.receiver("/queue/txa")
        rcv.flow(1)
        await c.pump()
        ((d, _),) = c.received(rcv)
        txn = await _declare(c, coord, "d1")
        d.local.data = [txn, Described(ulong(0x24), [])]
        d.update(0x34)
        await c.pump()
        await _discharge(c, coord, txn, True, "rollback")  # the ack is undone
        rcv.flow(1)
        await c.pump()
        ((d2, m2),) = c.received(rcv)
        assert m2.body == "one"
        txn2 = await _declare(c, coord, "d2")
        d2.local.data = [txn2, Described(ulong(0x24), [])]
        d2.update(0x34)
        await c.pump()
        await _discharge(c, coord, txn2, False, "commit")
        rcv.flow(1)
        await c.pump()
        assert c.received(rcv) == []
        rcv.close()
        await c.pump()
        rcv2 = c.receiver("/queue/txa", name="again")
        rcv2.flow(1)
        await c.pump()
        assert c.received(rcv2) == []  # acknowledged for good

    in_engine(run, go)


def test_credit_is_withheld_while_the_address_is_blocked(run):
    async def go(engine):
        from waystation.core.settings import AddressSettings, FullPolicy

        engine.settings.set(
            "blk.#", AddressSettings(max_size_bytes=1024, full_policy=FullPolicy.BLOCK)
        )
        from waystation.gateway.amqp.session import AmqpOptions

        c = Client(engine, options=AmqpOptions(idle_timeout=0, credit_window=100))
        c.open()
        snd = c.sender("/queue/blk.q")
        await c.pump()
        start = snd.credit
        for i in range(start // 2 + 5):
            c.send(snd, Message(body="x" * 200), tag=str(i))
        await c.pump()
        assert engine.queue("blk.q").depth > 5  # over the limit: blocked
        assert snd.credit < start // 2  # and no new credit came
        withheld = snd.credit
        rcv = c.receiver("/queue/blk.q")
        rcv.flow(1000)
        await c.pump()
        for d, _ in c.received(rcv):
            d.update(Delivery.ACCEPTED)
            d.settle()
        await c.pump()
        await c.pump()
        assert engine.queue("blk.q").depth == 0
        assert snd.credit > withheld  # unblocked: credit again

    in_engine(run, go)


def test_pause_writing_stops_deliveries_until_resumed(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        snd = c.sender("/queue/pw")
        rcv = c.receiver("/queue/pw")
        rcv.flow(10)
        await c.pump()
        c.server.pause_writing()
        c.send(snd, Message(body="held"))
        await c.pump()
        assert c.received(rcv) == []
        c.server.resume_writing()
        await c.pump()
        assert [m.body for _, m in c.received(rcv)] == ["held"]

    in_engine(run, go)


def test_oversized_message_detaches_the_link_with_message_size_exceeded(run):
    async def go(engine):
        from waystation.gateway.amqp.session import AmqpOptions

        c = Client(engine, options=AmqpOptions(idle_timeout=0, max_message_size=1000))
        c.open()
        snd = c.sender("/queue/big")
        other = c.sender("/queue/small", name="other")
        await c.pump()
        c.send(snd, Message(body="x" * 200_000))
        await c.pump()
        assert snd.remote_condition.name == "amqp:link:message-size-exceeded"
        d = c.send(other, Message(body="fits"))
        await c.pump()
        assert d.remote_state == Delivery.ACCEPTED

    in_engine(run, go)


def test_client_close_releases_everything(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        snd = c.sender("/queue/cl")
        await c.pump()
        c.send(snd, Message(body="a"))
        await c.pump()
        rcv = c.receiver("/queue/cl")
        rcv.flow(1)
        await c.pump()
        assert len(c.received(rcv)) == 1  # in flight, not settled
        c.conn.close()
        await c.pump()
        assert c.link.closed and c.server.closed
        assert not engine.sessions
        assert engine.queue("cl").depth == 1  # the unsettled one went back

    in_engine(run, go)


def test_connection_lost_mid_stream_is_quiet(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        rcv = c.receiver("/queue/lost")
        rcv.flow(5)
        await c.pump()
        c.server.connection_lost()
        assert not engine.sessions
        c.server.data_received(b"\x00\x00\x00\x08\x02\x00\x00\x00")  # ignored after the loss
        await c.pump()

    in_engine(run, go)


def test_a_silent_peer_is_dropped_after_the_idle_timeout(run):
    async def go(engine):
        import asyncio

        from waystation.gateway.amqp.session import AmqpOptions

        c = Client(engine, options=AmqpOptions(idle_timeout=0.2))
        c.open()
        await c.pump()
        assert c.server.connected
        for _ in range(30):  # the client never ticks, so it says nothing
            await asyncio.sleep(0.05)
            await c.pump(2)
            if c.link.closed:
                break
        assert c.link.closed and c.server.closed
        assert not engine.sessions

    in_engine(run, go)


def test_fail_closes_with_a_condition_and_refusal_is_a_sasl_outcome(run):
    async def go(engine):
        from waystation.gateway.amqp import ADAPTER

        c = Client(engine)
        c.open()
        await c.pump()
        c.server.fail("connect_timeout", "took too long")
        await c.pump()
        assert c.conn.remote_condition.name == "amqp:connection:forced"
        assert "connect_timeout" in c.conn.remote_condition.description
        assert c.link.closed
        refusal = ADAPTER.refusal("max_connections")
        assert refusal.startswith(b"AMQP\x03\x01\x00\x00") and refusal.endswith(b"\x50\x04")

    in_engine(run, go)


def test_the_open_offers_max_sessions_and_no_session_past_it_is_begun(run):
    async def go(engine):
        c = Client(engine, options=AmqpOptions(idle_timeout=0, max_sessions=2))
        c.open()
        await c.pump()
        assert c.transport.remote_channel_max == 1  # channels 0 and 1
        extra = [c.conn.session() for _ in range(2)]  # three in all
        for s in extra:
            s.open()
        await c.pump()
        active = [s for s in (c.ssn, *extra) if s.state & Endpoint.REMOTE_ACTIVE]
        assert len(active) == 2  # the third never begins: no channel is left for it

    in_engine(run, go)


def test_an_aborted_transfer_is_dropped_and_the_link_carries_on(run):
    async def go(engine):
        c = Client(engine)
        c.open()
        snd = c.sender("/queue/ab")
        await c.pump()
        before = c.send(snd, Message(body="before"), tag="1")
        dlv = snd.delivery("2")
        snd.send(Message(body="never").encode()[:5])  # a first frame on the wire ...
        await c.pump()
        dlv.abort()  # ... then the abort
        await c.pump()
        after = c.send(snd, Message(body="after"), tag="3")
        await c.pump()
        assert before.remote_state == after.remote_state == Delivery.ACCEPTED
        _, got = await _drain_queue(c, "/queue/ab")
        assert [m.body for m in got] == ["before", "after"]
        assert not c.link.closed

    in_engine(run, go)


@pytest.mark.parametrize("window", [1, 10])
def test_producer_credit_is_topped_up_window_after_window(run, window):
    async def go(engine):
        c = Client(engine, options=AmqpOptions(idle_timeout=0, credit_window=window))
        c.open()
        snd = c.sender("/queue/cw", presettled=True)
        await c.pump()
        assert snd.credit == window
        sent = 0
        for _ in range(120):  # the client sends all its credit allows, round after round
            while snd.credit > 0 and sent < 95:
                c.send(snd, Message(body=f"m{sent}"), tag=str(sent), settle=True)
                sent += 1
            await c.pump()
            assert snd.credit * 2 >= window  # topped up to the window once under half of it
            if sent == 95:
                break
        assert sent == 95
        assert engine.queue("cw").depth == 95

    in_engine(run, go)
