"""STOMP ``browser:true`` (ActiveMQ's queue browser): messages shown, none consumed."""

from __future__ import annotations

import contextlib

import pytest
import stomp
from opskit import secured_node
from stompkit import connect, unique


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = secured_node(tmp_path_factory.mktemp("ops-browse")).start()
    yield n
    n.stop()


def send(conn, got, queue: str, bodies: list[str], **headers: str) -> None:
    for i, b in enumerate(bodies):
        conn.send(f"/queue/{queue}", b, receipt=f"p{queue}{i}", headers=headers)
    for i in range(len(bodies)):
        got.wait_receipt(f"p{queue}{i}")


def quietly_disconnect(conn) -> None:
    """The node closed the connection after its ERROR: stomp.py may still think it is open."""
    with contextlib.suppress(OSError, stomp.exception.StompException):
        conn.disconnect()


def browse(conn, got, queue: str, sid: str, **headers: str) -> list:
    """The frames of one browse, through its end-of-browse marker."""
    start = len(got.messages)
    conn.subscribe(f"/queue/{queue}", id=sid, headers={"browser": "true", **headers})
    got.wait(lambda: any(m.headers.get("browser") == "end" for m in got.messages[start:]))
    return got.messages[start:]


def test_browsing_shows_every_message_in_order_and_takes_none(node):
    q = unique("brw")
    conn, got = connect(node.stomp_port, login="app", passcode="secret")
    try:
        send(conn, got, q, ["one", "two", "three"])
        frames = browse(conn, got, q, "b1")
        *msgs, end = frames
        assert [m.body for m in msgs] == ["one", "two", "three"]
        assert all(
            m.headers["browser"] == "true" and m.headers["subscription"] == "b1" for m in msgs
        )
        assert "ack" not in msgs[0].headers
        assert end.headers["browser"] == "end" and end.headers["message-id"] == "0"
        assert end.headers["destination"] == f"/queue/{q}" and end.body == ""
        conn.unsubscribe(id="b1", receipt="u1")  # accepted, as ActiveMQ does
        got.wait_receipt("u1")
        # a second browse sees the same; a consumer then gets all three
        assert [m.body for m in browse(conn, got, q, "b2")[:-1]] == ["one", "two", "three"]
        start = len(got.messages)
        conn.subscribe(f"/queue/{q}", id="c", ack="auto")
        got.wait(lambda: len(got.messages) >= start + 3)
        assert [m.body for m in got.messages[start:]] == ["one", "two", "three"]
        assert not got.errors
    finally:
        conn.disconnect()


def test_a_selector_narrows_the_browse_and_an_empty_queue_ends_at_once(node):
    q = unique("brs")
    conn, got = connect(node.stomp_port, login="app", passcode="secret")
    try:
        send(conn, got, q, ["r"], colour="red")
        send(conn, got, q, ["b"], colour="blue")
        frames = browse(conn, got, q, "b1", selector="colour = 'blue'")
        assert [m.body for m in frames] == ["b", ""]
        conn.subscribe(f"/queue/{q}", id="eat", ack="auto")
        got.wait(lambda: len(got.messages) >= 4)
        frames = browse(conn, got, q, "b2")
        assert len(frames) == 1 and frames[0].headers["browser"] == "end"
    finally:
        conn.disconnect()


def test_browsing_needs_the_browse_permission(node):
    q = unique("other")
    conn, got = connect(node.stomp_port, login="app", passcode="secret")
    send(conn, got, q, ["x"])
    conn.disconnect()
    conn, got = connect(node.stomp_port, login="ops", passcode="opspw")
    try:
        conn.subscribe(f"/queue/{q}", id="b", headers={"browser": "true"})
        err = got.wait_error()
        assert "not authorized" in err.headers["message"]
        assert not got.messages
    finally:
        quietly_disconnect(conn)


def test_browsing_a_topic_is_refused(node):
    conn, got = connect(node.stomp_port, login="app", passcode="secret")
    try:
        conn.subscribe(f"/topic/{unique('t')}", id="b", headers={"browser": "true"})
        assert "queues only" in got.wait_error().headers["message"]
    finally:
        quietly_disconnect(conn)
