"""A restart with a backlog 16x its address limit: recovery leaves message records in the
journal files and places them one by one, so the queue pages as it loads (the peak memory
grows by a fraction of the backlog, not a multiple of it) and every message is delivered
once, in order, with its exact body.  Recovery keeps tens of bytes of bookkeeping per
message (compact columns), not a kilobyte of Python objects, which a backlog of many small
messages shows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import stomp
from nodekit import NodeProcess
from stompkit import Collect, connect

N, SIZE = 2000, 8192  # 16 MiB of bodies
LIMITS = """
[node.journal]
file_size = "1MiB"

[address_settings."backlog"]
max_size_bytes = "1MiB"
full_policy = "PAGE"
"""


def kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


def body(i: int) -> str:
    return f"{i:06d}" + chr(ord("a") + i % 26) * (SIZE - 6)


def test_a_backlog_far_over_the_limit_is_paged_as_it_is_recovered(tmp_path):
    node = NodeProcess(tmp_path / "n", extra_config=LIMITS)
    node.start()
    try:
        assert node.proc is not None
        idle = kib(node.proc.pid, "VmRSS")
        prod, lst = connect(node.stomp_port)
        for i in range(N):
            headers = {"persistent": "true"}
            if i % 200 == 199:
                headers["receipt"] = f"r{i}"
            prod.send("/queue/backlog", body(i), headers=headers)
        lst.wait_receipt(f"r{N - 1}", timeout=60)
        prod.disconnect()
        node.kill9()

        node.start()
        assert node.proc is not None
        growth = kib(node.proc.pid, "VmHWM") - idle
        # all of it in memory costs over twice the backlog (16 MiB); paged, a few MiB
        assert growth < 8 * 1024, f"recovery peak grew by {growth} KiB for a 16 MiB backlog"

        msgs = drain_backlog(node.stomp_port, N)
        assert [m.body for m in msgs] == [body(i) for i in range(N)]
    finally:
        node.stop()


def drain_backlog(port: int, n: int) -> list[Any]:
    """The first ``n`` messages of the backlog queue (auto ack)."""
    conn = stomp.Connection12([("127.0.0.1", port)])
    got = Collect()
    conn.set_listener("c", got)
    conn.connect("guest", "guest", wait=True)
    conn.subscribe("/queue/backlog", id="s", ack="auto")
    msgs = got.wait_messages(n, timeout=60)
    conn.disconnect()
    return msgs


def fill(port: int, n: int, make: Callable[[int], str]) -> None:
    prod, lst = connect(port)
    for i in range(n):
        headers = {"persistent": "true"}
        if i % 500 == 499 or i == n - 1:
            headers["receipt"] = f"r{i}"
        prod.send("/queue/backlog", make(i), headers=headers)
    lst.wait_receipt(f"r{n - 1}", timeout=60)
    prod.disconnect()


def test_recovery_bookkeeping_per_message_is_small(tmp_path):
    """16,000 messages of 1 KiB over a 1 MiB limit: a kilobyte of recovery bookkeeping per
    message (what recovery held before) would grow the restarted node by over 16 MiB."""
    n = 16_000

    def small(i: int) -> str:
        return f"{i:06d}" + "m" * 1018

    node = NodeProcess(tmp_path / "n", extra_config=LIMITS)
    node.start()
    try:
        assert node.proc is not None
        idle = kib(node.proc.pid, "VmRSS")
        fill(node.stomp_port, n, small)
        node.kill9()

        node.start()
        assert node.proc is not None
        growth = kib(node.proc.pid, "VmHWM") - idle
        assert growth < 10 * 1024, f"recovery peak grew by {growth} KiB for {n} messages"

        msgs = drain_backlog(node.stomp_port, n)
        assert [m.body[:6] for m in msgs] == [f"{i:06d}" for i in range(n)]
        assert all(m.body == small(i) for i, m in enumerate(msgs))
    finally:
        node.stop()
