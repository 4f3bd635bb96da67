"""Another web site against the admin API, in a real Chromium: a page served from another
origin (a small aiohttp server on another port) sends a plain-text form and ``no-cors``
fetches at the node, with security off (this host administers) and with security on while
the browser holds the admin's credentials for the node.  Nothing may change on the node.
A page reaching the node under another name (DNS rebinding) is refused too."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from browserkit import launch
from nodekit import NodeProcess, free_port
from stompkit import unique

API = "/admin/api/v1"
USERS = """
[[users]]
name = "admin"
password = "adminpw"
roles = ["admin"]

[[permissions]]
match = "#"
send = ["admin"]
consume = ["admin"]
browse = ["admin"]
create_durable_queue = ["admin"]
manage = ["admin"]
"""
# The classic plain-text form: its one field's name and value join into a JSON document.
ATTACK = """<!doctype html><html><body>
<form id="f" method="POST" enctype="text/plain" action="{node}{api}/diverts" target="sink">
  <input name='{{"name": "{divert}", "address": "orders", "target": "stolen", "pad": "' value='"}}'>
</form>
<iframe name="sink"></iframe>
<script>
async function attack() {{
  const opts = (body, type) => ({{method: "POST", mode: "no-cors", credentials: "include",
    body, headers: type ? {{"Content-Type": type}} : {{}}}});
  const tries = [
    fetch("{node}{api}/queues/{queue}/pause", opts(undefined)),
    fetch("{node}{api}/queues/{queue}/pause", opts("{{}}", "text/plain")),
    fetch("{node}{api}/diverts", opts('{{"name": "{divert}2", "address": "orders", "target": "x"}}', "text/plain")),
    fetch("{node}{api}/reload", opts("", "application/x-www-form-urlencoded")),
    fetch("{node}{api}/queues/{queue}/move", opts('{{"target": "stolen"}}', "text/plain")),
  ];
  await Promise.allSettled(tries);
  document.getElementById("f").submit();
}}
attack().then(() => {{ document.body.dataset.done = "1"; }});
</script></body></html>"""


class AttackSite:
    """The other web site, on its own thread and port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.page = ""
        self.loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_get("/", self._serve)
        self.runner = web.AppRunner(app, access_log=None)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    async def _serve(self, _: web.Request) -> web.Response:
        return web.Response(text=self.page, content_type="text/html")

    async def _start(self) -> None:
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    def start(self) -> AttackSite:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def site() -> Iterator[AttackSite]:
    s = AttackSite().start()
    yield s
    s.stop()


def api(node: NodeProcess, method: str, path: str, auth: bool = False, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(node.http_url + API + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(b"admin:adminpw").decode())
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def run_attack(playwright: Any, chromium: str, node: NodeProcess, site: AttackSite, auth: bool):
    """Open the other site's page in a browser that (``auth``) holds the admin's login for
    the node, let it attack, and check that nothing changed."""
    queue, divert = unique("q"), unique("evil")
    api(node, "POST", "/queues", auth, {"name": queue})
    site.page = ATTACK.format(node=node.http_url, api=API, queue=queue, divert=divert)
    browser = launch(playwright, chromium)
    try:
        context = browser.new_context()
        if auth:  # what a browser does once it holds Basic credentials for the node
            login = "Basic " + base64.b64encode(b"admin:adminpw").decode()

            def with_login(route: Any) -> None:
                route.continue_(headers={**route.request.headers, "authorization": login})

            context.route(node.http_url + "/**", with_login)
        page = context.new_page()
        if auth:  # the browser does hold a working login for the node
            answer = page.goto(node.http_url + API + "/queues")
            assert answer is not None and answer.status == 200
        page.goto(site.url + "/")
        page.wait_for_function("document.body.dataset.done === '1'", timeout=15000)
        page.wait_for_timeout(1000)  # the form's navigation in the frame
    finally:
        browser.close()
    names = [d["name"] for d in api(node, "GET", "/diverts", auth)["diverts"]]
    assert divert not in names and divert + "2" not in names
    info = api(node, "GET", f"/queues/{queue}", auth)
    assert info["paused"] is False
    log = node.log()
    assert f"refused POST {API}/diverts" in log  # the requests did reach the node
    assert f"refused POST {API}/queues/{queue}/pause" in log


def test_another_site_changes_nothing_with_security_off(tmp_path, playwright, chromium, site):
    node = NodeProcess(tmp_path / "n", http=True).start()
    try:
        run_attack(playwright, chromium, node, site, auth=False)
    finally:
        node.stop()


def test_another_site_changes_nothing_while_the_browser_holds_a_login(
    tmp_path, playwright, chromium, site
):
    node = NodeProcess(tmp_path / "n", USERS, http=True).start()
    try:
        run_attack(playwright, chromium, node, site, auth=True)
    finally:
        node.stop()


def test_a_rebound_name_reads_nothing(tmp_path, playwright, chromium):
    """A page whose name resolves to the node (DNS rebinding) is same-origin with it, so it
    could read the answers: the node refuses a Host that is not its own."""
    node = NodeProcess(tmp_path / "n", http=True).start()
    rules = "--host-resolver-rules=MAP rebound.test 127.0.0.1 , MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"
    browser = launch(playwright, chromium, rules)
    try:
        secret = unique("secret")
        api(node, "POST", "/queues", False, {"name": secret})
        page = browser.new_page()
        answer = page.goto(f"http://rebound.test:{node.http_port}{API}/queues")
        assert answer is not None and answer.status == 421
        assert secret not in page.content()
        answer = page.goto(f"http://127.0.0.1:{node.http_port}{API}/queues")
        assert answer is not None and answer.status == 200 and secret in page.content()
    finally:
        browser.close()
        node.stop()
