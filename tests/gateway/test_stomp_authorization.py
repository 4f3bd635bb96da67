"""What a user may reach over STOMP is decided in the core session, against the address a queue
belongs to: durable subscriptions cannot take over other queues, subscription queues cannot be
read as plain queues, wildcard subscriptions skip what a more specific rule denies, and every
per-client limit answers with an ERROR naming it."""

from __future__ import annotations

import pytest
from nodekit import NodeProcess, RawStomp, header
from stompkit import connect, unique

USERS = """
[[users]]
name = "admin"
password = "a"
roles = ["admin"]

[[users]]
name = "app"
password = "secret"
roles = ["app"]

[[permissions]]
match = "#"
send = ["admin"]
consume = ["admin"]
browse = ["admin"]
create_durable_queue = ["admin"]
create_non_durable_queue = ["admin"]
delete_durable_queue = ["admin"]
delete_non_durable_queue = ["admin"]

[[permissions]]
match = "orders.#"
send = ["app", "admin"]
consume = ["app", "admin"]
create_durable_queue = ["app", "admin"]
create_non_durable_queue = ["app", "admin"]
delete_durable_queue = ["app", "admin"]

[[permissions]]
match = "orders.secret"
send = ["app", "admin"]
consume = ["admin"]

[[permissions]]
match = "apps.#"
send = ["app", "admin"]
consume = ["app", "admin"]
create_durable_queue = ["app", "admin"]
create_non_durable_queue = ["app", "admin"]

[[queues]]
name = "apps.work"

[limits]
max_window = 50
max_transaction_messages = 5
max_transaction_size = "64KiB"
max_auto_created = 30
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("stomp-authz"), extra_config=USERS)
    n.start()
    yield n
    n.stop()


def raw(node, login: str, passcode: str, extra: str = "") -> RawStomp:
    r = RawStomp(node.stomp_port)
    reply = r.connect("1.2", f"login:{login}\npasscode:{passcode}\n{extra}")
    assert reply.startswith(b"CONNECTED"), reply
    return r


def refused(r: RawStomp, frame: bytes, fragment: str) -> str:
    r.send(frame)
    reply = r.read_frame()
    assert reply.startswith(b"ERROR"), reply
    msg = header(reply, "message") or ""
    assert fragment in msg, f"{fragment!r} not in {msg!r}"
    r.read_until_closed()
    r.close()
    return msg


def test_durable_name_of_the_dead_letter_queue_is_refused_and_the_queue_kept(node):
    admin, lst = connect(node.stomp_port, login="admin", passcode="a")
    admin.send("/queue/DLQ", "kept", headers={"persistent": "true", "receipt": "r"})
    lst.wait_receipt("r")
    r = raw(node, "app", "secret")
    refused(
        r,
        b"SUBSCRIBE\nid:1\ndestination:/topic/orders.x\ndurable-subscription-name:DLQ\n\n\x00",
        "not a durable subscription",
    )
    admin.subscribe("/queue/DLQ", id="d", ack="auto")
    assert [m.body for m in lst.wait_messages(1)] == ["kept"]
    admin.disconnect()


@pytest.mark.parametrize("name", ["sf.site-b", "apps.work"])
def test_durable_name_cannot_take_over_node_or_declared_queues(node, name):
    r = raw(node, "app", "secret")
    refused(
        r,
        f"SUBSCRIBE\nid:1\ndestination:/topic/apps.t\ndurable-subscription-name:{name}\n\n\x00".encode(),
        "invalid name" if name.startswith("sf.") else "not a durable subscription",
    )


def test_another_clients_durable_subscription_is_not_theirs(node):
    owner, _ = connect(node.stomp_port, login="admin", passcode="a", **{"client-id": "owner"})
    owner.subscribe("/topic/orders.feed", id="1", headers={"durable-subscription-name": "mine"})
    owner.disconnect()
    for extra in ("", "client-id:owner\n"):  # the full queue name, or the owner's client id
        r = raw(node, "app", "secret", extra)
        refused(
            r,
            b"SUBSCRIBE\nid:1\ndestination:/topic/orders.feed\ndurable-subscription-name:owner.mine\n\n\x00",
            "belongs to another subscriber",
        )


def test_a_subscription_queue_cannot_be_read_as_a_plain_queue(node):
    # the queue's name falls under orders.# (app may consume there); its address does not
    admin, _ = connect(node.stomp_port, login="admin", passcode="a", **{"client-id": "orders"})
    admin.subscribe("/topic/admin.news", id="1", headers={"durable-subscription-name": "spy"})
    r = raw(node, "app", "secret")
    refused(
        r, b"SUBSCRIBE\nid:1\ndestination:/queue/orders.spy\n\n\x00", "subscribe to the address"
    )
    admin.disconnect()


def test_wildcard_subscription_skips_addresses_a_more_specific_rule_denies(node):
    app, lst = connect(node.stomp_port, login="app", passcode="secret")
    app.subscribe("/topic/orders.#", id="w", ack="auto")
    app.send("/topic/orders.secret", "hidden", headers={"receipt": "s1"})
    app.send("/topic/orders.public", "visible", headers={"receipt": "s2"})
    lst.wait_receipt("s2")
    got = lst.wait_messages(1)
    assert [m.body for m in got] == ["visible"]
    assert not lst.wait(lambda: len(lst.messages) > 1, timeout=1.0)
    app.disconnect()


def test_prefetch_is_capped_by_max_window(node):
    q = f"orders.{unique('pf')}"
    app, lst = connect(node.stomp_port, login="app", passcode="secret")
    for i in range(80):
        app.send(f"/queue/{q}", str(i))
    app.subscribe(
        f"/queue/{q}", id="1", ack="client-individual", headers={"prefetch-count": "100000"}
    )
    assert len(lst.wait_messages(50)) == 50
    assert not lst.wait(lambda: len(lst.messages) > 50, timeout=1.0)
    app.disconnect()


def test_transaction_size_is_bounded(node):
    r = raw(node, "app", "secret")
    r.send(b"BEGIN\ntransaction:t\n\n\x00")
    for _ in range(5):
        r.send(b"SEND\ndestination:/queue/orders.tx\ntransaction:t\n\nx\x00")
    refused(
        r, b"SEND\ndestination:/queue/orders.tx\ntransaction:t\n\nx\x00", "max_transaction_messages"
    )


def test_auto_created_queues_are_bounded(node):
    app, lst = connect(node.stomp_port, login="app", passcode="secret")
    errors = 0
    for i in range(60):
        app.send(f"/queue/orders.auto{i}", "x")
    assert lst.wait(lambda: bool(lst.errors), timeout=10)
    errors = len(lst.errors)
    assert errors == 1 and "max_auto_created" in lst.errors[0].headers["message"]


@pytest.mark.parametrize(
    "dest, fragment",
    [
        ("/queue/sf.site-b", "store-and-forward"),
        ("/queue/" + "x" * 10000, "longer than 255"),
        ("/queue/a::b::c", "expected one"),
        ("/queue/bad name", "white space"),
    ],
)
def test_one_name_rule_for_sends(node, dest, fragment):
    r = raw(node, "admin", "a")
    refused(r, f"SEND\ndestination:{dest}\n\nx\x00".encode(), fragment)


def test_subscribe_refuses_store_and_forward_names(node):
    r = raw(node, "admin", "a")
    refused(r, b"SUBSCRIBE\nid:1\ndestination:/queue/site-b::orders\n\n\x00", "only a send")
