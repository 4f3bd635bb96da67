"""Every reason a bridge gives a message up, produced for real: the message lands in the
source node's DLQ with ``_WS_DLQ_REASON`` and its original address, and the bridge goes on
with the messages behind it."""

from __future__ import annotations

import pytest
from nodekit import NodeProcess, free_port
from sitekit import (
    Sites,
    bridge_toml,
    collect,
    dead_letters,
    send_all,
    two_sites,
    wait_log,
)
from wanproxy import WanProxy

pytestmark = pytest.mark.timeout(120)

SITE_B = """
[[users]]
name = "bridge"
password = "pw"
roles = ["bridge"]

[[users]]
name = "app"
password = "app"
roles = ["app"]

[[permissions]]
match = "#"
send = ["bridge", "app"]
consume = ["app"]
create_durable_queue = ["bridge", "app"]
create_non_durable_queue = ["app"]

[[permissions]]
match = "secret.#"
consume = ["app"]

[address_settings."strict.#"]
auto_create_queues = false
"""


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dead-letters")
    s = two_sites(
        tmp,
        b_extra=SITE_B,
        bridge={"user": "bridge", "password": "pw"},
        b_limits={"max_body_size": "4KiB", "max_header_length": "1KiB"},
        start=False,
    )
    # more bridges from site-a: to-site-c is site-b with a wrong password, to-site-d dials
    # nothing, to-site-e is a node of its own behind a proxy that can black-hole the link
    e = NodeProcess(tmp / "site-e", extra_config=SITE_B, name="site-e")
    dark = WanProxy(e.stomp_port).start()
    s.proxies.append(dark)
    extra = bridge_toml(
        "to-site-c", "site-c", [s.proxy.port], user="bridge", password="wrong",
        routing_timeout="1s",
    )  # fmt: skip
    extra += bridge_toml("to-site-d", "site-d", [free_port()], routing_timeout="1s")
    extra += bridge_toml(
        "to-site-e", "site-e", [dark.port], user="bridge", password="pw",
        liveness_timeout="1s", heartbeat="250ms", in_doubt_timeout="2s",
    )  # fmt: skip
    with s.a.config_path.open("a") as f:
        f.write(extra)
    try:
        s.b.start()
        e.start()
        s.a.start()
    except BaseException:
        s.stop()
        e.stop()
        raise
    yield s
    s.stop()
    e.stop()


def arrived_at_b(sites: Sites, body: str) -> list[str]:
    return collect(sites.b.stomp_port, "orders", [body], 15, login="app", passcode="app")


def _check(dl: dict[str, str], body: str, address: str) -> None:
    assert dl["body"] == body
    assert dl["_WS_ORIG_ADDRESS"] == address
    assert dl.get("_WS_DLQ_DETAIL")


def test_unknown_remote_destination(sites: Sites):
    a = sites.a.stomp_port
    assert send_all(a, "site-b::strict.nowhere", ["d1"]) == ["d1"]
    assert send_all(a, "site-b::orders", ["after-d1"]) == ["after-d1"]
    (dl,) = dead_letters(a, "invalid-remote-destination")
    _check(dl, "d1", "strict.nowhere")
    assert "after-d1" in arrived_at_b(sites, "after-d1")


def test_remote_authorization(sites: Sites):
    a = sites.a.stomp_port
    assert send_all(a, "site-b::secret.plans", ["s1"]) == ["s1"]
    assert send_all(a, "site-b::orders", ["after-s1"]) == ["after-s1"]
    (dl,) = dead_letters(a, "remote-authorization")
    _check(dl, "s1", "secret.plans")
    assert "not authorized" in dl["_WS_DLQ_DETAIL"]
    assert "after-s1" in arrived_at_b(sites, "after-s1")


def test_message_too_large_for_the_remote(sites: Sites):
    a = sites.a.stomp_port
    big = "x" * 8192
    assert send_all(a, "site-b::orders", [big, "after-big"]) == [big, "after-big"]
    (dl,) = dead_letters(a, "message-too-large")
    _check(dl, big, "orders")
    assert "after-big" in arrived_at_b(sites, "after-big")


def test_header_too_large_is_found_without_a_receipt_id(sites: Sites):
    """The remote rejects an oversized header before it can read the receipt: the bridge
    resends what was in flight one at a time to find the culprit."""
    a = sites.a.stomp_port
    assert send_all(a, "site-b::orders", ["h1"], headers={"note": "y" * 2000}) == ["h1"]
    assert send_all(a, "site-b::orders", ["after-h1"]) == ["after-h1"]
    (dl,) = dead_letters(a, "message-too-large")
    _check(dl, "h1", "orders")
    assert "after-h1" in arrived_at_b(sites, "after-h1")


def test_unknown_remote_node(sites: Sites):
    a = sites.a.stomp_port
    assert send_all(a, "site-zz::orders", ["z1"]) == ["z1"]
    (dl,) = dead_letters(a, "invalid-remote-node")
    assert dl["body"] == "z1"


def test_remote_authentication_after_routing_timeout(sites: Sites):
    a = sites.a.stomp_port
    wait_log(sites.a, r"bridge to-site-c: retrying at .*credentials refused", 10)
    assert send_all(a, "site-c::orders", ["c1"]) == ["c1"]
    (dl,) = dead_letters(a, "remote-authentication", timeout=10)
    _check(dl, "c1", "orders")
    assert dl["_WS_ROUTE_TO_NODE"] == "site-c"


def test_routing_timeout_while_the_link_is_down(sites: Sites):
    a = sites.a.stomp_port
    assert send_all(a, "site-d::orders", ["t1", "t2"]) == ["t1", "t2"]
    dls = dead_letters(a, "routing-timeout", expect=2, timeout=10)
    assert [d["body"] for d in dls] == ["t1", "t2"]
    _check(dls[0], "t1", "orders")


def test_in_doubt_timeout(sites: Sites):
    a = sites.a.stomp_port
    dark = sites.proxies[1]
    wait_log(sites.a, r"bridge to-site-e: connected", 10)
    dark.blackhole(True)
    try:
        assert send_all(a, "site-e::orders", ["e1"]) == ["e1"]  # sent into the hole
        (dl,) = dead_letters(a, "in-doubt-timeout", timeout=15)
        _check(dl, "e1", "orders")
        assert "never confirmed" in dl["_WS_DLQ_DETAIL"]
    finally:
        dark.blackhole(False)
