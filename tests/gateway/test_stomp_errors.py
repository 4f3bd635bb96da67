"""Bad input gets an ERROR frame naming the problem, the connection is closed, and nobody
else notices."""

from __future__ import annotations

import socket
import time

import pytest
from nodekit import SECURITY_USERS, NodeProcess, RawStomp, header
from stompkit import connect, unique

USERS = (
    SECURITY_USERS
    + """
[[permissions]]
match = "shared.#"
send = ["lim", "rw"]
consume = ["lim", "rw"]
create_durable_queue = ["rw"]
create_non_durable_queue = ["rw"]
delete_durable_queue = ["rw"]

[[permissions]]
match = "private.#"
consume = ["rw"]

[[queues]]
name = "private.inbox"  # declared: consumers here may not create queues
"""
)

STOMP_LIMITS = """
max_frame_size = "40KiB"
max_body_size = "32KiB"
max_headers = 20
max_header_length = "1KiB"
heartbeat_receive = "300ms"
heartbeat_send = "300ms"
heartbeat_min = "100ms"
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("stomp-errors"), extra_config=USERS, stomp=STOMP_LIMITS)
    n.start()
    yield n
    n.stop()


@pytest.fixture
def bystander(node):
    """A healthy client that keeps working while others misbehave."""
    q = unique("bystander")
    conn, lst = connect(node.stomp_port, login="app", passcode="secret")
    conn.subscribe(f"/queue/{q}", id="s")
    yield conn, lst, q
    conn.send(f"/queue/{q}", "still-alive")
    assert lst.wait_messages(1)[-1].body == "still-alive"
    conn.disconnect()


def raw_connected(node) -> RawStomp:
    r = RawStomp(node.stomp_port)
    reply = r.connect("1.2", "login:app\npasscode:secret\n")
    assert reply.startswith(b"CONNECTED"), reply
    return r


def expect_error(r: RawStomp, fragment: str) -> bytes:
    frame = r.read_frame()
    assert frame.startswith(b"ERROR"), frame
    msg = header(frame, "message") or ""
    assert fragment in msg, f"{fragment!r} not in {msg!r}"
    r.read_until_closed()
    r.close()
    return frame


CASES = [
    ("frame before CONNECT", None, b"SEND\ndestination:/queue/x\n\nhi\x00", "expected CONNECT"),
    ("unknown command", "c", b"FROB\n\n\x00", "unknown command"),
    ("missing destination", "c", b"SEND\n\nbody\x00", "no destination"),
    ("malformed header", "c", b"SEND\ndestination /queue/x\n\n\x00", "malformed header"),
    ("bad escape", "c", b"SEND\ndestination:/queue/a\\tb\n\n\x00", "escape"),
    (
        "bad content-length",
        "c",
        b"SEND\ndestination:/queue/x\ncontent-length:abc\n\n\x00",
        "content-length",
    ),
    (
        "content-length overrun",
        "c",
        b"SEND\ndestination:/queue/x\ncontent-length:2\n\nabcdef\x00",
        "NUL",
    ),
    (
        "bad selector",
        "c",
        b"SUBSCRIBE\nid:1\ndestination:/queue/x\nselector:color = = 'red'\n\n\x00",
        "selector",
    ),
    (
        "bad ack mode",
        "c",
        b"SUBSCRIBE\nid:1\ndestination:/queue/x\nack:sometimes\n\n\x00",
        "ack mode",
    ),
    ("subscribe without id", "c", b"SUBSCRIBE\ndestination:/queue/x\n\n\x00", "no id"),
    ("ack unknown id", "c", b"ACK\nid:nope\n\n\x00", "unknown message id"),
    ("nack unknown id", "c", b"NACK\nid:nope\n\n\x00", "unknown message id"),
    ("commit unknown tx", "c", b"COMMIT\ntransaction:t-none\n\n\x00", "unknown transaction"),
    ("abort unknown tx", "c", b"ABORT\ntransaction:t-none\n\n\x00", "unknown transaction"),
    (
        "send in unknown tx",
        "c",
        b"SEND\ndestination:/queue/x\ntransaction:zz\n\nb\x00",
        "unknown transaction",
    ),
    (
        "double begin",
        "c",
        b"BEGIN\ntransaction:t1\n\n\x00BEGIN\ntransaction:t1\n\n\x00",
        "already active",
    ),
    ("bad priority", "c", b"SEND\ndestination:/queue/x\npriority:high\n\n\x00", "priority"),
    (
        "too many headers",
        "c",
        b"SEND\ndestination:/queue/x\n" + b"".join(b"h%d:v\n" % i for i in range(30)) + b"\n\x00",
        "headers",
    ),
    (
        "header too long",
        "c",
        b"SEND\ndestination:/queue/x\nbig:" + b"v" * 2000 + b"\n\n\x00",
        "header",
    ),
    (
        "body over limit",
        "c",
        b"SEND\ndestination:/queue/x\ncontent-length:40000\n\n" + b"x" * 40000 + b"\x00",
        "body",
    ),
    (
        "frame over limit",
        "c",
        b"SEND\ndestination:/queue/x\n"
        + b"".join(b"h%d:%s\n" % (i, b"v" * 900) for i in range(15))
        + b"\n"
        + b"x" * 30000
        + b"\x00",
        "frame",
    ),
    (
        "not authorized to send",
        "c",
        b"SEND\ndestination:/queue/private.x\n\nb\x00",
        "not authorized",
    ),
]


@pytest.mark.parametrize("name,state,data,fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_error_and_close(node, bystander, name, state, data, fragment):
    r = RawStomp(node.stomp_port) if state is None else raw_connected(node)
    r.send(data)
    expect_error(r, fragment)


def test_a_refused_frame_still_arriving_does_not_reset_the_error(node, bystander):
    """The node refuses a frame from its headers while the body is still arriving: it reads
    and drops the rest, so the client reads the ERROR and a clean end, never a reset."""
    r = raw_connected(node)
    r.send(b"SEND\ndestination:/queue/x\ncontent-length:40000\n\n" + b"x" * 512 * 1024)
    time.sleep(0.3)  # the node has refused it and half-closed with most of it unread
    expect_error(r, "body")


def test_error_carries_receipt_id(node):
    r = raw_connected(node)
    r.send(b"SEND\nreceipt:77\n\nbody\x00")
    frame = expect_error(r, "no destination")
    assert header(frame, "receipt-id") == "77"


def test_bad_credentials(node, bystander):
    r = RawStomp(node.stomp_port)
    r.send(b"CONNECT\naccept-version:1.2\nhost:x\nlogin:app\npasscode:wrong\n\n\x00")
    expect_error(r, "authentication failed")
    r = RawStomp(node.stomp_port)
    r.send(b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00")
    expect_error(r, "authentication failed")


def test_unsupported_version(node):
    r = RawStomp(node.stomp_port)
    r.send(b"CONNECT\naccept-version:2.0\nhost:x\n\n\x00")
    frame = r.read_frame()
    assert frame.startswith(b"ERROR") and header(frame, "version") == "1.0,1.1,1.2"
    r.read_until_closed()


def test_dead_connection_is_detected(node, bystander):
    r = RawStomp(node.stomp_port)
    reply = r.connect("1.2", "login:app\npasscode:secret\nheart-beat:300,0\n")
    assert reply.startswith(b"CONNECTED")
    t0 = time.monotonic()
    r.read_until_closed(limit=5)  # we never send heart-beats: the server must hang up
    assert time.monotonic() - t0 < 3


def test_heart_beats_both_ways(node):
    conn, lst = connect(node.stomp_port, login="app", passcode="secret", heartbeats=(300, 300))
    assert lst.wait(lambda: lst.heartbeats >= 3, timeout=10)
    time.sleep(1.5)  # stomp.py beats for us: the server must keep the connection open
    assert conn.is_connected() and not lst.errors
    conn.disconnect()


def test_garbage_bytes_do_not_hurt_others(node, bystander):
    for junk in (
        b"\xff\xfe\x00\x01" * 100,
        b"\x00" * 10,
        b"CONNECT\naccept-version:1.2\n\n\x00" + b"\x80" * 50,
    ):
        s = socket.create_connection(("127.0.0.1", node.stomp_port))
        s.sendall(junk)
        s.settimeout(3)
        try:
            while s.recv(4096):
                pass
        except (TimeoutError, ConnectionResetError):
            pass
        s.close()


def test_most_specific_permission_pattern_decides(node):
    conn, lst = connect(node.stomp_port, login="app", passcode="secret")
    conn.subscribe("/queue/private.inbox", id="s", receipt="ok")
    lst.wait_receipt("ok")
    conn.disconnect()
    c2, l2 = connect(node.stomp_port, login="reader", passcode="r")
    c2.subscribe("/queue/private.inbox", id="s")
    err = l2.wait_error()
    assert "not authorized" in err.headers["message"]


def test_connection_ttl_closes_a_silent_client_without_heart_beats(tmp_path):
    n = NodeProcess(tmp_path, stomp='connection_ttl = "1s"').start()
    try:
        r = RawStomp(n.stomp_port)
        assert r.connect("1.0").startswith(b"CONNECTED")
        t0 = time.monotonic()
        r.read_until_closed(limit=5)
        assert 0.9 < time.monotonic() - t0 < 3
    finally:
        n.stop()


def test_creating_queues_needs_its_own_permission(node):
    app, alst = connect(node.stomp_port, login="app", passcode="secret")
    app.subscribe("/queue/shared.existing", id="s", receipt="made")
    alst.wait_receipt("made")
    app.disconnect()
    for frame, fragment in (
        (b"SUBSCRIBE\nid:1\ndestination:/queue/shared.existing\nreceipt:ok\n\n\x00", None),
        (b"SEND\ndestination:/queue/shared.existing\nreceipt:ok\n\nb\x00", None),
        (b"SUBSCRIBE\nid:1\ndestination:/queue/shared.new\n\n\x00", "create durable queue"),
        (b"SEND\ndestination:/queue/shared.brand-new\n\nb\x00", "create durable queue"),
        (b"SUBSCRIBE\nid:1\ndestination:/topic/shared.t\n\n\x00", "create non durable queue"),
        (
            b"SUBSCRIBE\nid:1\ndestination:/topic/shared.t\ndurable-subscription-name:d\n\n\x00",
            "create durable queue",
        ),
    ):
        r = RawStomp(node.stomp_port)
        assert r.connect("1.2", "login:limited\npasscode:l\n").startswith(b"CONNECTED")
        r.send(frame)
        if fragment is None:
            assert r.read_frame().startswith(b"RECEIPT")
            r.close()
        else:
            expect_error(r, fragment)


@pytest.mark.parametrize("beat", ["x,y", "-1,0", "1,2,3", ""])
def test_bad_heart_beat_is_refused_before_any_session_opens(tmp_path, beat):
    """With security on (the login is checked off the loop), a malformed ``heart-beat`` is
    answered with an ERROR naming the header, not ``internal error``.  It is checked before
    the core session opens: the user's one session place (``max_sessions_per_user = 1``),
    held by another connection, would otherwise refuse it with ``limit exceeded``; and the
    place is free again afterwards."""
    limits = "\n[limits]\nmax_sessions_per_user = 1\n"
    n = NodeProcess(tmp_path, extra_config=SECURITY_USERS + limits).start()
    try:
        holder = RawStomp(n.stomp_port)
        assert holder.connect("1.2", "login:app\npasscode:secret\n").startswith(b"CONNECTED")
        r = RawStomp(n.stomp_port)
        frame = r.connect("1.2", f"login:app\npasscode:secret\nheart-beat:{beat}\n")
        assert frame.startswith(b"ERROR"), frame
        assert header(frame, "message") == "invalid heart-beat header", frame
        assert f"heart-beat {beat!r}".encode() in frame, frame  # the body quotes it
        r.read_until_closed()
        r.close()
        holder.close()
        for _ in range(50):  # the holder's place is given back, and no other was taken
            r = RawStomp(n.stomp_port)
            frame = r.connect("1.2", "login:app\npasscode:secret\n")
            r.close()
            if not frame.startswith(b"ERROR"):
                break
            time.sleep(0.1)
        assert frame.startswith(b"CONNECTED"), frame
        assert "internal error" not in n.log() and "Traceback" not in n.log()
    finally:
        n.stop()


def test_a_huge_heart_beat_is_lowered_not_an_internal_error(node):
    """A heart-beat of more digits than a float holds (found by the fuzzer: OverflowError
    in the timer set-up, answered "internal error") is lowered to a day."""
    r = RawStomp(node.stomp_port)
    huge = "9" * 400
    frame = r.connect("1.2", f"login:app\npasscode:secret\nheart-beat:{huge},{huge}\n")
    assert frame.startswith(b"CONNECTED"), frame
    r.close()
    assert "internal error" not in node.log() and "Traceback" not in node.log()
