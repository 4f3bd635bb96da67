"""What another web site can make the operator's browser send to the admin API, by hand:
the requests of a cross-site form, a ``no-cors`` fetch and a DNS-rebinding page, against a
real node with security off (this host administers) and on (the browser holds a login).
Nothing they ask for may happen; tools sending JSON to the listener's own name still work.
(tests/browser/test_admin_csrf_browser.py sends the same from a real Chromium.)"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import aiohttp
import pytest
from nodekit import NodeProcess
from opskit import ADMIN, OPS, USERS, secured_node
from stompkit import unique

API = "/admin/api/v1"
EVIL = "http://evil.example:8000"


@pytest.fixture(scope="module")
def open_node(tmp_path_factory):
    """Security off: the admin API answers this host without a login."""
    n = NodeProcess(tmp_path_factory.mktemp("csrf-open"), http=True).start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = secured_node(tmp_path_factory.mktemp("csrf-secured")).start()
    yield n
    n.stop()


def call(
    node: NodeProcess,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    data: bytes | None = None,
    body: Any = None,
    auth: aiohttp.BasicAuth | None = None,
) -> tuple[int, str]:
    async def go() -> tuple[int, str]:
        async with (
            aiohttp.ClientSession() as s,
            s.request(
                method,
                node.http_url + path,
                headers=headers,
                data=data,
                json=body,
                auth=auth,
                allow_redirects=False,
            ) as r,
        ):
            text = await r.text()
            return r.status, text

    return asyncio.run(go())


def diverts(node: NodeProcess, auth: aiohttp.BasicAuth | None = None) -> list[str]:
    status, text = call(node, "GET", API + "/diverts", auth=auth)
    assert status == 200, text
    return [d["name"] for d in json.loads(text)["diverts"]]


def divert_body(name: str) -> str:
    return f'{{"name": "{name}", "address": "orders", "target": "stolen"}}'


def test_a_plain_text_form_cannot_create_a_divert(open_node):
    name = unique("d")
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        status, text = call(
            open_node,
            "POST",
            API + "/diverts",
            headers={"Content-Type": ctype},
            data=divert_body(name).encode(),
        )
        assert status == 415, (ctype, status, text)
    assert name not in diverts(open_node)


def test_an_empty_form_cannot_pause_reload_or_move(open_node):
    q = unique("q")
    assert call(open_node, "POST", API + "/queues", body={"name": q})[0] == 201
    for path in (f"/queues/{q}/pause", "/reload", f"/queues/{q}/move"):
        status, text = call(
            open_node,
            "POST",
            API + path,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            data=b"",
        )
        assert status == 415, (path, status, text)
    status, text = call(open_node, "GET", API + f"/queues/{q}")
    assert status == 200 and '"paused": false' in text


def test_another_origin_is_refused_even_with_json_or_no_body(open_node):
    q = unique("q")
    assert call(open_node, "POST", API + "/queues", body={"name": q})[0] == 201
    name = unique("d")
    # a no-cors fetch carries its page's Origin; a pause needs no body at all
    status, _ = call(open_node, "POST", API + f"/queues/{q}/pause", headers={"Origin": EVIL})
    assert status == 403
    status, _ = call(
        open_node,
        "POST",
        API + "/diverts",
        headers={"Origin": EVIL, "Content-Type": "application/json"},
        data=divert_body(name).encode(),
    )
    assert status == 403
    # same host, another port (any other local web app) is another origin too
    other = f"http://127.0.0.1:{open_node.http_port + 1}"
    status, _ = call(open_node, "POST", API + f"/queues/{q}/pause", headers={"Origin": other})
    assert status == 403
    status, _ = call(open_node, "POST", API + f"/queues/{q}/pause", headers={"Origin": "null"})
    assert status == 403
    # a browser that sends no Origin but marks the request cross-site
    status, _ = call(
        open_node, "POST", API + f"/queues/{q}/pause", headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert status == 403
    status, text = call(open_node, "GET", API + f"/queues/{q}")
    assert '"paused": false' in text and name not in diverts(open_node)
    # the console's own origin (and a tool with none) may
    own = f"http://127.0.0.1:{open_node.http_port}"
    status, text = call(
        open_node,
        "POST",
        API + f"/queues/{q}/pause",
        headers={"Origin": own, "Sec-Fetch-Site": "same-origin"},
        body={},
    )
    assert status == 200 and '"paused": true' in text, text


def test_a_foreign_host_is_refused_for_reads_too(open_node):
    q = unique("secret")
    assert call(open_node, "POST", API + "/queues", body={"name": q})[0] == 201
    for path in ("/queues", f"/queues/{q}/messages", "/addresses", "/overview"):
        status, text = call(open_node, "GET", API + path, headers={"Host": "evil.example:8000"})
        assert status == 421 and q not in text, (path, status, text)
    # rebinding to the node's port under another name, and the right name on another port
    port = open_node.http_port
    for host in (f"evil.example:{port}", f"127.0.0.1:{port + 1}", "127.0.0.1"):
        assert call(open_node, "GET", API + "/queues", headers={"Host": host})[0] == 421, host
    assert call(open_node, "GET", "/console/", headers={"Host": "evil.example"})[0] == 421
    # the listener's loopback names
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"LOCALHOST:{port}"):
        assert call(open_node, "GET", API + "/queues", headers={"Host": host})[0] == 200, host
    assert call(open_node, "GET", "/console/")[0] == 200


def test_a_request_without_host_is_refused(open_node):
    with socket.create_connection(("127.0.0.1", open_node.http_port), timeout=10) as s:
        s.sendall(f"GET {API}/queues HTTP/1.0\r\n\r\n".encode())
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.split(b" ")[1] == b"421", answer[:100]


def test_with_security_on_a_cached_login_does_not_help_another_site(node):
    name = unique("d")
    # 401 without a Basic challenge: a browser never prompts, so never keeps a login
    status, _ = call(node, "GET", API + "/queues")
    assert status == 401
    for headers, data in (
        ({"Content-Type": "text/plain"}, divert_body(name).encode()),
        ({"Origin": EVIL, "Content-Type": "application/json"}, divert_body(name).encode()),
        ({"Sec-Fetch-Site": "same-site", "Content-Type": "application/json"}, b"{}"),
    ):
        status, text = call(node, "POST", API + "/diverts", headers=headers, data=data, auth=ADMIN)
        assert status in (403, 415), (headers, status, text)
    assert call(node, "GET", API + "/queues", headers={"Host": "evil.example"}, auth=ADMIN)[0] == (
        421
    )
    assert name not in diverts(node, ADMIN)
    # a tool: JSON to the listener's own name
    status, text = call(
        node,
        "POST",
        API + "/diverts",
        body={"name": name, "address": "orders", "target": "audit"},
        auth=ADMIN,
    )
    assert status == 201, text
    assert call(node, "DELETE", API + f"/diverts/{name}", auth=ADMIN)[0] == 200


def test_refusals_are_audited(node):
    call(node, "GET", API + "/queues", headers={"Host": "evil.example"}, auth=ADMIN)
    assert "refused GET /admin/api/v1/queues" in node.log()
    assert "does not name this listener" in node.log()


def test_allowed_hosts_and_origins_extend_the_listener_names(tmp_path):
    admin = (
        'admin = { allowed_hosts = ["ops.example", "lb.example:9443"], '
        'allowed_origins = ["https://console.example"] }'
    )
    n = NodeProcess(tmp_path / "n", http=admin).start()
    try:
        for host, want in (
            ("ops.example", 200),
            ("ops.example:1234", 200),
            ("lb.example:9443", 200),
            ("lb.example:9444", 421),
            ("console.example", 421),
        ):
            got = call(n, "GET", API + "/queues", headers={"Host": host})[0]
            assert got == want, (host, got)
        q = unique("q")
        status, text = call(
            n,
            "POST",
            API + "/queues",
            headers={"Origin": "https://console.example", "Sec-Fetch-Site": "cross-site"},
            body={"name": q},
        )
        assert status == 201, text
        status, _ = call(
            n, "POST", API + "/queues", headers={"Origin": "https://x.example"}, body={"name": q}
        )
        assert status == 403
    finally:
        n.stop()


def test_move_into_a_queue_the_manager_may_not_manage_is_refused(tmp_path):
    """``ops`` manages ``ops.#`` only: no way of spelling the admin-only DLQ gets it there."""
    extra = '[[queues]]\nname = "ops.alias"\naddress = "DLQ"\n'
    n_name = "ops.node"  # a node whose name is inside the manager's pattern
    n = NodeProcess(tmp_path / "n", USERS + extra, name=n_name, http=True).start()
    try:
        src = unique("ops.src")
        assert call(n, "POST", API + "/queues", body={"name": src}, auth=OPS)[0] == 201
        for target in ("DLQ", f"{n_name}::DLQ", "ops.other::DLQ", "ops.alias"):
            status, text = call(
                n, "POST", API + f"/queues/{src}/move", body={"target": target}, auth=OPS
            )
            assert status == 403, (target, status, text)
            status, text = call(
                n,
                "POST",
                API + "/diverts",
                body={"name": unique("d"), "address": src, "target": target},
                auth=OPS,
            )
            assert status == 403, (target, status, text)
        assert "no manage permission on 'DLQ'" in n.log()
        # inside the pattern, and the node's own name for a queue in it: allowed
        for target in (unique("ops.dst"), f"{n_name}::{unique('ops.dst')}"):
            status, text = call(
                n, "POST", API + f"/queues/{src}/move", body={"target": target}, auth=OPS
            )
            assert status == 200, (target, status, text)
        # the admin may move anywhere, another node's store-and-forward queue included
        status, text = call(
            n, "POST", API + f"/queues/{src}/move", body={"target": "DLQ"}, auth=ADMIN
        )
        assert status == 200, text
    finally:
        n.stop()
