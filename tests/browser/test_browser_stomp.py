"""A real browser page using @stomp/stompjs: headless Debian chromium driven by Playwright.

Scenario 1: the page talks STOMP over a native WebSocket at ``/stomp``.  Scenario 2: the
browser goes through a squid that denies WebSocket (CONNECT and upgrades), even for
loopback; the same page, with sockjs-client at ``/sockjs/stomp``, must fall back to HTTP
streaming or polling.  Each scenario subscribes to a queue and a topic, sends and
receives, and exchanges messages with stomp.py over TCP; a screenshot of the page is kept
as evidence in tests/browser/artifacts (``WAYSTATION_EVIDENCE=1`` also refreshes the
committed copies in docs/evidence).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from browserkit import NOT_PROXIED, keep_evidence, launch, screenshot
from nodekit import NodeProcess
from squidkit import Squid
from stompkit import connect, unique


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[NodeProcess]:
    n = NodeProcess(tmp_path_factory.mktemp("browser-node"), http=True).start()
    yield n
    n.stop()


@pytest.fixture
def squid() -> Iterator[Squid]:
    with Squid(deny_connect=True, deny_upgrade=True) as s:
        yield s


def exchange(page: Any, node: NodeProcess, q: str, t: str, shot: str) -> dict[str, Any]:
    """Once the page has subscribed: it sends to its own queue and topic and to a TCP
    client's queue, the TCP client sends to the page's queue and topic; all must arrive."""
    page.wait_for_function("window.stompTest.ready", timeout=20000)
    out = unique("to-tcp")
    tcp, lst = connect(node.stomp_port)
    tcp.subscribe(f"/queue/{out}", id="o", headers={"receipt": "s"})
    lst.wait_receipt("s")
    for dest, body in ((f"/queue/{q}", "page to its queue"), (f"/topic/{t}", "page to its topic")):
        page.evaluate("([d, b]) => window.sendTo(d, b)", [dest, body])
    page.evaluate("([d, b]) => window.sendTo(d, b)", [f"/queue/{out}", "page to tcp"])
    tcp.send(f"/queue/{q}", "tcp to the page's queue")
    tcp.send(f"/topic/{t}", "tcp to the page's topic")
    page.wait_for_function("window.stompTest.received.length >= 4", timeout=15000)
    assert [m.body for m in lst.wait_messages(1)] == ["page to tcp"]
    page.evaluate("(t) => window.note(t)", "stomp.py over TCP received: page to tcp")
    tcp.disconnect()
    state: dict[str, Any] = page.evaluate("window.stompTest")
    assert sorted((m["destination"], m["body"]) for m in state["received"]) == sorted(
        [
            (f"/queue/{q}", "page to its queue"),
            (f"/queue/{q}", "tcp to the page's queue"),
            (f"/topic/{t}", "page to its topic"),
            (f"/topic/{t}", "tcp to the page's topic"),
        ]
    )
    assert state["errors"] == []
    screenshot(page, shot)
    return state


def page_url(server: Any, **params: str) -> str:
    return f"{server.url}/?{urlencode(params)}"


def test_stompjs_over_websocket_at_stomp(node, playwright, chromium, page_server):
    q, t = unique(), unique("t")
    browser = launch(playwright, chromium)
    try:
        page = browser.new_page(viewport={"width": 900, "height": 420})
        ws = f"ws://127.0.0.1:{node.http_port}/stomp"
        page.goto(
            page_url(page_server, mode="ws", url=ws, queue=f"/queue/{q}", topic=f"/topic/{t}")
        )
        state = exchange(page, node, q, t, "stomp-websocket.png")
        assert state["transport"] == "native websocket"
    finally:
        browser.close()
    keep_evidence("stomp-websocket.png", "browser-stomp-websocket.png")


@pytest.mark.parametrize(
    ("transports", "expected", "path", "evidence"),
    [
        (None, "xhr-streaming", "xhr_streaming", "browser-stomp-sockjs-fallback.png"),
        ("websocket,xhr-polling", "xhr-polling", "xhr", None),
    ],
    ids=["default-transports", "polling-only-fallback"],
)
def test_stompjs_through_sockjs_when_a_proxy_blocks_websocket(
    node, playwright, chromium, page_server, squid, transports, expected, path, evidence
):
    q, t = unique(), unique("t")
    bypass = f"--proxy-bypass-list=<-loopback>;{NOT_PROXIED}"  # loopback goes through squid
    browser = launch(playwright, chromium, f"--proxy-server={squid.url}", bypass)
    shot = f"stomp-sockjs-{expected}.png"
    try:
        page = browser.new_page(viewport={"width": 900, "height": 420})
        params = {"mode": "sockjs", "url": f"http://127.0.0.1:{node.http_port}/sockjs/stomp"}
        params["route"] = f"squid {squid.url} (denies CONNECT and WebSocket upgrades)"
        params |= {"queue": f"/queue/{q}", "topic": f"/topic/{t}"}
        if transports:
            params["transports"] = transports
        page.goto(page_url(page_server, **params))
        state = exchange(page, node, q, t, shot)
        assert state["transport"] == f"sockjs: {expected}"
        page.evaluate("window.stopStomp()")
        page.wait_for_function("window.stompTest.closes.length > 0", timeout=10000)
    finally:
        browser.close()
    squid.stop()  # flushes the log, with the streaming request's line
    log = squid.access_log()
    assert "google" not in log
    sockjs = rf"http://127\.0\.0\.1:{node.http_port}/sockjs/stomp"
    # the page itself and every SockJS request went through the proxy...
    assert re.search(rf"TCP_\w+/200 .* GET {sockjs}/info", log), log
    assert re.search(rf"TCP_\w+/200 .* POST {sockjs}/\d+/\w+/{path}\b", log), log
    assert re.search(rf"TCP_\w+/204 .* POST {sockjs}/\d+/\w+/xhr_send", log), log
    # ...and the WebSocket attempt was refused there (a CONNECT, or an upgrade request)
    assert re.search(
        rf"TCP_DENIED/403 .* (CONNECT 127\.0\.0\.1:{node.http_port}|GET {sockjs}/\d+/\w+/websocket)",
        log,
    ), log
    if evidence:
        keep_evidence(shot, evidence)
