"""Transactions as python-qpid-proton's examples use them, against a real node: each
transactional transfer (and each transactional accept) is answered with its
``transactional-state`` before the client discharges, so a client that waits for every
outcome before committing never waits forever (AMQP 1.0 part 4.4.2-4.4.3)."""

from __future__ import annotations

import pytest
from amqpnode import AmqpNode, run_container
from proton import Delivery, Message, Timeout
from proton.handlers import MessagingHandler, TransactionHandler
from proton.utils import BlockingConnection, LinkDetached

TRANSACTIONAL_STATE = 0x34
ACCEPTED = 0x24
N = 5


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = AmqpNode(tmp_path_factory.mktemp("amqp-tx")).start()
    yield n
    n.stop()


def _drain(node: AmqpNode, address: str, timeout: float = 0.5) -> list[object]:
    """Every message waiting at ``address`` (accepted), until it stays quiet ``timeout``."""
    c = BlockingConnection(node.url, timeout=5)
    try:
        rcv = c.create_receiver(address, credit=50)
        got = []
        while True:
            try:
                got.append(rcv.receive(timeout=timeout).body)
            except Timeout:
                return got
            rcv.accept()
    finally:
        c.close()


def _browse(node: AmqpNode, address: str) -> list[object]:
    """The bodies waiting at ``address``, left there (a queue browser); none while the
    queue does not exist yet (a transaction's sends make it at the commit)."""
    from proton.reactor import Copy

    c = BlockingConnection(node.url, timeout=5)
    try:
        try:
            rcv = c.create_receiver(address, credit=50, options=Copy())
        except LinkDetached as e:
            assert "amqp:not-found" in str(e)
            return []
        got = []
        while True:
            try:
                got.append(rcv.receive(timeout=0.2).body)
            except Timeout:
                return got
    finally:
        c.close()


def _state(d: Delivery) -> tuple[int, bytes, int, bool]:
    """(state, txn-id, outcome descriptor, settled) of a delivery's remote state."""
    data = d.remote.data or []
    txid = bytes(data[0]) if data else b""
    outcome = int(data[1].descriptor) if len(data) > 1 else -1
    return d.remote_state, txid, outcome, d.settled


def test_each_transactional_transfer_is_answered_before_commit_and_rollback(node):
    class Sender(MessagingHandler, TransactionHandler):
        """Round 0 commits, round 1 aborts; each round first waits for all N outcomes."""

        def __init__(self) -> None:
            super().__init__(auto_settle=False)
            self.round = 0
            self.outcomes: list[list[tuple[int, bytes, int, bool]]] = [[], []]
            self.waiting_before_discharge: list[list[object]] = []
            self.results: list[str] = []

        def on_start(self, e):
            self.container = e.container
            self.conn = e.container.connect(node.url)
            self.snd = e.container.create_sender(self.conn, "/queue/tx-out")
            e.container.declare_transaction(self.conn, handler=self)

        def on_transaction_declared(self, e):
            self.txn = e.transaction
            self.sent = [
                self.txn.send(self.snd, Message(body=f"r{self.round}-{i}", durable=True))
                for i in range(N)
            ]

        def on_delivery(self, e):
            d = e.delivery
            if d not in getattr(self, "sent", ()):
                return  # (MessagingHandler's own handlers see every event as well)
            mine = self.outcomes[self.round]
            mine.append(_state(d))
            if len(mine) < N:
                return
            # every transfer has its outcome (none is in the queue yet): now discharge
            self.waiting_before_discharge.append(_browse(node, "/queue/tx-out"))
            if self.round == 0:
                self.txn.commit()
            else:
                self.txn.abort()

        def on_transaction_committed(self, e):
            self.results.append("committed")
            self.round = 1
            self.container.declare_transaction(self.conn, handler=self)

        def on_transaction_commit_failed(self, e):
            self.results.append("commit failed")
            self.conn.close()
            self.finished = True

        def on_transaction_aborted(self, e):
            self.results.append("aborted")
            self.conn.close()
            self.finished = True

    h = Sender()
    run_container(h, timeout=10)
    assert h.results == ["committed", "aborted"]
    for rnd in (0, 1):
        states = h.outcomes[rnd]
        assert len(states) == N
        txids = {s[1] for s in states}
        assert len(txids) == 1 and txids != {b""}
        for state, _txid, outcome, settled in states:
            assert (state, outcome, settled) == (TRANSACTIONAL_STATE, ACCEPTED, True)
    assert h.outcomes[0][0][1] != h.outcomes[1][0][1]  # two transactions, two ids
    assert h.waiting_before_discharge == [[], [f"r0-{i}" for i in range(N)]]
    assert _drain(node, "/queue/tx-out") == [f"r0-{i}" for i in range(N)]


def test_transactional_accepts_are_answered_and_undone_by_rollback(node):
    c = BlockingConnection(node.url, timeout=5)
    snd = c.create_sender("/queue/tx-in")
    for i in range(3):
        snd.send(Message(body=f"m{i}", durable=True))
    c.close()

    class Acker(MessagingHandler, TransactionHandler):
        """Accepts the 3 messages in a transaction, waits for each answer, then aborts
        (round 0) or commits (round 1)."""

        def __init__(self) -> None:
            super().__init__(prefetch=0, auto_accept=False)
            self.round = 0
            self.answers: list[list[tuple[int, bytes, int, bool]]] = [[], []]
            self.bodies: list[list[object]] = [[], []]
            self.results: list[str] = []

        def on_start(self, e):
            self.container = e.container
            self.conn = e.container.connect(node.url)
            self.rcv = e.container.create_receiver(self.conn, "/queue/tx-in")
            e.container.declare_transaction(self.conn, handler=self)

        def on_transaction_declared(self, e):
            self.txn = e.transaction
            self.rcv.flow(3)

        def on_message(self, e):
            self.bodies[self.round].append(e.message.body)
            self.txn.accept(e.delivery)  # transactional-state(txn, accepted), unsettled

        def on_delivery(self, e):
            d = e.delivery
            if d.link == self.rcv and d.updated and d.remote_state == TRANSACTIONAL_STATE:
                mine = self.answers[self.round]
                mine.append(_state(d))
                if len(mine) == 3:
                    self.txn.abort() if self.round == 0 else self.txn.commit()

        def on_transaction_aborted(self, e):
            self.results.append("aborted")
            self.round = 1
            self.container.declare_transaction(self.conn, handler=self)

        def on_transaction_committed(self, e):
            self.results.append("committed")
            self.conn.close()
            self.finished = True

    h = Acker()
    run_container(h, timeout=10)
    assert h.results == ["aborted", "committed"]
    for rnd in (0, 1):
        assert [(s, o, settled) for s, _t, o, settled in h.answers[rnd]] == [
            (TRANSACTIONAL_STATE, ACCEPTED, True)
        ] * 3
    assert sorted(h.bodies[0]) == ["m0", "m1", "m2"]
    assert sorted(h.bodies[1]) == ["m0", "m1", "m2"]  # the rollback put them back
    assert _drain(node, "/queue/tx-in") == []  # the commit removed them
