"""A node starts its bridges after its listeners, reports their state, and stops them first."""

from __future__ import annotations

import asyncio

from nodekit import free_port

from waystation.config import parse_config
from waystation.gateway.node import Node


def _config(bridges: str) -> str:
    return f"""
[node]
name = "site-a"
persistence = false

[acceptors]
stomp = "tcp://127.0.0.1:{free_port()}"
http = false
amqp = false
mqtt = false
{bridges}
"""


def test_node_reports_bridge_state_and_stops_bridges(run):
    dead = free_port()
    text = _config(
        f"""
[[bridges]]
name = "to-b"
remote_node = "site-b"
urls = ["tcp://127.0.0.1:{dead}"]
retry_interval = "5s"
max_retry_interval = "5s"

[[bridges]]
name = "to-c"
remote_node = "site-c"
urls = ["ws://127.0.0.1:{dead}/stomp"]
"""
    )

    async def main() -> None:
        node = Node(parse_config(text, "a.toml"))
        await node.start()
        try:
            for _ in range(200):
                if all(s["state"] == "retrying" for s in node.bridge_status()):
                    break
                await asyncio.sleep(0.01)
            b, c = node.bridge_status()
            assert b["name"] == "to-b" and b["state"] == "retrying"
            assert b["next_attempt"] and "ConnectionRefusedError" in str(b["last_error"])
            assert b["queue"] == "sf.site-b" and b["in_flight"] == 0
            assert c["state"] == "retrying"  # ws:// is dialled like any url
            assert f"ws://127.0.0.1:{dead}/stomp: ClientConnectorError" in str(c["last_error"])
        finally:
            await node.stop()
        assert [s["state"] for s in node.bridge_status()] == ["stopped", "stopped"]

    run(main())
