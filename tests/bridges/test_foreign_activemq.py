"""Foreign bridges against a real ActiveMQ 5.17: Waystation → ActiveMQ and ActiveMQ → Waystation,
at least once, also across a restart of ActiveMQ (one broker for the whole module)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from foreignkit import ActiveMQ
from nodekit import NodeProcess
from sitekit import Drain, collect, send_all
from wanproxy import WanProxy

from waystation.bridges.foreign import FOREIGN_MESSAGE_ID, ForeignInbound, ForeignStompBridge
from waystation.config import ConfigError, parse_config
from waystation.gateway.node import Node


@pytest.fixture(scope="module")
def amq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ActiveMQ]:
    broker = ActiveMQ(tmp_path_factory.mktemp("activemq"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _bridges(body: str) -> str:
    return f"""
[node]
name = "site-a"
persistence = false
{body}
"""


def test_config_shape_and_validation() -> None:
    cfg = parse_config(
        _bridges(
            """
[[queues]]
name = "inbox"
[[bridges]]
name = "to-amq"
remote_node = "amq"
foreign = "stomp"
queue = "inbox"
forwarding_address = "/queue/incoming"
urls = ["tcp://127.0.0.1:61613"]
[[bridges]]
name = "from-amq"
remote_node = "amq"
foreign = "stomp"
direction = "inbound"
source = "/queue/x"
forwarding_address = "inbox"
urls = ["tcp://127.0.0.1:61613"]
"""
        ),
        "a.toml",
    )
    kinds = [type(b) for b in Node(cfg).bridges.bridges]
    assert kinds == [ForeignStompBridge, ForeignInbound]
    with pytest.raises(ConfigError) as info:
        parse_config(
            _bridges(
                """
[[bridges]]
name = "in-core"
remote_node = "b"
direction = "inbound"
urls = ["tcp://127.0.0.1:1"]
[[bridges]]
name = "out-src"
remote_node = "c"
foreign = "stomp"
source = "/queue/x"
urls = ["tcp://127.0.0.1:1"]
"""
            ),
            "a.toml",
        )
    text = str(info.value)
    assert '[[bridges]][0].direction: only a foreign bridge can be "inbound"' in text
    assert "[[bridges]][0].source: an inbound bridge needs a STOMP destination" in text
    assert "[[bridges]][0].forwarding_address: an inbound bridge needs a local address" in text
    assert '[[bridges]][1].source: only an "inbound" bridge has a source' in text


def _node(
    workdir: Path, port: int, tag: str, window: int, heartbeat: str = "1s", liveness: str = "5s"
) -> NodeProcess:
    url = f"tcp://127.0.0.1:{port}"
    return NodeProcess(
        workdir,
        f"""
[[queues]]
name = "outbox"

[[queues]]
name = "inbox"

[[bridges]]
name = "to-amq"
remote_node = "amq"
foreign = "stomp"
queue = "outbox"
forwarding_address = "/queue/{tag}.in"
urls = ["{url}"]
confirmation_window = {window}
retry_interval = "100ms"
max_retry_interval = "500ms"
heartbeat = "{heartbeat}"
liveness_timeout = "{liveness}"

[[bridges]]
name = "from-amq"
remote_node = "amq"
foreign = "stomp"
direction = "inbound"
source = "/queue/{tag}.out"
forwarding_address = "inbox"
urls = ["{url}"]
confirmation_window = {window}
retry_interval = "100ms"
max_retry_interval = "500ms"
heartbeat = "{heartbeat}"
liveness_timeout = "{liveness}"
""",
        name="site-a",
    )


def test_messages_move_both_ways(amq: ActiveMQ, tmp_path: Path) -> None:
    node = _node(tmp_path / "a", amq.port, "t1", window=100).start()
    try:
        out = [f"out-{i}" for i in range(300)]
        inn = [f"in-{i}" for i in range(300)]
        assert send_all(node.stomp_port, "/queue/outbox", out, headers={"k": "v"}) == out
        assert send_all(amq.port, "/queue/t1.out", inn, headers={"k": "w"}) == inn

        d = Drain(amq.port, "t1.in")
        try:
            got = d.wait_all(out, 30)
            time.sleep(0.5)
            msgs = d.messages
        finally:
            d.close()
        assert sorted(m.body for m in msgs) == sorted(out) and len(msgs) == len(out)
        assert [m.body for m in msgs] == out  # no faults: in order
        first = msgs[0].headers
        assert first["_WS_DUPL_ID"].startswith("site-a/to-amq/") and first["k"] == "v"
        assert first["persistent"] == "true"
        assert len({m.headers["_WS_DUPL_ID"] for m in msgs}) == len(out)
        assert got == out

        local = Drain(node.stomp_port, "inbox")
        try:
            local.wait_all(inn, 30)
            time.sleep(0.5)
            lm = local.messages
        finally:
            local.close()
        assert [m.body for m in lm] == inn  # at least once, and no fault: exactly once, in order
        assert lm[0].headers["k"] == "w" and lm[0].headers[FOREIGN_MESSAGE_ID].startswith("ID:")
    finally:
        node.stop()


def test_activemq_kill9_loses_nothing(amq: ActiveMQ, tmp_path: Path) -> None:
    """ActiveMQ is killed (-9) and restarted while both bridges are busy: every message
    arrives, duplicates are allowed (and printed)."""
    with WanProxy(amq.port) as wan:
        wan.set_bandwidth(150_000)  # slow enough that the cut lands mid-flow both ways
        restarts: list[float] = []
        inn = [f"in-{i}" for i in range(3000)]
        out = [f"out-{i}" for i in range(2000)]
        # the inbound backlog is waiting before the node starts, so however slow this
        # machine is, the restart lands while the inbound bridge is busy with it
        assert send_all(amq.port, "/queue/t2.out", inn[:2000]) == inn[:2000]
        node = _node(tmp_path / "a", wan.port, "t2", window=50).start()

        def restart_amq(batch: int) -> None:
            if batch == 0:
                deadline = time.monotonic() + 30
                while "bridge from-amq: consuming" not in node.log():
                    assert time.monotonic() < deadline, "the inbound bridge never consumed"
                    time.sleep(0.05)
                time.sleep(0.3)
                restarts.append(amq.restart(kill=True))

        try:
            assert send_all(node.stomp_port, "/queue/outbox", out, between=restart_amq) == out
            assert restarts, "ActiveMQ was not restarted"
            assert send_all(amq.port, "/queue/t2.out", inn[2000:]) == inn[2000:]

            at_amq = Counter(collect(amq.port, "t2.in", out, timeout=60))
            local = Counter(collect(node.stomp_port, "inbox", inn, timeout=60))
            assert set(at_amq) == set(out), f"lost at ActiveMQ: {len(set(out) - set(at_amq))}"
            assert set(local) == set(inn), f"lost at Waystation: {len(set(inn) - set(local))}"
            dups = (sum(at_amq.values()) - len(out), sum(local.values()) - len(inn))
            print(f"ActiveMQ restart took {restarts[0]:.1f}s; duplicates out/in: {dups}")
            lost = [ln for ln in node.log().splitlines() if ": link to " in ln]
            out_lost = [ln for ln in lost if "bridge to-amq:" in ln]
            in_lost = [ln for ln in lost if "bridge from-amq:" in ln]
            assert out_lost and in_lost, lost
            # the cut came while the inbound bridge was still busy with the first 2000
            assert int(in_lost[0].split("(")[1].split()[0]) < 2000, in_lost[0]
        finally:
            node.stop()


def test_black_holed_link_is_detected_and_nothing_is_lost(amq: ActiveMQ, tmp_path: Path) -> None:
    """ActiveMQ sends heart-beats only when asked: the bridges ask, so silence is noticed."""
    with WanProxy(amq.port) as wan:
        node = _node(tmp_path / "a", wan.port, "t3", window=20, heartbeat="300ms", liveness="2s")
        node.start()
        try:
            out = [f"out-{i}" for i in range(400)]
            inn = [f"in-{i}" for i in range(400)]
            assert send_all(node.stomp_port, "/queue/outbox", out[:100]) == out[:100]
            assert send_all(amq.port, "/queue/t3.out", inn[:100]) == inn[:100]
            assert set(collect(amq.port, "t3.in", out[:100], timeout=20, settle=0)) == set(
                out[:100]
            )
            wan.blackhole(True)
            t0 = time.monotonic()
            assert send_all(node.stomp_port, "/queue/outbox", out[100:]) == out[100:]
            assert send_all(amq.port, "/queue/t3.out", inn[100:]) == inn[100:]
            deadline = t0 + 10
            while time.monotonic() < deadline and node.log().count("nothing received for") < 2:
                time.sleep(0.1)
            detected = time.monotonic() - t0
            log = node.log()
            for bridge in ("to-amq", "from-amq"):
                assert f"bridge {bridge}: link to" in log and "nothing received for" in log
            assert detected < 6, f"black hole noticed after {detected:.1f}s (liveness 2s)"
            wan.blackhole(False)
            rest = out[100:]  # the first 100 were consumed above
            at_amq = Counter(collect(amq.port, "t3.in", rest, timeout=60))
            local = Counter(collect(node.stomp_port, "inbox", inn, timeout=60))
            assert set(at_amq) == set(rest) and set(local) == set(inn)
            dups = (sum(at_amq.values()) - len(rest), sum(local.values()) - len(inn))
            print(f"black hole noticed after {detected:.1f}s; duplicates out/in: {dups}")
        finally:
            node.stop()
