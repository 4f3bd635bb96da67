"""Foreign AMQP bridges against a real RabbitMQ 3.10 (AMQP 1.0 plugin): Waystation → RabbitMQ
and RabbitMQ → Waystation, at least once, also across a RabbitMQ restart mid-flow (one broker
for the whole module, started by the test as a process)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from foreignkit import RabbitMQ, amqp_receive, amqp_send, body_text, rabbitmq_available
from nodekit import NodeProcess
from sitekit import collect, send_all

from waystation.bridges.foreign import ForeignInbound, ForeignStompBridge
from waystation.config import ConfigError, parse_config
from waystation.gateway.node import Node

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not rabbitmq_available(), reason="rabbitmq-server missing: scripts/test"),
]


@pytest.fixture(scope="module")
def rabbit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQ]:
    broker = RabbitMQ(tmp_path_factory.mktemp("rabbitmq"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _node(workdir: Path, port: int, tag: str, window: int = 100) -> NodeProcess:
    common = f"""urls = ["amqp://127.0.0.1:{port}"]
user = "guest"
password = "guest"
confirmation_window = {window}
retry_interval = "200ms"
max_retry_interval = "1s"
heartbeat = "1s"
liveness_timeout = "5s"
"""
    return NodeProcess(
        workdir,
        f"""
[[queues]]
name = "outbox"

[[queues]]
name = "inbox"

[[bridges]]
name = "to-rabbit"
remote_node = "rabbit"
foreign = "amqp"
queue = "outbox"
forwarding_address = "/queue/{tag}.in"
{common}
[[bridges]]
name = "from-rabbit"
remote_node = "rabbit"
foreign = "amqp"
direction = "inbound"
source = "/queue/{tag}.out"
forwarding_address = "inbox"
{common}""",
        name="site-a",
    )


def test_config_kinds_and_validation() -> None:
    base = """
[node]
name = "site-a"
persistence = false
[[queues]]
name = "inbox"
"""
    cfg = parse_config(
        base
        + """
[[bridges]]
name = "to"
remote_node = "r"
foreign = "amqp"
queue = "inbox"
forwarding_address = "/amq/queue/x"
urls = ["amqp://127.0.0.1:5672"]
[[bridges]]
name = "from"
remote_node = "r"
foreign = "amqp"
direction = "inbound"
source = "/queue/x"
forwarding_address = "inbox"
urls = ["amqps://127.0.0.1:5671"]
""",
        "a.toml",
    )
    bridges = Node(cfg).bridges.bridges
    assert [type(b) for b in bridges] == [ForeignStompBridge, ForeignInbound]
    assert bridges[0]._options.amqp_target == "/amq/queue/x"
    assert bridges[1]._options.amqp_source == "/queue/x"
    with pytest.raises(ConfigError) as info:
        parse_config(
            base
            + """
[[bridges]]
name = "no-address"
remote_node = "r"
foreign = "amqp"
urls = ["amqp://127.0.0.1:5672"]
[[bridges]]
name = "stomp-url"
remote_node = "r"
foreign = "amqp"
forwarding_address = "/queue/x"
urls = ["tcp://127.0.0.1:5672"]
[[bridges]]
name = "amqp-path"
remote_node = "r"
urls = ["amqp://127.0.0.1:5672/x"]
""",
            "a.toml",
        )
    text = str(info.value)
    assert '[[bridges]][0].forwarding_address: a foreign "amqp" bridge needs' in text
    assert '[[bridges]][1].urls[0]: a foreign "amqp" bridge needs amqp://' in text
    assert "[[bridges]][2].urls[0]: a amqp:// url must not have a path" in text


def test_messages_move_both_ways(rabbit: RabbitMQ, tmp_path: Path) -> None:
    node = _node(tmp_path / "a", rabbit.port, "t1").start()
    try:
        out = [f"out-{i}" for i in range(300)]
        inn = [f"in-{i}" for i in range(300)]
        headers = {"k": "v", "n": "7", "ws-types": "n=int"}
        assert send_all(node.stomp_port, "/queue/outbox", out, headers=headers) == out
        amqp_send(rabbit.port, "/queue/t1.out", inn, {"k": "w", "n": 8})

        got = amqp_receive(rabbit.port, "/queue/t1.in", set(out), 30)
        assert [body_text(m.body) for m in got] == out  # no faults: once, in order
        first = got[0]
        assert first.properties["k"] == "v" and first.properties["n"] == 7
        assert str(first.properties["_WS_DUPL_ID"]).startswith("site-a/to-rabbit/")
        assert first.durable

        local = collect(node.stomp_port, "inbox", inn, timeout=30)
        assert local == inn
    finally:
        node.stop()


@pytest.mark.parametrize("kill", [False, True], ids=["restart", "kill9"])
def test_a_rabbitmq_restart_mid_flow_loses_nothing(
    rabbit: RabbitMQ, tmp_path: Path, kill: bool
) -> None:
    """RabbitMQ restarts (cleanly, or after ``kill -9``) while both bridges are busy: every
    message arrives, duplicates are allowed (and printed)."""
    tag = "t3" if kill else "t2"
    node = _node(tmp_path / "a", rabbit.port, tag, window=20).start()
    restarts: list[float] = []
    inn = [f"in-{i}" for i in range(1000)]
    out = [f"out-{i}" for i in range(1500)]

    def restart(batch: int) -> None:
        if batch == 1:
            restarts.append(rabbit.restart(kill=kill))

    try:
        amqp_send(rabbit.port, f"/queue/{tag}.out", inn[:800])
        assert send_all(node.stomp_port, "/queue/outbox", out, between=restart) == out
        assert restarts, "RabbitMQ was not restarted"
        amqp_send(rabbit.port, f"/queue/{tag}.out", inn[800:])

        got = amqp_receive(rabbit.port, f"/queue/{tag}.in", set(out), 90)
        at_rabbit = Counter(body_text(m.body) for m in got)
        local = Counter(collect(node.stomp_port, "inbox", inn, timeout=90))
        assert set(at_rabbit) == set(out), f"lost at RabbitMQ: {len(set(out) - set(at_rabbit))}"
        assert set(local) == set(inn), f"lost at Waystation: {len(set(inn) - set(local))}"
        dups = (sum(at_rabbit.values()) - len(out), sum(local.values()) - len(inn))
        print(f"RabbitMQ restart took {restarts[0]:.1f}s; duplicates out/in: {dups}")
        lost = [ln for ln in node.log().splitlines() if ": link to " in ln]
        assert any("bridge to-rabbit:" in ln for ln in lost), lost
        assert any("bridge from-rabbit:" in ln for ln in lost), lost
    finally:
        node.stop()
