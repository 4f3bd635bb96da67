"""Real python-qpid-proton clients (BlockingConnection, Container handlers) against a real
``waystation run`` process with an AMQP listener."""

from __future__ import annotations

import pytest
from amqpnode import AmqpNode
from proton import Message, Timeout
from proton.utils import BlockingConnection, LinkDetached


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = AmqpNode(tmp_path_factory.mktemp("amqp")).start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    extra = (
        '\n[[permissions]]\nmatch = "ro.#"\nconsume = ["ro", "rw"]\nsend = ["rw"]\n'
        'create_durable_queue = ["rw"]\n'
    )
    n = AmqpNode(tmp_path_factory.mktemp("amqps"), extra_config=extra, secure=True).start()
    yield n
    n.stop()


def test_blocking_client_sends_and_receives_on_a_queue(node):
    c = BlockingConnection(node.url, timeout=5)
    try:
        snd = c.create_sender("/queue/bq")
        for i in range(3):
            snd.send(Message(body=f"m{i}", durable=True, properties={"n": i}))
        rcv = c.create_receiver("/queue/bq", credit=10)
        got = []
        for _ in range(3):
            m = rcv.receive(timeout=5)
            got.append((m.body, m.properties["n"], m.durable))
            rcv.accept()
        assert got == [("m0", 0, True), ("m1", 1, True), ("m2", 2, True)]
    finally:
        c.close()


def test_plain_login_and_wrong_password(secure):
    c = BlockingConnection(secure.url, user="app", password="secret", timeout=5)
    try:
        c.create_sender("/queue/sq").send(Message(body="ok"))
    finally:
        c.close()
    with pytest.raises(Exception) as e:
        BlockingConnection(secure.url, user="app", password="wrong", timeout=5)
    assert "auth" in str(e.value).lower() or "sasl" in str(e.value).lower()


def test_link_errors_detach_only_that_link(secure):
    app = BlockingConnection(secure.url, user="app", password="secret", timeout=5)
    app.create_sender("/queue/ro.q").send(Message(body="for the reader"))
    app.close()
    c = BlockingConnection(secure.url, user="reader", password="r", timeout=5)
    try:
        with pytest.raises(LinkDetached) as e:
            c.create_sender("/queue/ro.q")
        assert "amqp:unauthorized-access" in str(e.value)
        assert "send" in str(e.value)
        with pytest.raises(LinkDetached) as e:
            c.create_receiver("/queue/elsewhere")
        assert "amqp:unauthorized-access" in str(e.value)
        rcv = c.create_receiver("/queue/ro.q", credit=1)  # the connection carries on
        assert rcv.receive(timeout=5).body == "for the reader"
        rcv.accept()
    finally:
        c.close()


def _run(handler, timeout: float = 10.0):
    """Run a Container with ``handler`` until it sets ``finished``; fail if it hangs."""
    import time

    from proton.reactor import Container

    c = Container(handler)
    c.container_id = getattr(handler, "container_id", "test-container")
    deadline = time.monotonic() + timeout
    state = {"late": False}

    class Watch:
        def on_timer_task(self, event):
            if getattr(handler, "finished", False):
                event.container.stop()
            elif time.monotonic() > deadline:
                state["late"] = True
                event.container.stop()
            else:
                event.container.schedule(0.02, self)

    c.schedule(0.02, Watch())
    c.run()
    assert not state["late"], "the container handler did not finish in time"


def test_request_reply_with_a_dynamic_queue_and_the_anonymous_relay(node):
    from proton.handlers import MessagingHandler

    class RequestReply(MessagingHandler):
        def __init__(self):
            super().__init__()
            self.reply = None

        def on_start(self, e):
            conn = e.container.connect(node.url)
            self.relay = e.container.create_sender(conn, None)
            self.service = e.container.create_receiver(conn, "/queue/requests")
            self.replies = e.container.create_receiver(conn, None, dynamic=True)

        def on_link_opened(self, e):
            if e.receiver == self.replies:
                self.reply_to = e.receiver.remote_source.address
                self.relay.send(
                    Message(address="/queue/requests", reply_to=self.reply_to, body="ping", id=7)
                )

        def on_message(self, e):
            if e.receiver == self.service:
                m = e.message
                self.relay.send(Message(address=m.reply_to, body="pong", correlation_id=m.id))
            else:
                self.reply = (e.message.body, e.message.correlation_id)
                e.connection.close()
                self.finished = True

    h = RequestReply()
    _run(h)
    assert h.reply == ("pong", 7)


def test_durable_subscription_resumes_after_reconnect_and_closing_removes_it(node):
    from proton.handlers import MessagingHandler
    from proton.reactor import DurableSubscription

    class Sub(MessagingHandler):
        container_id = "durable-client"

        def __init__(self, then_close: bool):
            super().__init__()
            self.then_close = then_close
            self.got = []

        def on_start(self, e):
            conn = e.container.connect(node.url)
            self.rcv = e.container.create_receiver(
                conn, "/topic/dnews", name="sub1", options=DurableSubscription()
            )
            self.conn = conn

        def on_link_opened(self, e):
            if e.receiver == self.rcv and not self.then_close:
                e.connection.close()  # detached (not closed): the subscription stays
                self.finished = True

        def on_message(self, e):
            self.got.append(e.message.body)
            if self.then_close:
                self.rcv.close()  # closed: the subscription goes

        def on_link_closed(self, e):
            if e.receiver == self.rcv:
                e.connection.close()
                self.finished = True

    _run(Sub(False))
    c = BlockingConnection(node.url, timeout=5)
    c.create_sender("/topic/dnews").send(Message(body="while away"))
    c.close()
    h = Sub(True)
    _run(h)
    assert h.got == ["while away"]
    c = BlockingConnection(node.url, timeout=5)
    c.create_sender("/topic/dnews").send(Message(body="after removal"))
    c.close()

    class Peek(MessagingHandler):
        container_id = "durable-client"
        got = None
        finished = False

        def on_start(self, e):
            self.conn = e.container.connect(node.url)
            e.container.create_receiver(
                self.conn, "/topic/dnews", name="sub1", options=DurableSubscription()
            )
            e.container.schedule(0.5, self)

        def on_timer_task(self, e):
            self.conn.close()
            self.finished = True

        def on_message(self, e):
            self.got = e.message.body

    p = Peek()
    _run(p)
    assert p.got is None  # a new subscription: it never saw "after removal"


def test_transactions_with_protons_container(node):
    from proton.handlers import MessagingHandler, TransactionHandler

    class Tx(MessagingHandler, TransactionHandler):
        def __init__(self):
            super().__init__()
            self.results = []

        def on_start(self, e):
            self.container = e.container
            self.conn = e.container.connect(node.url)
            self.snd = e.container.create_sender(self.conn, "/queue/txq")
            self.round = 0
            e.container.declare_transaction(self.conn, handler=self)

        def on_transaction_declared(self, e):
            t = e.transaction
            t.send(self.snd, Message(body=f"round{self.round}"))
            if self.round == 0:
                t.commit()
            else:
                t.abort()

        def on_transaction_committed(self, e):
            self.results.append("committed")
            self.round = 1
            self.container.declare_transaction(self.conn, handler=self)

        def on_transaction_aborted(self, e):
            self.results.append("aborted")
            self.conn.close()
            self.finished = True

    h = Tx()
    _run(h)
    assert h.results == ["committed", "aborted"]
    c = BlockingConnection(node.url, timeout=5)
    try:
        rcv = c.create_receiver("/queue/txq", credit=10)
        assert rcv.receive(timeout=5).body == "round0"
        rcv.accept()
        with pytest.raises(Timeout):
            rcv.receive(timeout=0.3)
    finally:
        c.close()


def test_typed_message_crosses_amqp_to_stomp_and_back(node):
    import uuid

    from proton import float32, int32, timestamp
    from stompkit import connect

    u = uuid.uuid4()
    props = {"i": int32(5), "f": float32(0.5), "t": timestamp(1700000000000), "u": u, "s": "x"}
    c = BlockingConnection(node.url, timeout=5)
    try:
        c.create_sender("/queue/x.amqp").send(
            Message(body="héllo", properties=props, correlation_id="corr-1", subject="s1")
        )
        conn, got = connect(node.stomp_port)
        try:
            conn.subscribe("/queue/x.amqp", "1", ack="auto")
            (frame,) = got.wait_messages(1)
            h = frame.headers
            assert frame.body == "héllo"  # amqp-value string -> UTF-8 text
            assert h["i"] == "5" and h["s"] == "x" and h["u"] == str(u)
            assert h["correlation-id"] == "corr-1" and h["subject"] == "s1"
            assert "i=int" in h["ws-types"] and "f=float" in h["ws-types"]
            assert "t=timestamp" in h["ws-types"] and "u=uuid" in h["ws-types"]
            # a STOMP client relays it (typed headers as they came) to where AMQP reads;
            # the AMQP mapping's own annotations are private: STOMP shows none of them
            assert not [k for k in h if k.startswith("_WS_")]
            relay = {
                k: v
                for k, v in h.items()
                if k not in ("destination", "message-id", "subscription", "ack")
            }
            conn.send("/queue/x.back", frame.body, headers=relay)
        finally:
            conn.disconnect()
        rcv = c.create_receiver("/queue/x.back", credit=1)
        m = rcv.receive(timeout=5)
        rcv.accept()
        for k, v in props.items():
            assert m.properties[k] == v and type(m.properties[k]) is type(v), k
        assert (m.correlation_id, m.subject) == ("corr-1", "s1")
        assert bytes(m.body) == "héllo".encode()  # from STOMP: a data section
    finally:
        c.close()
