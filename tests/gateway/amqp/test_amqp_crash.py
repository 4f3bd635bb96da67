"""``kill -9`` over AMQP: every message the node settled as ``accepted`` (durable) is there
exactly once after a restart, and nothing appears that was never sent."""

from __future__ import annotations

import threading
import time

from amqpnode import AmqpNode
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection


class Producer(MessagingHandler):
    """Sends durable messages as fast as credit allows, many unsettled at once."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.sent: list[int] = []
        self.accepted: list[int] = []
        self.n = 0

    def on_start(self, e):
        e.container.create_sender(e.container.connect(self.url, reconnect=False), "/queue/k9")

    def on_sendable(self, e):
        while e.sender.credit and self.n < 8000:
            dlv = e.sender.send(Message(body=f"m{self.n}", durable=True, id=self.n))
            dlv.n = self.n
            self.sent.append(self.n)
            self.n += 1

    def on_accepted(self, e):
        self.accepted.append(e.delivery.n)

    def on_transport_error(self, e):
        e.container.stop()

    def on_disconnected(self, e):
        e.container.stop()


def test_kill9_loses_no_accepted_message_and_invents_none(tmp_path):
    node = AmqpNode(tmp_path / "n").start()
    p = Producer(node.url)
    t = threading.Thread(target=Container(p).run, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while len(p.accepted) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    node.kill9()
    t.join(10)
    assert len(p.accepted) >= 300
    assert len(p.sent) > len(p.accepted)  # some were in flight when the node died
    node.start()
    try:
        c = BlockingConnection(node.url, timeout=10)
        rcv = c.create_receiver("/queue/k9", credit=1000)
        got: list[int] = []
        while True:
            try:
                m = rcv.receive(timeout=0.5)
            except Exception:
                break
            got.append(m.id)
            rcv.accept()
        c.close()
    finally:
        node.stop()
    assert len(got) == len(set(got)), "a message arrived twice"
    assert set(p.accepted) <= set(got), "an accepted message was lost"
    assert set(got) <= set(p.sent), "a message appeared that was never sent"
    assert got == sorted(got)  # in order
