"""Links dialled from one side that carry store-and-forward traffic both ways: site-a dials
the hub (site-b) and has ``direction = "both"``; the hub has ``direction = "accept"`` and no
route to site-a.  Messages go both ways, once and in order, through link cuts; the hub refuses
a node it does not accept, and (security on) a user not bound to that node."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from nodekit import NodeProcess
from sitekit import (
    Repeater,
    Sites,
    bridge_toml,
    check_once_in_order,
    collect,
    dead_letters,
    send_all,
    toml_value,
    wait_log,
)
from wanproxy import WanProxy

from waystation.config import ConfigError, parse_config

pytestmark = pytest.mark.timeout(180)


def accept_toml(remote: str, **options: object) -> str:
    """The hub's ``[[bridges]]`` entry for a node that dials in."""
    opts: dict[str, object] = {"name": f"from-{remote}", "remote_node": remote, **options}
    lines = ["[[bridges]]", 'direction = "accept"']
    lines += [f"{k} = {toml_value(v)}" for k, v in opts.items()]
    return "\n" + "\n".join(lines) + "\n"


def dialled_sites(tmp: Path, *, hub_extra: str = "", a_bridge: dict[str, object] | None = None,
                  accept: bool = True, a_extra: str = "") -> Sites:  # fmt: skip
    """The hub (site-b) accepting site-a, a WanProxy in front of it, site-a dialling it."""
    b = NodeProcess(
        tmp / "site-b",
        name="site-b",
        extra_config=(accept_toml("site-a", confirmation_window=50) if accept else "") + hub_extra,
    )
    wan = WanProxy(b.stomp_port).start()
    options = {"direction": "both", "confirmation_window": 50, **(a_bridge or {})}
    a = NodeProcess(
        tmp / "site-a",
        name="site-a",
        extra_config=bridge_toml("to-hub", "site-b", [wan.port], **options) + a_extra,
    )
    return Sites(a, b, [wan]).start()


@pytest.fixture
def sites(tmp_path: Path) -> Iterator[Sites]:
    s = dialled_sites(tmp_path)
    try:
        yield s
    finally:
        s.stop()


def test_traffic_flows_both_ways_over_the_link_site_a_dialled(sites: Sites) -> None:
    wait_log(sites.b, r"node site-a dialled in", 20)
    up = [f"up{i:04d}" for i in range(200)]
    down = [f"down{i:04d}" for i in range(200)]
    assert send_all(sites.a.stomp_port, "site-b::orders", up) == up
    assert send_all(sites.b.stomp_port, "site-a::orders", down) == down
    check_once_in_order(up, up, collect(sites.b.stomp_port, "orders", up, timeout=30))
    check_once_in_order(down, down, collect(sites.a.stomp_port, "orders", down, timeout=30))


def test_the_hub_holds_traffic_until_the_site_dials_in(tmp_path: Path) -> None:
    s = dialled_sites(tmp_path)
    try:
        s.a.stop()  # the site is away: the hub keeps what is sent to it
        down = [f"held{i:03d}" for i in range(100)]
        assert send_all(s.b.stomp_port, "site-a::orders", down) == down
        s.a.start()
        check_once_in_order(down, down, collect(s.a.stomp_port, "orders", down, timeout=30))
    finally:
        s.stop()


def test_both_ways_once_in_order_through_cuts(sites: Sites) -> None:
    wait_log(sites.b, r"node site-a dialled in", 20)
    sites.proxy.set_bandwidth(200_000)
    sites.proxy.set_latency(0.02)
    cutter = Repeater(0.5, sites.proxy.cut)
    cutter.start()
    try:
        up = [f"u{i:04d}" + "." * 100 for i in range(1000)]
        down = [f"d{i:04d}" + "." * 100 for i in range(1000)]
        assert send_all(sites.a.stomp_port, "site-b::orders", up) == up
        assert send_all(sites.b.stomp_port, "site-a::orders", down) == down
        got_up = collect(sites.b.stomp_port, "orders", up, timeout=90)
        got_down = collect(sites.a.stomp_port, "orders", down, timeout=90)
        cuts = cutter.stop()
    finally:
        cutter.stop()
    check_once_in_order(up, up, got_up)
    check_once_in_order(down, down, got_down)
    assert cuts >= 3 and sites.proxy.stats()["connections_cut"] >= 3
    for n in (sites.a, sites.b):
        assert "dead-lettered" not in n.log()


def test_a_hub_without_an_accept_entry_says_why(tmp_path: Path) -> None:
    s = dialled_sites(tmp_path, accept=False, hub_extra=bridge_toml("x", "site-a", [1]))
    try:
        wait_log(s.a, r"refused to send traffic back: .*no dialled-in link from node 'site-a'", 20)
    finally:
        s.stop()


SECURE_HUB = """
[security]
enabled = true

[[users]]
name = "site-a-link"
password = "s3cret"
roles = ["links"]
nodes = ["site-a"]

[[users]]
name = "anyone"
password = "s3cret"
roles = ["links"]

[[permissions]]
match = "#"
send = ["links"]
consume = ["links"]
create_durable_queue = ["links"]
"""


@pytest.mark.parametrize(("user", "ok"), [("site-a-link", True), ("anyone", False)])
def test_only_a_user_bound_to_the_node_takes_its_traffic(
    tmp_path: Path, user: str, ok: bool
) -> None:
    s = dialled_sites(tmp_path, hub_extra=SECURE_HUB, a_bridge={"user": user, "password": "s3cret"})
    try:
        if ok:
            wait_log(s.b, r"node site-a dialled in", 20)
        else:
            wait_log(s.a, r"refused to send traffic back: .*may not take node 'site-a'", 20)
            assert "dialled in" not in s.b.log()
    finally:
        s.stop()


SECURE_SITE = """
[security]
enabled = true

[[users]]
name = "guest"
password = "guest"
roles = ["local"]

[[users]]
name = "from-hub"
password = "unused-for-login"
roles = ["hub"]

[[permissions]]
match = "#"
send = ["local"]
consume = ["local"]
create_durable_queue = ["local"]

[[permissions]]
match = "orders"
send = ["local", "hub"]
consume = ["local"]
create_durable_queue = ["local", "hub"]
"""


def test_receive_as_applies_a_local_users_permissions_to_what_comes_back(
    tmp_path: Path,
) -> None:
    """site-a receives the hub's traffic as its user "from-hub", who may send to orders only:
    what the hub sends to site-a::secret is refused there and dead-lettered at the hub."""
    s = dialled_sites(tmp_path, a_bridge={"receive_as": "from-hub"}, a_extra=SECURE_SITE)
    try:
        wait_log(s.b, r"node site-a dialled in", 20)
        assert send_all(s.b.stomp_port, "site-a::secret", ["nope"]) == ["nope"]
        assert send_all(s.b.stomp_port, "site-a::orders", ["fine"]) == ["fine"]
        (dead,) = dead_letters(s.b.stomp_port, "remote-authorization")
        assert dead["body"] == "nope" and "not authorized" in dead["_WS_DLQ_DETAIL"]
        assert collect(s.a.stomp_port, "orders", ["fine"], timeout=20) == ["fine"]
    finally:
        s.stop()


def _problems(text: str) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(text)
    return str(e.value)


NODE = '[node]\nname = "hub"\npersistence = false\n'


def test_config_checks_the_directions() -> None:
    out = _problems(NODE + accept_toml("site-a", urls=["tcp://127.0.0.1:1"], user="u"))
    assert 'an "accept" bridge has no urls' in out and "remove user" in out
    out = _problems(
        NODE + bridge_toml("b", "site-a", [1], direction="both").replace("tcp://", "amqp://")
    )
    assert 'a link going "both" ways speaks STOMP' in out
    out = _problems(NODE + '[[bridges]]\nname = "b"\nremote_node = "x"\n')
    assert "urls: must not be empty" in out
    out = _problems(NODE + accept_toml("site-a", receive_as="nobody"))
    assert 'only a bridge going "both" ways receives' in out
    out = _problems(NODE + bridge_toml("b", "site-a", [1], direction="both", receive_as="nobody"))
    assert "receive_as: no [[users]] entry named 'nobody'" in out
    cfg = parse_config(
        NODE + accept_toml("site-a") + '\n[[routes]]\nnode = "site-c"\nvia = "site-a"\n'
    )
    assert cfg.bridges[0].direction == "accept" and cfg.routes[0].via == "site-a"
