"""Node identity on bridge links: each side states its node name (``ws-node``); a bridge
refuses a remote that is not the node it is configured for, and a routing user bound to node
names may claim only those."""

from __future__ import annotations

import pytest
from nodekit import NodeProcess
from sitekit import bridge_toml, check_once_in_order, collect, send_all, wait_log
from stompkit import connect

pytestmark = pytest.mark.timeout(120)

SECURED_B = """
[security]
enabled = true

[[users]]
name = "router"
password = "pw"
roles = ["bridge"]
nodes = ["{claim}"]

[[permissions]]
match = "#"
send = ["bridge"]
consume = ["bridge"]
create_durable_queue = ["bridge"]
"""


def test_a_bridge_to_the_wrong_node_is_refused_and_delivers_nothing(tmp_path):
    b = NodeProcess(tmp_path / "b", name="site-b")
    b.start()
    # site-a believes site-c listens there: it is site-b
    a = NodeProcess(
        tmp_path / "a",
        name="site-a",
        extra_config=bridge_toml("to-c", "site-c", [b.stomp_port]),
    )
    a.start()
    try:
        assert send_all(a.stomp_port, "site-c::orders", ["x1", "x2"]) == ["x1", "x2"]
        wait_log(a, r"wrong node: .* is node 'site-b', this bridge is to 'site-c'", 10)
        conn, listener = connect(b.stomp_port)
        conn.subscribe("/queue/orders", id="1", ack="auto")
        assert not listener.wait(lambda: bool(listener.messages), 1.0)  # nothing crossed
        conn.disconnect()
    finally:
        a.stop()
        b.stop()


@pytest.mark.parametrize("claim", ["site-a", "site-x"])
def test_a_routing_user_claims_only_its_node_names(tmp_path, claim):
    b = NodeProcess(tmp_path / "b", name="site-b", extra_config=SECURED_B.format(claim=claim))
    b.start()
    a = NodeProcess(
        tmp_path / "a",
        name="site-a",
        extra_config=bridge_toml("to-b", "site-b", [b.stomp_port], user="router", password="pw"),
    )
    a.start()
    try:
        bodies = [f"m{i}" for i in range(20)]
        assert send_all(a.stomp_port, "site-b::orders", bodies) == bodies
        if claim == "site-a":
            got = collect(b.stomp_port, "orders", bodies, 20, login="router", passcode="pw")
            check_once_in_order(bodies, bodies, got)
        else:
            wait_log(a, r"user 'router' may not claim to be node 'site-a'", 10)
    finally:
        a.stop()
        b.stop()
