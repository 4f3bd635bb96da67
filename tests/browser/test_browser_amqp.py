"""A real browser page using rhea (AMQP 1.0) over the node's WebSocket at ``/amqp``.

The node has security on, with anonymous logins allowed.  The page opens a connection (SASL
ANONYMOUS, or PLAIN as a declared user, whose name the node stamps on the messages it sends),
receives from a queue and sends to it, one message large enough to take several AMQP frames; a message it sends to another
queue is received by python-qpid-proton over TCP, and one proton sends reaches the page.
The page's WebSocket must have negotiated the ``amqp`` subprotocol and received only binary
messages.  A wrong password is refused in the SASL exchange.  A screenshot is kept in
tests/browser/artifacts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from browserkit import keep_evidence, launch, screenshot
from nodekit import SECURITY_USERS, NodeProcess
from proton import Message
from proton.utils import BlockingConnection
from stompkit import unique

LARGE = 200_000  # characters: more than three 64 KiB frames, and several WebSocket reads
SECURITY = """
[security]
enabled = true
allow_anonymous = true
anonymous_roles = ["rw"]
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[NodeProcess]:
    workdir = tmp_path_factory.mktemp("browser-amqp")
    extra = SECURITY + SECURITY_USERS
    n = NodeProcess(workdir, http=True, amqp=True, extra_config=extra).start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def browser(playwright, chromium) -> Iterator[Any]:
    b = launch(playwright, chromium)
    yield b
    b.close()


def proton_exchange(node: NodeProcess, out: str, q: str) -> str:
    """Over TCP: take the page's message from ``out``, send one to the page's queue."""
    conn = BlockingConnection(f"127.0.0.1:{node.amqp_port}", timeout=10)
    try:
        receiver = conn.create_receiver(out)
        got = receiver.receive(timeout=10)
        receiver.accept()
        conn.create_sender(q).send(Message(body="proton to the page", subject="tcp"))
        return str(got.body)
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("credentials", "shot"),
    [({}, "amqp-anonymous.png"), ({"user": "app", "password": "secret"}, "amqp-plain.png")],
    ids=["sasl-anonymous", "sasl-plain"],
)
def test_rhea_over_websocket_at_amqp(node, browser, page_server, credentials, shot):
    q, out = f"/queue/{unique('amqp')}", f"/queue/{unique('to-proton')}"
    page = browser.new_page(viewport={"width": 900, "height": 460})
    try:
        ws = f"ws://127.0.0.1:{node.http_port}/amqp"
        page.goto(f"{page_server.url}/amqp?{urlencode({'url': ws, 'queue': q, **credentials})}")
        page.wait_for_function("window.amqpTest.ready || window.amqpTest.closed", timeout=10000)
        assert page.evaluate("window.amqpTest.ready"), page.evaluate("window.amqpTest.errors")
        send = "([a, b, s]) => window.sendTo(a, b, s)"
        assert page.evaluate(send, [q, "page to its queue", "one"]) == "accepted"
        assert page.evaluate(send, [q, "x" * LARGE, "large"]) == "accepted"
        assert page.evaluate(send, [out, "page to proton", None]) == "accepted"
        assert proton_exchange(node, out, q) == "page to proton"
        page.evaluate("(t) => window.note(t)", "proton over TCP received: page to proton")
        page.wait_for_function("window.amqpTest.received.length >= 3", timeout=10000)
        state: dict[str, Any] = page.evaluate("window.amqpTest")
        got = [(m["subject"], m["body"]) for m in state["received"]]
        assert got == [
            ("one", "page to its queue"),
            ("large", "x" * LARGE),
            ("tcp", "proton to the page"),
        ]
        assert {m["address"] for m in state["received"]} == {q}
        if credentials:  # the node stamps the login on what the page sends
            assert [m["userId"] for m in state["received"][:2]] == ["app", "app"]
        assert state["errors"] == []
        assert "ANONYMOUS-RELAY" in state["offered"]
        [sock] = page.evaluate("window.wsRecord")
        assert sock["asked"] == ["amqp"]
        assert sock["protocol"] == "amqp"
        assert sock["binary"] > 0 and sock["text"] == 0
        screenshot(page, shot)
        page.evaluate("window.stopAmqp()")
        page.wait_for_function("window.amqpTest.closed", timeout=5000)
    finally:
        page.close()
    keep_evidence(shot, f"browser-{shot}")


def test_rhea_with_a_wrong_password_is_refused(node, browser, page_server):
    page = browser.new_page()
    try:
        ws = f"ws://127.0.0.1:{node.http_port}/amqp"
        params = {"url": ws, "queue": f"/queue/{unique('amqp')}", "user": "app", "password": "no"}
        page.goto(f"{page_server.url}/amqp?{urlencode(params)}")
        page.wait_for_function("window.amqpTest.closed", timeout=10000)
        state: dict[str, Any] = page.evaluate("window.amqpTest")
        assert not state["ready"] and state["server"] is None
        assert any("amqp:unauthorized-access" in e for e in state["errors"]), state["errors"]
    finally:
        page.close()
