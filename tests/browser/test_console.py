"""The web console (/console) in headless Debian chromium, against a real secured node.

The page is the node's own (no test page): a wrong login is refused, the right one shows the
overview; the queues tab lists a queue with its depth, browsing shows its messages, and a
dead letter retried from the page is back on its original address.  Screenshots are kept in
tests/browser/artifacts (``WAYSTATION_EVIDENCE=1`` refreshes docs/evidence/console-*.png).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from browserkit import keep_evidence, launch, screenshot
from nodekit import NodeProcess, free_port
from sitekit import bridge_toml
from stompkit import connect, unique

CONFIG = """
[[users]]
name = "admin"
password = "adminpw"
roles = ["admin"]

[[users]]
name = "app"
password = "secret"
roles = ["rw"]

[[permissions]]
match = "#"
send = ["rw", "admin"]
consume = ["rw", "admin"]
browse = ["rw", "admin"]
create_durable_queue = ["rw", "admin"]
manage = ["admin"]

[security.login]
free_failures = 100
free_failures_per_user = 100

[address_settings."dl.#"]
dead_letter_address = "DLQ"
max_delivery_attempts = 1
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[NodeProcess]:
    # a bridge to a port where nothing listens: it retries, and can be paused
    extra = CONFIG + bridge_toml("to-b", "site-b", [free_port()])
    n = NodeProcess(tmp_path_factory.mktemp("console-node"), extra, http=True).start()
    yield n
    n.stop()


@pytest.fixture
def page(playwright: Any, chromium: str) -> Iterator[Any]:
    browser = launch(playwright, chromium)
    # Playwright's waits evaluate strings, which the console's CSP forbids to the page itself
    context = browser.new_context(viewport={"width": 1200, "height": 800}, bypass_csp=True)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    browser.close()
    assert not errors, errors


def api(node: NodeProcess, path: str) -> Any:
    req = urllib.request.Request(node.http_url + "/admin/api/v1" + path)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"admin:adminpw").decode())
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def send(node: NodeProcess, queue: str, *bodies: str) -> None:
    conn, got = connect(node.stomp_port, login="app", passcode="secret")
    for i, b in enumerate(bodies):
        conn.send(f"/queue/{queue}", b, receipt=f"r{i}", headers={"persistent": "true"})
        got.wait_receipt(f"r{i}")
    conn.disconnect()


def dead_letter(node: NodeProcess, queue: str, body: str) -> None:
    """One message to ``queue``, refused once: dead-lettered to DLQ (1 attempt allowed)."""
    send(node, queue, body)
    conn, got = connect(node.stomp_port, login="app", passcode="secret")
    conn.subscribe(f"/queue/{queue}", id="s", ack="client-individual")
    m = got.wait_messages(1)[0]
    conn.nack(m.headers["ack"], receipt="n")
    got.wait_receipt("n")
    conn.unsubscribe(id="s", receipt="u")
    got.wait_receipt("u")
    conn.disconnect()


def log_in(page: Any, node: NodeProcess, user: str, password: str) -> None:
    page.goto(node.http_url + "/console")
    page.wait_for_selector("#login:not([hidden])", timeout=15000)
    page.fill("#user", user)
    page.fill("#password", password)
    page.click("#login-button")


def shot(page: Any, name: str) -> None:
    screenshot(page, name)
    keep_evidence(name, name)


def test_a_wrong_login_is_refused(node, page):
    log_in(page, node, "admin", "wrong")
    page.wait_for_function(
        "document.getElementById('status').textContent.length > 0", timeout=15000
    )
    assert page.is_visible("#login") and not page.is_visible("#tabs")
    assert not page.is_visible("#overview")
    log_in(page, node, "app", "secret")  # a real user, but without manage
    page.wait_for_function(
        "document.getElementById('status').textContent.includes('manage')", timeout=15000
    )
    assert not page.is_visible("#tabs")


def test_lists_a_queue_browses_it_and_retries_a_dead_letter(node, page):
    q = unique("orders")
    send(node, q, "first order", "second order")
    dl = unique("dl.payments")
    dead_letter(node, dl, "poison payment")

    log_in(page, node, "admin", "adminpw")
    page.wait_for_selector("#tabs:not([hidden])", timeout=15000)
    page.wait_for_function(
        "document.getElementById('node').textContent === 'test-node'", timeout=15000
    )
    page.wait_for_function(
        "Number(document.getElementById('ov-queues').textContent) >= 3", timeout=15000
    )
    page.wait_for_function(  # a rate needs two polls
        "document.getElementById('ov-in-rate').textContent !== '-'", timeout=15000
    )
    shot(page, "console-overview.png")

    page.click("nav button[data-tab=queues]")
    row = page.locator(f"#queue-table tr[data-queue='{q}']")
    row.wait_for(timeout=15000)
    assert row.locator("td").nth(3).inner_text() == "2"  # the depth column

    row.get_by_role("button", name="Browse").click()
    page.wait_for_function(
        "document.querySelectorAll('#messages .msg').length === 2", timeout=15000
    )
    bodies = page.locator("#messages .msg pre").all_inner_texts()
    assert bodies == ["first order", "second order"]
    shot(page, "console-queue.png")
    assert api(node, f"/queues/{q}")["depth"] == 2  # browsing took nothing

    page.locator("#queue-table tr[data-queue='DLQ']").get_by_role("button", name="Browse").click()
    letter = page.locator("#messages .msg", has_text="poison payment")
    letter.wait_for(timeout=15000)
    assert "max-deliveries" in letter.locator(".dl").inner_text()
    assert dl in letter.locator(".dl").inner_text()
    shot(page, "console-dead-letter.png")
    letter.get_by_role("button", name="Retry").click()
    page.wait_for_function(
        "document.getElementById('status').textContent.startsWith('retried 1')", timeout=15000
    )
    letter.wait_for(state="detached", timeout=15000)
    back = api(node, f"/queues/{dl}/messages")["messages"]
    assert [m["body"] for m in back] == ["poison payment"]
    assert back[0]["dead_letter_reason"] is None
    shot(page, "console-retried.png")


def test_deletes_and_moves_a_message_and_closes_a_connection(node, page):
    q, target = unique("work"), unique("elsewhere")
    send(node, q, "delete me", "move me")
    log_in(page, node, "admin", "adminpw")
    page.wait_for_selector("#tabs:not([hidden])", timeout=15000)
    page.click("nav button[data-tab=queues]")
    page.locator(f"#queue-table tr[data-queue='{q}']").get_by_role("button", name="Browse").click()
    page.locator("#messages .msg", has_text="delete me").get_by_role(
        "button", name="Delete"
    ).click()
    page.locator("#messages .msg", has_text="delete me").wait_for(state="detached", timeout=15000)
    page.fill("#move-target", target)
    page.locator("#messages .msg", has_text="move me").get_by_role("button", name="Move").click()
    page.locator("#messages .msg", has_text="move me").wait_for(state="detached", timeout=15000)
    assert api(node, f"/queues/{q}")["depth"] == 0
    assert [m["body"] for m in api(node, f"/queues/{target}/messages")["messages"]] == ["move me"]

    conn, _ = connect(node.stomp_port, login="app", passcode="secret")
    try:
        page.click("nav button[data-tab=connections]")
        cell = page.locator("#connection-table td", has_text="app").first
        cell.wait_for(timeout=15000)
        before = len(api(node, "/connections")["connections"])
        page.locator("#connection-table tr", has_text="app").first.get_by_role(
            "button", name="Close"
        ).click()
        page.wait_for_function(
            "document.getElementById('status').textContent.startsWith('closed')", timeout=15000
        )
        assert len(api(node, "/connections")["connections"]) == before - 1
        shot(page, "console-connections.png")
    finally:
        if conn.is_connected():
            conn.disconnect()


def test_fits_a_phone(node, page):
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, node, "admin", "adminpw")
    page.wait_for_selector("#tabs:not([hidden])", timeout=15000)
    page.wait_for_function(
        "document.getElementById('node').textContent === 'test-node'", timeout=15000
    )
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, width  # no sideways scrolling of the page itself
    shot(page, "console-phone.png")


def test_the_page_is_served_with_its_assets_and_no_outside_source(node):
    with urllib.request.urlopen(node.http_url + "/console/", timeout=10) as r:
        html = r.read().decode()
        csp = r.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "http" not in html.replace("http-equiv", "")  # nothing from elsewhere
    for asset in ("console.js", "console.css"):
        with urllib.request.urlopen(f"{node.http_url}/console/static/{asset}", timeout=10) as r:
            assert r.status == 200 and len(r.read()) > 500
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(node.http_url + "/admin/api/v1/overview", timeout=10)
    assert e.value.code == 401


def test_pauses_and_resumes_a_bridge(node, page):
    log_in(page, node, "admin", "adminpw")
    page.wait_for_selector("#tabs:not([hidden])", timeout=15000)
    page.click("nav button[data-tab=bridges]")
    row = page.locator("#bridge-table tr[data-bridge='to-b']")
    row.wait_for(timeout=15000)
    assert row.locator("td").nth(1).inner_text() == "site-b"
    row.get_by_role("button", name="Pause").click()
    row.get_by_role("button", name="Resume").wait_for(timeout=15000)
    assert row.locator("td").nth(2).inner_text() == "paused"
    assert api(node, "/bridges")["bridges"][0]["paused"] is True
    shot(page, "console-bridges.png")
    row.get_by_role("button", name="Resume").click()
    row.get_by_role("button", name="Pause").wait_for(timeout=15000)
    assert api(node, "/bridges")["bridges"][0]["paused"] is False


def test_opens_without_a_login_when_security_is_off(tmp_path, page):
    open_node = NodeProcess(tmp_path, http=True).start()
    try:
        page.goto(open_node.http_url + "/console")
        page.wait_for_selector("#tabs:not([hidden])", timeout=15000)
        assert not page.is_visible("#login")
        page.wait_for_function(
            "document.getElementById('node').textContent === 'test-node'", timeout=15000
        )
    finally:
        open_node.stop()
