"""An idle ``waystation run`` loads no module it does not need (issue 16: idle RSS <= 40 MB).

A loaded module stays resident for the node's whole life.  These came in at start without
being used there: pydantic's plugin lookup imports ``importlib.metadata`` (with ``email``,
``zipfile``, ``csv``, ``tempfile``, ``shutil``, ``bz2``, ``lzma``: 2.2 MB), argparse's help
width imports ``shutil`` (with ``bz2`` and ``lzma``: 1.1 MB), and so did the engine's and the
post office's paging folders; the selector parser and evaluator (0.4 MB) wait for the first
selector.  The child runs the real command, every listener on a free
port, and once they are all bound prints the modules it imported itself: those the
interpreter loaded before do not count, except the guarded ones: those are forgotten first
(a site ``.pth`` file may load ``shutil``), so that an import of them at start is seen.
``json`` is not listed: the HTTP listener's probes and SockJS answer in JSON.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

UNNEEDED = (
    "importlib.metadata",
    "email",
    "zipfile",
    "csv",
    "tempfile",
    "shutil",
    "bz2",
    "lzma",
    "waystation.core.filter.parser",
    "waystation.core.filter.evaluator",
)

CHILD = r"""
import os, runpy, socket, sys, threading, time
config, guarded = sys.argv[1], sys.argv[2].split(",")
ports = [int(p) for p in sys.argv[3:]]
# a site .pth may have loaded some guarded modules already: forget them, so that an import
# of ours loads them again and is seen
for m in list(sys.modules):
    if any(m == g or m.startswith(g + ".") for g in guarded):
        del sys.modules[m]
before = set(sys.modules)

def bound(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False

def report():
    deadline = time.monotonic() + 20
    while not all(bound(p) for p in ports):
        if time.monotonic() > deadline:
            os._exit(3)
        time.sleep(0.02)
    time.sleep(0.3)  # the rest of start: the journal, the gc policy
    print("\n".join(sorted(set(sys.modules) - before)), flush=True)
    os._exit(0)

threading.Thread(target=report, daemon=True).start()
sys.argv = ["waystation", "run", config]
runpy.run_module("waystation.gateway.cli", run_name="__main__", alter_sys=True)
"""


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def test_an_idle_node_loads_no_module_it_does_not_need(tmp_path: Path) -> None:
    stomp, http, amqp, mqtt = _free_ports(4)
    config = tmp_path / "node.toml"
    config.write_text(
        f"""
[node]
data_dir = "data"

[acceptors.stomp]
url = "tcp://127.0.0.1:{stomp}"
[acceptors.http]
url = "http://127.0.0.1:{http}"
[acceptors.amqp]
url = "tcp://127.0.0.1:{amqp}"
[acceptors.mqtt]
url = "tcp://127.0.0.1:{mqtt}"
"""
    )
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(config),
            ",".join(UNNEEDED),
            *map(str, (stomp, http, amqp, mqtt)),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, f"node did not bind its ports in time:\n{r.stderr[-2000:]}"
    loaded = set(r.stdout.split())
    assert "waystation.gateway.node" in loaded, r.stdout  # the child really started a node
    assert sorted(m for m in UNNEEDED if m in loaded) == []
