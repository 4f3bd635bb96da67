"""STOMP messaging against a real node process, driven by stomp.py."""

from __future__ import annotations

import socket
import time

import pytest
from nodekit import NodeProcess
from stompkit import connect, unique


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(
        tmp_path_factory.mktemp("stomp-node"),
        extra_config="""
[address_settings."#"]
dead_letter_address = "DLQ"
max_delivery_attempts = 3

[address_settings."slow.#"]
redelivery_delay = "300ms"
""",
    ).start()
    yield n
    n.stop()


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_queue_round_trip_each_version(node, version):
    q = unique()
    conn, lst = connect(node.stomp_port, version)
    conn.subscribe(f"/queue/{q}", id="s1", ack="auto")
    conn.send(f"/queue/{q}", "hello", headers={"color": "red", "receipt": "r1"})
    lst.wait_receipt("r1")
    msg = lst.wait_messages(1)[0]
    assert msg.body == "hello"
    assert msg.headers["color"] == "red"
    assert msg.headers["destination"] == f"/queue/{q}"
    assert msg.headers["subscription"] == "s1"
    conn.disconnect()


def test_version_negotiation_picks_the_highest_common(node):
    from nodekit import RawStomp, header

    raw = RawStomp(node.stomp_port)
    reply = raw.connect("1.0,1.1")
    assert reply.startswith(b"CONNECTED") and header(reply, "version") == "1.1"
    raw.close()
    raw = RawStomp(node.stomp_port)
    raw.send(b"CONNECT\n\n\x00")  # no accept-version: STOMP 1.0
    reply = raw.read_frame()
    assert reply.startswith(b"CONNECTED") and header(reply, "version") == "1.0"
    raw.close()


def test_topic_fan_out_and_plain_address(node):
    t = unique("t")
    c1, l1 = connect(node.stomp_port)
    c2, l2 = connect(node.stomp_port)
    c1.subscribe(f"/topic/{t}", id="a", receipt="sa")
    c2.subscribe(f"/topic/{t}", id="b", receipt="sb")
    l1.wait_receipt("sa")
    l2.wait_receipt("sb")
    c1.send(f"/topic/{t}", "tick")
    assert l1.wait_messages(1)[0].body == "tick"
    assert l2.wait_messages(1)[0].body == "tick"
    assert l1.messages[0].headers["destination"] == f"/topic/{t}"
    plain = unique("plain")
    c1.send(plain, "to-plain", headers={"receipt": "rp"})
    l1.wait_receipt("rp")
    c2.subscribe(plain, id="p")
    assert l2.wait_messages(2)[1].body == "to-plain"
    c1.disconnect()
    c2.disconnect()


def test_body_with_nul_bytes_and_escaped_headers(node):
    q = unique()
    conn, lst = connect(node.stomp_port, "1.2", auto_decode=False)  # bodies stay bytes
    conn.subscribe(f"/queue/{q}", id="s")
    body = b"a\x00b\x00\xffc"
    conn.send(f"/queue/{q}", body, headers={"weird": "x:y\nz\\w"})
    msg = lst.wait_messages(1)[0]
    assert msg.body == body
    assert msg.headers["weird"] == "x:y\nz\\w"
    conn.disconnect()


def test_selector_on_subscription(node):
    q = unique()
    conn, lst = connect(node.stomp_port)
    conn.subscribe(f"/queue/{q}", id="s", headers={"selector": "color = 'red' AND weight > 2"})
    for color, weight in (("red", 1), ("red", 5), ("blue", 9)):
        conn.send(
            f"/queue/{q}", f"{color}{weight}", headers={"color": color, "weight": str(weight)}
        )
    time.sleep(0.3)
    # STOMP properties are strings: numeric comparisons on them are UNKNOWN per JMS rules,
    # so only the string test can select; the numeric clause makes nothing match.
    assert [m.body for m in lst.messages] == []
    conn.unsubscribe("s")
    conn.subscribe(f"/queue/{q}", id="s2", headers={"selector": "color = 'red'"})
    msgs = lst.wait_messages(2)
    assert sorted(m.body for m in msgs) == ["red1", "red5"]
    conn.disconnect()


def test_client_individual_ack_and_redelivery_after_disconnect(node):
    q = unique()
    c1, l1 = connect(node.stomp_port)
    c1.subscribe(f"/queue/{q}", id="s", ack="client-individual")
    for i in range(3):
        c1.send(f"/queue/{q}", f"m{i}")
    msgs = l1.wait_messages(3)
    c1.ack(msgs[1].headers["ack"])
    c1.disconnect()
    c2, l2 = connect(node.stomp_port)
    c2.subscribe(f"/queue/{q}", id="s", ack="client-individual")
    again = l2.wait_messages(2)
    assert sorted(m.body for m in again) == ["m0", "m2"]
    assert all(m.headers.get("redelivered") == "true" for m in again)
    for m in again:
        c2.ack(m.headers["ack"])
    c2.disconnect()


def test_client_ack_is_cumulative(node):
    q = unique()
    c1, l1 = connect(node.stomp_port, "1.1")
    c1.subscribe(f"/queue/{q}", id="s", ack="client")
    for i in range(4):
        c1.send(f"/queue/{q}", f"m{i}")
    msgs = l1.wait_messages(4)
    c1.ack(msgs[2].headers["message-id"], "s", receipt="ra")
    l1.wait_receipt("ra")
    c1.disconnect()
    c2, l2 = connect(node.stomp_port)
    c2.subscribe(f"/queue/{q}", id="s")
    assert [m.body for m in l2.wait_messages(1)] == ["m3"]
    time.sleep(0.2)
    assert len(l2.messages) == 1
    c2.disconnect()


def test_nack_redelivers_then_dead_letters(node):
    q = unique()
    conn, lst = connect(node.stomp_port)
    conn.subscribe(f"/queue/{q}", id="s", ack="client-individual")
    conn.send(f"/queue/{q}", "poison")
    for attempt in range(1, 4):
        msgs = lst.wait_messages(attempt)
        conn.nack(msgs[-1].headers["ack"])
    time.sleep(0.3)
    assert len(lst.messages) == 3
    conn.subscribe("/queue/DLQ", id="dlq", headers={"selector": f"_WS_ORIG_ADDRESS = '{q}'"})
    dead = lst.wait_messages(4)[-1]
    assert dead.body == "poison"
    assert dead.headers["_WS_DLQ_REASON"] == "max-deliveries"
    assert dead.headers["_WS_ORIG_ADDRESS"] == q
    conn.disconnect()


def test_redelivery_delay_applies_to_nack(node):
    q = f"slow.{unique()}"
    conn, lst = connect(node.stomp_port)
    conn.subscribe(f"/queue/{q}", id="s", ack="client-individual")
    conn.send(f"/queue/{q}", "m")
    first = lst.wait_messages(1)[0]
    t0 = time.monotonic()
    conn.nack(first.headers["ack"])
    lst.wait_messages(2)
    assert time.monotonic() - t0 >= 0.25
    conn.disconnect()


def test_transaction_commit_abort_and_rollback_on_disconnect(node):
    q = unique()
    conn, lst = connect(node.stomp_port)
    tx = conn.begin()
    conn.send(f"/queue/{q}", "in-tx", transaction=tx)
    conn.abort(tx)
    tx2 = conn.begin()
    conn.send(f"/queue/{q}", "committed", transaction=tx2)
    conn.commit(tx2)
    conn.subscribe(f"/queue/{q}", id="s", ack="client-individual")
    msg = lst.wait_messages(1)[0]
    assert msg.body == "committed"
    # an ack inside a transaction that is never committed is undone when the client goes
    tx3 = conn.begin()
    conn.ack(msg.headers["ack"], transaction=tx3)
    conn.send(f"/queue/{q}", "never", transaction=tx3)
    conn.disconnect()
    c2, l2 = connect(node.stomp_port)
    c2.subscribe(f"/queue/{q}", id="s")
    assert [m.body for m in l2.wait_messages(1)] == ["committed"]
    time.sleep(0.3)
    assert len(l2.messages) == 1
    c2.disconnect()


def test_disconnect_receipt_then_close(node):
    from nodekit import RawStomp, header

    raw = RawStomp(node.stomp_port)
    assert raw.connect().startswith(b"CONNECTED")
    raw.send(b"DISCONNECT\nreceipt:bye\n\n\x00")
    frame = raw.read_frame()
    assert frame.startswith(b"RECEIPT") and header(frame, "receipt-id") == "bye"
    assert raw.read_until_closed() == b""


def test_consumer_window_bounds_unacked_messages(node):
    q = unique()
    conn, lst = connect(node.stomp_port)
    conn.subscribe(f"/queue/{q}", id="s", ack="client-individual", headers={"prefetch-count": "5"})
    for i in range(20):
        conn.send(f"/queue/{q}", f"m{i}")
    lst.wait_messages(5)
    time.sleep(0.3)
    assert len(lst.messages) == 5
    conn.ack(lst.messages[0].headers["ack"])
    lst.wait_messages(6)
    time.sleep(0.2)
    assert len(lst.messages) == 6
    conn.disconnect()


def test_priority_and_expiry_headers(node):
    q = unique()
    conn, lst = connect(node.stomp_port)
    past = int(time.time() * 1000) - 1000
    conn.send(f"/queue/{q}", "expired", headers={"expires": str(past)})
    conn.send(f"/queue/{q}", "low", headers={"priority": "1"})
    conn.send(f"/queue/{q}", "high", headers={"priority": "9", "receipt": "r"})
    lst.wait_receipt("r")
    conn.subscribe(f"/queue/{q}", id="s")
    msgs = lst.wait_messages(2)
    assert [m.body for m in msgs] == ["high", "low"]
    assert msgs[0].headers["priority"] == "9"
    conn.disconnect()


def test_a_consumer_that_does_not_read_does_not_swallow_the_queue(node):
    """Flow control for ack:auto: the server stops dispatching to a consumer whose socket is
    full, so its backlog stays in the queue for others (and out of the server's memory)."""
    from nodekit import RawStomp

    q = unique()
    stuck = RawStomp(node.stomp_port)
    stuck.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    assert stuck.connect().startswith(b"CONNECTED")
    stuck.send(
        f"SUBSCRIBE\nid:1\ndestination:/queue/{q}\nack:auto\nreceipt:s\n\n".encode() + b"\x00"
    )
    assert stuck.read_frame().startswith(b"RECEIPT")  # and never read again
    n, body = 4000, "x" * 4096
    prod, plst = connect(node.stomp_port)
    for i in range(n):
        prod.send(f"/queue/{q}", body, headers={"receipt": f"r{i}"} if i == n - 1 else {})
    plst.wait_receipt(f"r{n - 1}", timeout=30)
    fast, flst = connect(node.stomp_port)
    fast.subscribe(f"/queue/{q}", id="f")
    time.sleep(2)
    got = len(flst.messages)
    # the stuck consumer can hold its socket buffers' worth (a few MB) but not the 16 MB
    assert got > n // 2, f"the fast consumer only got {got} of {n}"
    stuck.close()
    prod.disconnect()
    fast.disconnect()
