"""AMQP 1.0 node CPU per message, A/B between copies of gateway/amqp, on free ports.

Each round starts one fresh node per variant (a variant is a directory holding a copy of the
``waystation.gateway.amqp`` package, loaded in its place, so the rest of the tree is the same
for both), runs ``../shared/bench/bench.py amqp`` against it once per scenario and reads the
node's user+sys CPU from /proc before and after: the figure the issue's targets are written
in.  Variants are interleaved within each round (the machine is noisy).

  python bench/amqp_cpu.py --variant new=gateway/amqp --variant old=/tmp/amqp_old/amqp
  python bench/amqp_cpu.py --variant new=gateway/amqp --profile /tmp/prof   # py-spy too

``serve DIR CONFIG`` is the node side: ``waystation run CONFIG`` with DIR as the package.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = {"presettled": ["--presettle"], "durable": ["--durable"]}
TICK = os.sysconf("SC_CLK_TCK")


def serve(pkg: Path, config: str) -> int:
    """Run a node with ``pkg`` standing in for waystation.gateway.amqp."""
    from amqp_inproc import use_package  # bench/, beside this script

    use_package(pkg)
    from waystation.gateway.cli import main

    return main(["run", config])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of the loop's thread ("main") and of the others."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = "main" if task.name == str(pid) else "others"
        fields = stat.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    return out


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"node exited ({proc.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"port {port} not open")


class Node:
    def __init__(self, pkg: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="amqp-cpu-"))
        self.port = free_port()
        stomp = free_port()
        (self.dir / "node.toml").write_text(
            f'[node]\nname = "bench"\ndata_dir = "data"\nlog_level = "WARNING"\n\n'
            f"[acceptors]\nhttp = false\nmqtt = false\n"
            f'[acceptors.stomp]\nurl = "tcp://127.0.0.1:{stomp}"\n'
            f'[acceptors.amqp]\nurl = "tcp://127.0.0.1:{self.port}"\n'
        )
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        log = open(self.dir / "node.log", "wb")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "serve", str(pkg), str(self.dir / "node.toml")],
            cwd=self.dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        log.close()
        wait_port(self.port, self.proc)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def run(node: Node, args: list[str], n: int, bench: Path, profile: Path | None) -> dict:
    cmd = [sys.executable, str(bench), "amqp", "--port", str(node.port), "--n", str(n)]
    cmd += ["--timeout", "120", "--address", "/queue/bench", *args]
    spy = None
    if profile is not None:
        spy = subprocess.Popen(
            [
                "py-spy",
                "record",
                "--native",
                "-r",
                "100",
                "-f",
                "raw",
                "-o",
                str(profile),
                "-p",
                str(node.proc.pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1.0)
    c0 = cpu_s(node.proc.pid)
    th0 = thread_cpu(node.proc.pid)
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
    wall = time.monotonic() - t0
    c1 = cpu_s(node.proc.pid)
    th1 = thread_cpu(node.proc.pid)
    threads = {k: (v - th0.get(k, 0.0)) / n * 1e6 for k, v in th1.items()}
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(30)
    res = {}
    for line in out.splitlines():
        if line.startswith("{"):
            res = json.loads(line)
    return {
        "us_per_msg": (c1 - c0) / n * 1e6,
        "e2e": res.get("e2e_rate"),
        "received": res.get("received"),
        "wall": wall,
        "threads": {k: round(v, 1) for k, v in threads.items() if v >= 0.5},
    }


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        return serve(Path(sys.argv[2]).resolve(), sys.argv[3])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", action="append", required=True, help="NAME=DIR of an amqp pkg")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--scenarios", default="presettled,durable")
    p.add_argument("--bench", type=Path, default=REPO.parent / "shared" / "bench" / "bench.py")
    p.add_argument("--profile", type=Path, help="folder for py-spy raw profiles (one round)")
    a = p.parse_args()
    variants = [(v.split("=", 1)[0], Path(v.split("=", 1)[1]).resolve()) for v in a.variant]
    scen = a.scenarios.split(",")
    results: dict[tuple[str, str], list[dict]] = {}
    for r in range(a.rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for name, pkg in order:
            node = Node(pkg)
            try:
                for s in scen:
                    prof = None
                    if a.profile is not None:
                        a.profile.mkdir(parents=True, exist_ok=True)
                        prof = a.profile / f"{name}-{s}-{r}.txt"
                    x = run(node, SCENARIOS[s], a.n, a.bench, prof)
                    results.setdefault((name, s), []).append(x)
                    print(
                        f"round {r} {name:>8} {s:>10}: {x['us_per_msg']:6.1f} us/msg "
                        f"e2e {x['e2e']} recv {x['received']} threads {x['threads']}",
                        file=sys.stderr,
                        flush=True,
                    )
            finally:
                node.stop()
    print("| variant | scenario | node CPU us/msg (median, runs) | e2e msg/s (median) |")
    print("|---|---|---|---|")
    for (name, s), xs in results.items():
        us = [x["us_per_msg"] for x in xs]
        e2e = [x["e2e"] for x in xs if x["e2e"]]
        runs = ", ".join(f"{u:.1f}" for u in us)
        med_e2e = f"{statistics.median(e2e):,.0f}" if e2e else "-"
        print(f"| {name} | {s} | {statistics.median(us):.1f} ({runs}) | {med_e2e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
