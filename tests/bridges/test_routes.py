"""Multi-hop routes: ``site-c::x`` sent at site-a travels A -> B -> C when A routes site-c via
site-b; once and in order through cuts of the A-B link and a kill -9 of B, with one trace id
from A to C in the event logs, and the route table checked at load."""

from __future__ import annotations

import json
import re
import signal
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from nodekit import NodeProcess
from sitekit import (
    Drain,
    Repeater,
    bridge_toml,
    check_once_in_order,
    collect,
    dead_letters,
    send_all,
    wait_log,
)
from wanproxy import WanProxy

from waystation.config import ConfigError, parse_config

pytestmark = pytest.mark.timeout(180)

EVENT_LOG = '\n[node.event_log]\nenabled = true\nformat = "jsonl"\n'
# site-d: a node site-b has no bridge or route to
ROUTES = (
    '\n[[routes]]\nnode = "site-c"\nvia = "site-b"\n\n[[routes]]\nnode = "site-d"\nvia = "site-b"\n'
)


@dataclass
class Chain:
    """site-a -> (WanProxy) -> site-b -> site-c; only site-a has the route to site-c."""

    a: NodeProcess
    b: NodeProcess
    c: NodeProcess
    proxy: WanProxy

    def stop(self) -> None:
        for n in (self.a, self.b, self.c):
            try:
                n.stop()
            except Exception:
                n.kill9()
        self.proxy.stop()


def start_chain(tmp: Path, routes: str = ROUTES) -> Chain:
    c = NodeProcess(tmp / "site-c", name="site-c", extra_config=EVENT_LOG)
    b = NodeProcess(
        tmp / "site-b",
        name="site-b",
        extra_config=bridge_toml("to-site-c", "site-c", [c.stomp_port]) + EVENT_LOG,
    )
    proxy = WanProxy(b.stomp_port).start()
    a_bridge = bridge_toml("to-site-b", "site-b", [proxy.port], confirmation_window=50)
    a = NodeProcess(tmp / "site-a", name="site-a", extra_config=a_bridge + routes + EVENT_LOG)
    sites = Chain(a, b, c, proxy)
    try:
        for n in (c, b, a):
            n.start()
    except BaseException:
        sites.stop()
        raise
    return sites


@pytest.fixture
def chain(tmp_path: Path) -> Iterator[Chain]:
    sites = start_chain(tmp_path)
    try:
        yield sites
    finally:
        sites.stop()


def events(node: NodeProcess) -> list[dict[str, object]]:
    files = sorted((node.workdir / "data" / "events").glob("events-*.jsonl"))
    assert files, f"no event log under {node.workdir}"
    return [json.loads(line) for f in files for line in f.read_text().splitlines()]


def test_routed_messages_arrive_once_in_order_through_cuts_with_one_trace(chain: Chain) -> None:
    chain.proxy.set_bandwidth(60_000)  # slow enough that cuts land mid-transfer,
    chain.proxy.set_latency(0.05)  # with receipts on the way back: A resends what B has
    cutter = Repeater(0.4, chain.proxy.cut)
    cutter.start()
    try:
        sent = [f"m{i:04d}" + "." * 200 for i in range(300)]  # seconds through the proxy
        confirmed = send_all(chain.a.stomp_port, "site-c::orders", sent, batch=100)
        assert confirmed == sent
        received = collect(chain.c.stomp_port, "orders", confirmed, timeout=90)
        cuts = cutter.stop()
    finally:
        cutter.stop()
    check_once_in_order(sent, confirmed, received)
    assert cuts >= 2 and chain.proxy.stats()["connections_cut"] >= 2
    for n in (chain.a, chain.b):
        assert "dead-lettered" not in n.log()
    chain.stop()  # flush the event logs

    hops: dict[str, list[tuple[str, str]]] = defaultdict(list)
    duplicates_at_b = 0
    for node in (chain.a, chain.b, chain.c):
        for r in events(node):
            if r["trace_id"]:
                hops[str(r["trace_id"])].append((node.name, str(r["event"])))
            if node is chain.b and r["event"] == "dropped" and r.get("reason") == "duplicate":
                duplicates_at_b += 1
    assert duplicates_at_b >= 1  # the cuts made A resend what B had stored: B dropped it
    traces = [t for t, h in hops.items() if ("site-a", "accepted") in h]
    assert len(traces) == len(sent)
    for t in traces:
        h = hops[t]
        for hop in (
            ("site-a", "forwarded"),
            ("site-b", "accepted"),
            ("site-b", "forwarded"),
            ("site-c", "accepted"),
            ("site-c", "delivered"),
        ):
            assert hop in h, (t, h)
        assert h.count(("site-c", "delivered")) == 1, (t, h)  # A's resends dropped at B


def test_a_kill_of_the_middle_node_loses_and_doubles_nothing(chain: Chain) -> None:
    chain.proxy.set_bandwidth(60_000)  # about 2 s for the messages to cross A -> B
    chain.proxy.set_latency(0.05)
    sent = [f"k{i:04d}" + "." * 200 for i in range(300)]
    assert send_all(chain.a.stomp_port, "site-c::orders", sent) == sent  # stored at A
    d = Drain(chain.c.stomp_port, "orders")
    try:
        d.wait_for(60, 30)
        chain.b.kill9()  # mid-flow: some at C, some in B, the rest still at A
        assert len(d.bodies()) < len(sent)
        chain.b.start()
        d.wait_all(sent, 90)
        time.sleep(0.5)  # any late copy
        check_once_in_order(sent, sent, d.bodies())
    finally:
        d.close()
    assert len(re.findall(r"bridge to-site-b: connected to", chain.a.log())) >= 2


def test_a_hop_without_a_way_on_dead_letters_with_the_full_destination(chain: Chain) -> None:
    """site-a routes site-d via site-b, which has no way on: dead-lettered at site-b."""
    assert send_all(chain.a.stomp_port, "site-d::orders", ["lost"]) == ["lost"]
    (dead,) = dead_letters(chain.b.stomp_port, "invalid-remote-node")
    assert dead["body"] == "lost"
    assert dead["_WS_ORIG_ADDRESS"] == "site-d::orders"


def test_a_route_loop_between_nodes_is_dead_lettered_where_it_closes(tmp_path: Path) -> None:
    """site-a routes site-c via site-b and site-b routes it back via site-a: the message
    carries the nodes it passed and is dead-lettered as a loop when it returns to site-a."""
    b = NodeProcess(tmp_path / "site-b", name="site-b")
    a = NodeProcess(
        tmp_path / "site-a",
        name="site-a",
        extra_config=bridge_toml("to-site-b", "site-b", [b.stomp_port])
        + '\n[[routes]]\nnode = "site-c"\nvia = "site-b"\n',
    )
    with b.config_path.open("a") as f:  # (site-a's port is known only now)
        f.write(bridge_toml("to-site-a", "site-a", [a.stomp_port]))
        f.write('\n[[routes]]\nnode = "site-c"\nvia = "site-a"\n')
    try:
        a.start()
        b.start()
        assert send_all(a.stomp_port, "site-c::orders", ["looping"]) == ["looping"]
        (dead,) = dead_letters(a.stomp_port, "route-loop")
        assert dead["body"] == "looping"
        assert "route loop: site-a -> site-b -> site-a (for 'site-c')" in dead["_WS_DLQ_DETAIL"]
        assert "dead-lettered" not in b.log() and "route-loop" not in b.log()
    finally:
        for n in (a, b):
            n.stop()


def test_a_route_added_by_reload_applies_to_the_next_message(tmp_path: Path) -> None:
    sites = start_chain(tmp_path, routes="")
    try:
        assert send_all(sites.a.stomp_port, "site-c::orders", ["early"]) == ["early"]
        (dead,) = dead_letters(sites.a.stomp_port, "invalid-remote-node")
        assert dead["body"] == "early"
        with sites.a.config_path.open("a") as f:
            f.write(ROUTES)
        sites.a.proc.send_signal(signal.SIGHUP)
        wait_log(sites.a, r"reload: routes replaced", 10)
        later = [f"l{i}" for i in range(20)]
        assert send_all(sites.a.stomp_port, "site-c::orders", later) == later
        check_once_in_order(later, later, collect(sites.c.stomp_port, "orders", later, 30))
    finally:
        sites.stop()


# -- config ---------------------------------------------------------------------------------

BASE = """
[node]
name = "site-a"
persistence = false

[[bridges]]
name = "to-b"
remote_node = "site-b"
urls = ["tcp://127.0.0.1:1"]

[[bridges]]
name = "to-rabbit"
remote_node = "rabbit"
foreign = "stomp"
urls = ["tcp://127.0.0.1:2"]
"""


def routes(*pairs: tuple[str, str]) -> str:
    return "".join(f'\n[[routes]]\nnode = "{n}"\nvia = "{v}"\n' for n, v in pairs)


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse_config(BASE + text, "a.toml")
    return e.value.problems


def test_a_route_through_a_bridged_node_reaches_the_engine() -> None:
    from waystation.gateway.core_config import engine_config

    cfg = parse_config(BASE + routes(("site-c", "site-b"), ("site-d", "site-b")), "a.toml")
    assert engine_config(cfg).routes == {"site-c": "site-b", "site-d": "site-b"}
    assert engine_config(parse_config(BASE, "a.toml")).routes == {}


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        (
            [("site-c", "site-x")],
            "[[routes]][0].via: no [[bridges]] entry to node 'site-x' (bridged nodes: 'site-b')",
        ),
        ([("site-c", "rabbit")], "[[routes]][0].via: no [[bridges]] entry to node 'rabbit'"),
        ([("site-a", "site-b")], "[[routes]][0].node: 'site-a' is this node's own name"),
        ([("site-c", "site-a")], "[[routes]][0].via: 'site-a' is this node's own name"),
        ([("site-c", "site-c")], "[[routes]][0].via: a route to 'site-c' cannot go via itself"),
        (
            [("site-c", "site-b"), ("site-c", "site-b")],
            "[[routes]][1].node: duplicate route to 'site-c' (first at [[routes]][0])",
        ),
        (
            [("site-b", "site-b")],
            "[[routes]][0].via: a route to 'site-b' cannot go via itself",
        ),
        ([("x::y", "site-b")], "[[routes]][0].node: a node name must not contain '::'"),
    ],
)
def test_route_table_errors_name_the_key(pairs: list[tuple[str, str]], expected: str) -> None:
    found = problems(routes(*pairs))
    assert any(expected in p for p in found), found
    assert all(p.startswith("a.toml: ") for p in found)


def test_a_route_to_a_bridged_node_is_refused() -> None:
    to_c = '\n[[bridges]]\nname = "to-c"\nremote_node = "site-c"\nurls = ["tcp://127.0.0.1:3"]\n'
    found = problems(to_c + routes(("site-c", "site-b")))
    assert any("'site-c' has a bridge of its own ('to-c')" in p for p in found), found
