"""Peak memory of a node restarting with a store-and-forward backlog many times its memory
limit (issue 15: "recovery in bounded memory").

A node with a bridge to an unreachable site gets ``--backlog`` MiB of persistent messages of
``--size`` bytes into ``sf.site-b`` while the address limit is ``--limit`` MiB (PAGE), is
killed with SIGKILL, and is started again; the peak RSS (VmHWM) of the restarted process is
compared with the RSS of the same node started on an empty store.  "Peak RSS under 2x the
limit" is read as that growth (restart VmHWM minus the empty node's VmRSS, about 60 MiB of
interpreter and modules that any node has) being under twice the address limit.

    python bench/recovery_memory.py --limit 16 --backlog 160 --size 4096
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import stomp

CONFIG = """
[node]
name = "site-a"
data_dir = "{data}"

[acceptors]
stomp = "tcp://127.0.0.1:{stomp}"
http = "http://127.0.0.1:{http}"
amqp = false
mqtt = false

[address_settings."sf.#"]
max_size_bytes = "{limit}MiB"
full_policy = "PAGE"

[[bridges]]
name = "to-b"
remote_node = "site-b"
urls = ["tcp://127.0.0.1:9"]
retry_interval = "60s"
max_retry_interval = "60s"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class Node:
    def __init__(self, work: Path, limit: int) -> None:
        self.work = work
        self.stomp, self.http = free_port(), free_port()
        self.cfg = work / "node.toml"
        text = CONFIG.format(data=work / "data", stomp=self.stomp, http=self.http, limit=limit)
        self.cfg.write_text(text)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        t0 = time.monotonic()
        log = open(self.work / "node.log", "ab")  # noqa: SIM115 - the process keeps it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "waystation.gateway.cli", "run", str(self.cfg)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/ready", timeout=1):
                    return time.monotonic() - t0
            except OSError:
                if self.proc.poll() is not None:
                    raise SystemExit((self.work / "node.log").read_text()[-3000:]) from None
                time.sleep(0.05)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.terminate()
        self.proc.wait(30)


def fill(port: int, total: int, size: int) -> int:
    conn = stomp.Connection12([("127.0.0.1", port)])
    conn.connect(wait=True)
    body = "x" * size
    n = total // size
    for i in range(n):
        headers = {"persistent": "true"}
        if i % 500 == 499 or i == n - 1:
            headers["receipt"] = f"r{i}"
        conn.send("/queue/site-b::orders", body, headers=headers)
    conn.disconnect(receipt="bye")
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=16, help="address limit, MiB")
    ap.add_argument("--backlog", type=int, default=160, help="backlog, MiB")
    ap.add_argument("--size", type=int, default=4096, help="message body, bytes")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ws-recovery-") as tmp:
        node = Node(Path(tmp), args.limit)
        ready = node.start()
        assert node.proc is not None
        idle = status_kib(node.proc.pid, "VmRSS")
        t0 = time.monotonic()
        n = fill(node.stomp, args.backlog << 20, args.size)
        fill_s = time.monotonic() - t0
        time.sleep(1)
        node.kill9()
        journal = sum(f.stat().st_size for f in (Path(tmp) / "data").rglob("*") if f.is_file())
        ready2 = node.start()
        pid = node.proc.pid
        peak = status_kib(pid, "VmHWM")
        rss = status_kib(pid, "VmRSS")
        node.stop()
        limit_kib = args.limit << 10
        print(f"messages            {n:,} x {args.size} B ({n * args.size / 2**20:.0f} MiB)")
        print(f"fill                {fill_s:.1f} s ({n / fill_s:,.0f} msg/s)")
        print(f"data folder         {journal / 2**20:.0f} MiB")
        print(f"address limit       {args.limit} MiB (PAGE)")
        print(f"empty start         ready {ready:.2f} s, RSS {idle / 1024:.0f} MiB")
        print(f"restart             ready {ready2:.2f} s, RSS {rss / 1024:.0f} MiB")
        print(f"restart peak RSS    {peak / 1024:.0f} MiB")
        growth = peak - idle
        print(
            f"peak over empty     {growth / 1024:.0f} MiB = {growth / limit_kib:.2f}x the limit "
            f"(target < 2x)"
        )
        if os.environ.get("RECOVERY_JSON"):
            print({"peak_kib": peak, "idle_kib": idle, "limit_kib": limit_kib})


if __name__ == "__main__":
    main()
