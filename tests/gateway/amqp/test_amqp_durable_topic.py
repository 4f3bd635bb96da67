"""Durable topic subscriptions the AMQP/JMS way, with python-qpid-proton against a real node:
a receiver with a durable source (``configuration`` or ``unsettled-state``) and expiry
``never`` on a topic is a subscription named by its container id and link name.  Detach
with ``closed = false``, a lost connection and a node restart keep it (messages collect);
re-attaching the same container id and link name resumes it; detach with ``closed = true``
(JMS unsubscribe: attach, then close) deletes it."""

from __future__ import annotations

import pytest
from amqpnode import AmqpNode, run_container
from proton import Message, Terminus
from proton.handlers import MessagingHandler
from proton.reactor import LinkOption
from proton.utils import BlockingConnection

N = 5


class Durable(LinkOption):
    """A durable source (the given durability) that never expires."""

    def __init__(self, durability: int = Terminus.DELIVERIES) -> None:
        self.durability = durability

    def apply(self, link) -> None:
        link.source.durability = self.durability
        link.source.expiry_policy = Terminus.EXPIRE_NEVER


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = AmqpNode(tmp_path_factory.mktemp("amqp-dts")).start()
    yield n
    n.stop()


def _publish(node: AmqpNode, topic: str, bodies: list[str]) -> None:
    c = BlockingConnection(node.url, timeout=5)
    try:
        snd = c.create_sender(topic)
        for b in bodies:
            snd.send(Message(body=b, durable=True))
    finally:
        c.close()


class Subscriber(MessagingHandler):
    """Attaches ``name`` on ``topic`` durably, then: ``leave`` = "detach" (closed=false),
    "close" (closed=true: unsubscribe) or "drop" (the connection lost, no close frame)
    once ``expect`` messages arrived (0: at once).  With ``reattach`` (a number of
    messages), ``publish`` runs while it is detached, then it re-attaches on the same
    connection and closes the link once that many arrived."""

    def __init__(
        self,
        container_id: str,
        topic: str | None,
        name: str,
        durability: int = Terminus.DELIVERIES,
        expect: int = 0,
        leave: str = "detach",
        reattach: int = 0,
        publish=None,
    ) -> None:
        super().__init__()
        self.container_id = container_id
        self.topic = topic
        self.name = name
        self.option = Durable(durability)
        self.expect = expect
        self.leave = leave
        self.reattach = reattach
        self.publish = publish
        self.got: list[object] = []
        self.conditions: list[object] = []
        self.attached = 0

    def on_start(self, e):
        self.conn = e.container.connect(self.node_url, reconnect=False)
        self._attach(e.container)

    def _attach(self, container) -> None:
        self.rcv = container.create_receiver(
            self.conn, self.topic, name=self.name, options=self.option
        )

    def on_link_opened(self, e):
        self.attached += 1
        if self.attached == 1 and not self.expect:
            self._leave(e)

    def on_message(self, e):
        self.got.append(e.message.body)
        if len(self.got) == self.expect:
            self._leave(e)

    def _leave(self, e) -> None:
        if self.leave == "drop":  # no detach, no close: the socket just goes
            t = e.connection.transport
            t.close_head()
            t.close_tail()
            self.finished = True
        elif self.leave == "close":
            self.rcv.close()
        else:
            self.rcv.detach()

    def on_link_remote_detach(self, e):  # closed = false answered
        if self.reattach:
            self.expect, self.reattach = self.reattach, 0
            if self.publish is not None:
                self.publish()
            self.leave = "close"  # resumed, then unsubscribed
            self._attach(e.container)
            return
        e.connection.close()
        self.finished = True

    def on_link_remote_close(self, e):
        cond = e.link.remote_condition
        self.conditions.append(cond.name if cond is not None else None)
        e.connection.close()
        self.finished = True


def _run(node: AmqpNode, **kw) -> Subscriber:
    h = Subscriber(**kw)
    h.node_url = node.url
    run_container(h, timeout=10)
    return h


@pytest.mark.parametrize(
    "durability", [Terminus.CONFIGURATION, Terminus.DELIVERIES], ids=["config", "unsettled"]
)
def test_detached_subscription_keeps_what_was_published_and_resumes(node, durability):
    topic = f"/topic/dts-{durability}"
    cid = f"dts-client-{durability}"
    bodies = [f"away-{i}" for i in range(N)]
    h = _run(
        node,
        container_id=cid,
        topic=topic,
        name="news",
        durability=durability,
        reattach=N,
        publish=lambda: _publish(node, topic, bodies),
    )
    # detached (closed=false), N published, re-attached on the same connection: all N,
    # then closed (closed=true)
    assert h.attached == 2 and h.got == bodies and h.conditions == [None]

    # unsubscribed: what is published now is kept for nobody, and a lookup by the link
    # name (a null source, as JMS clients do) finds no subscription
    _publish(node, topic, ["after-unsubscribe"])
    look = _run(node, container_id=cid, topic=None, name="news", durability=durability)
    assert look.conditions == ["amqp:not-found"]


def test_another_container_id_is_another_subscription(node):
    topic = "/topic/dts-scope"
    _run(node, container_id="scope-a", topic=topic, name="same-name")
    _publish(node, topic, ["for-a"])
    b = _run(node, container_id="scope-b", topic=None, name="same-name")
    assert b.conditions == ["amqp:not-found"]  # b never subscribed
    a = _run(node, container_id="scope-a", topic=topic, name="same-name", expect=1, leave="close")
    assert a.got == ["for-a"] and a.conditions == [None]


def test_subscription_survives_a_lost_connection_and_a_node_restart(node):
    topic = "/topic/dts-restart"
    cid = "dts-restart-client"
    h = _run(node, container_id=cid, topic=topic, name="keep", leave="drop")
    assert h.attached == 1
    bodies = [f"kept-{i}" for i in range(N)]
    _publish(node, topic, bodies)
    node.stop()
    node.start()
    # resumed by container id and link name (a null source: the JMS lookup), then removed
    again = _run(node, container_id=cid, topic=None, name="keep", expect=N, leave="close")
    assert again.got == bodies and again.conditions == [None]
    gone = _run(node, container_id=cid, topic=None, name="keep")
    assert gone.conditions == ["amqp:not-found"]
