#!/usr/bin/env python3
"""STOMP benchmark runner: Waystation beside the peer brokers, in one sitting.

For each target it starts the broker, measures time-to-ready and idle RSS, runs the STOMP
scenarios (``../shared/bench/bench.py`` as a subprocess, plus a built-in 16-producer
synchronous persistent scenario), stops the broker and prints Markdown tables.

  python bench/stomp_bench.py --target waystation
  python bench/stomp_bench.py --targets waystation,rabbitmq,activemq,coilmq --json out.json
  python bench/stomp_bench.py --targets rabbitmq --quick          # smoke run, small N

Targets: ``waystation`` (spawned here: ``python -m waystation.gateway.cli run [CONFIG]`` in a fresh temp
dir) and ``activemq``, ``rabbitmq``, ``coilmq`` (``brokers.sh start|stop NAME``; they all
use port 61613, so they run one after another). Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import psutil
except ImportError:  # the runner falls back to /proc; the client subcommand needs neither
    psutil = None

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BENCH_DIR = REPO.parent / "shared" / "bench"
PEERS_PYTHON = Path("/tmp/peers-venv/bin/python")
HOST = "127.0.0.1"
STOMP_PORT = 61613
PEERS = ("activemq", "rabbitmq", "coilmq")
TARGETS = ("waystation", *PEERS)
RATE_KEYS = ("send_rate", "recv_rate", "e2e_rate", "single_rate", "ratio_vs_single")
CPU_KEYS = ("broker_cpu_pct", "client_cpu_pct", "other_cpu_pct")


# ------------------------------------------------------------------------------------------
# Scenarios and per-broker adjustments
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scenario:
    """One STOMP scenario; ``args`` go to bench.py, ``size`` picks N (big/sync/concurrent)."""

    key: str
    title: str
    args: tuple[str, ...]
    size: str


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "nonpersistent", "non-persistent, send then drain", ("--mode", "nonpersistent"), "big"
    ),
    Scenario("live", "non-persistent, consumer attached (live)", ("--mode", "live"), "big"),
    Scenario(
        "client-ack",
        "non-persistent, client-individual ack",
        ("--mode", "nonpersistent", "--ack", "client-individual"),
        "big",
    ),
    Scenario(
        "persistent-batch",
        "persistent, receipt every 1000",
        ("--mode", "persistent-batch", "--batch", "1000"),
        "big",
    ),
    Scenario(
        "persistent-sync",
        "persistent, receipt every msg, 1 producer",
        ("--mode", "persistent-sync"),
        "sync",
    ),
    Scenario("concurrent-sync", "persistent, receipt every msg, 16 producers", (), "concurrent"),
)

# coilmq 1.1.0 drops the connection when a frame straddles one of its 4096-byte recv() calls,
# so a pipelining producer kills it (PEERS-RESULTS.md caveat 5). As in run_matrix.py: receipt
# every 16 frames, persistent batch 16, client-ack skipped, CONNECT host = FQDN.
R16 = ("--receipt-every", "16")
COILMQ_ARGS: dict[str, tuple[str, ...] | None] = {
    "nonpersistent": ("--mode", "nonpersistent", *R16),
    "live": ("--mode", "live", *R16),
    "client-ack": None,
    "persistent-batch": ("--mode", "persistent-batch", "--batch", "16"),
}
COILMQ_NOTES = {
    "nonpersistent": "receipt every 16 (coilmq cannot take a pipelined stream)",
    "live": "receipt every 16",
    "client-ack": "skipped: batched ACK frames trip coilmq's 4096-byte recv() bug",
    "persistent-batch": "receipt every 16; in-memory store, persistent is ignored",
    "persistent-sync": "in-memory store: receipt round-trips only, no disk",
    "concurrent-sync": "in-memory store: receipt round-trips only, no disk",
}


def scenario_args(target: str, scen: Scenario) -> tuple[str, ...] | None:
    """bench.py arguments for this target, or None when the scenario is skipped."""
    if target == "coilmq" and scen.key in COILMQ_ARGS:
        return COILMQ_ARGS[scen.key]
    return scen.args


def scenario_note(target: str, scen: Scenario) -> str:
    """Caveat printed beside a cell."""
    return COILMQ_NOTES.get(scen.key, "") if target == "coilmq" else ""


def vhost_for(target: str) -> str:
    """STOMP CONNECT host header: coilmq's 1.2 CONNECT insists on socket.getfqdn()."""
    return socket.getfqdn() if target == "coilmq" else "/"


# ------------------------------------------------------------------------------------------
# Process-tree metrics (psutil, else /proc)
# ------------------------------------------------------------------------------------------
def _proc_tree(pid: int) -> list[int]:
    if psutil is not None:
        try:
            p = psutil.Process(pid)
            return [pid] + [c.pid for c in p.children(recursive=True)]
        except psutil.Error:
            return []
    parents: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            parents.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        if Path(f"/proc/{p}").exists():
            out.append(p)
            todo += parents.get(p, [])
    return out


def rss_mb(pid: int) -> float:
    """Resident memory of the process tree rooted at pid, in MiB."""
    total = 0
    for p in _proc_tree(pid):
        try:
            if psutil is not None:
                total += psutil.Process(p).memory_info().rss
            else:
                total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * os.sysconf(
                    "SC_PAGE_SIZE"
                )
        except Exception:  # process gone or unreadable
            pass
    return round(total / 2**20, 1)


def cpu_s(pid: int) -> float:
    """User+system CPU seconds of the process tree rooted at pid."""
    total = 0.0
    for p in _proc_tree(pid):
        try:
            if psutil is not None:
                t = psutil.Process(p).cpu_times()
                total += t.user + t.system
            else:
                f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        except Exception:  # process gone or unreadable
            pass
    return total


def system_busy_s() -> float:
    """CPU seconds the whole machine spent busy since boot (all cores, /proc/stat)."""
    try:
        f = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f[:8])
    except (OSError, ValueError):
        return 0.0
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def alive(pid: int) -> bool:
    """Exists and is not a zombie (PID 1 here reaps re-parented brokers late)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def free_port() -> int:
    """A port nothing listens on now, for a server started next."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def port_open(port: int, timeout: float = 0.5) -> bool:
    """True when 127.0.0.1:port accepts a TCP connection."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


class Sampler(threading.Thread):
    """Samples the broker tree's RSS every ``every`` seconds and keeps the peak."""

    def __init__(self, pid: int, every: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.pid, self.every, self.peak = pid, every, 0.0
        self.stop_ev = threading.Event()

    def run(self) -> None:
        while not self.stop_ev.is_set():
            self.peak = max(self.peak, rss_mb(self.pid))
            self.stop_ev.wait(self.every)

    def finish(self) -> float:
        self.stop_ev.set()
        self.join(5)
        return self.peak


@contextlib.contextmanager
def no_sigint() -> Iterator[None]:
    """Let a stop finish even if Ctrl-C is pressed again."""
    try:
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


# ------------------------------------------------------------------------------------------
# Brokers under test
# ------------------------------------------------------------------------------------------
class BrokerError(RuntimeError):
    """A broker did not start (or stop) as expected."""


class Broker:
    """Start/stop interface; ``pid`` is the root of the broker's process tree."""

    name = "?"
    pid: int | None = None

    def start(self) -> float:
        """Start the broker; return seconds from spawn until STOMP accepts TCP."""
        raise NotImplementedError

    def stop(self) -> float | None:
        """Stop what start() started; return stop seconds (None if nothing ran)."""
        raise NotImplementedError


class PeerBroker(Broker):
    """A reference broker run by ``brokers.sh`` (loopback only, stopped by its recorded PID)."""

    def __init__(self, name: str, bench_dir: Path, ready_timeout: float) -> None:
        self.name = name
        self.script = bench_dir / "brokers.sh"
        self.ready_timeout = ready_timeout
        self.attempted = False

    def start(self) -> float:
        if not self.script.exists():
            raise BrokerError(f"{self.script} not found (use --bench-dir)")
        self.attempted = True
        env = dict(os.environ, READY_TIMEOUT=str(int(self.ready_timeout)))
        try:
            r = subprocess.run(
                [str(self.script), "start", self.name],
                capture_output=True,
                text=True,
                timeout=self.ready_timeout + 60,
                env=env,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as e:
            raise BrokerError(
                f"brokers.sh start {self.name} did not return in {self.ready_timeout + 60:.0f}s"
            ) from e
        out = r.stdout + r.stderr
        if "PID " in r.stdout:
            self.pid = int(r.stdout.split("PID ", 1)[1].split()[0])
        if r.returncode != 0 or "READY_S " not in r.stdout:
            raise BrokerError(
                f"brokers.sh start {self.name} failed (rc {r.returncode}): {out.strip()[-1500:]}"
                f"\n  see /tmp/peers-run/{self.name}/console.log"
            )
        return float(r.stdout.split("READY_S ", 1)[1].split()[0])

    def stop(self) -> float | None:
        if not self.attempted:
            return None
        self.attempted = False
        with no_sigint():
            try:
                r = subprocess.run(
                    [str(self.script), "stop", self.name],
                    capture_output=True,
                    text=True,
                    timeout=150,
                    stdin=subprocess.DEVNULL,
                )
            except subprocess.TimeoutExpired:
                print(
                    f"[{self.name}] WARNING: brokers.sh stop timed out; check brokers.sh status {self.name}",
                    file=sys.stderr,
                )
                return None
        if r.returncode != 0:
            print(
                f"[{self.name}] WARNING: brokers.sh stop rc {r.returncode}: {r.stderr.strip()}",
                file=sys.stderr,
            )
        secs = [float(x.split()[0]) for x in r.stdout.split("STOP_S ")[1:]]
        return secs[0] if secs else None


class WaystationBroker(Broker):
    """A Waystation node: ``python -m waystation.gateway.cli run [CONFIG]`` in a fresh temp working dir.

    ``python`` None runs this repository's source with this interpreter (REPO on PYTHONPATH,
    so an editable install, whose import finder costs about 2 MB of idle RSS); a path runs
    the package installed for that interpreter (``pip install .`` into a venv), nothing of
    REPO added, so ready time, idle RSS and CPU are the product's as users install it.
    """

    name = "waystation"

    def __init__(
        self,
        config: str | None,
        port: int,
        ready_timeout: float,
        keep: bool,
        python: str | None = None,
    ) -> None:
        self.config = str(Path(config).resolve()) if config else None
        self.port, self.ready_timeout, self.keep = port, ready_timeout, keep
        self.installed = python is not None
        # absolute, not resolved: a venv's bin/python is a link that must stay the venv's
        self.python: str = (
            (os.path.abspath(python) if os.sep in python else python) if python else sys.executable
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.workdir: Path | None = None
        self.failed = False

    def command(self) -> list[str]:
        """The spawn command line."""
        return [
            self.python,
            "-m",
            "waystation.gateway.cli",
            "run",
            *([self.config] if self.config else []),
        ]

    def _log_tail(self, lines: int = 25) -> str:
        if not self.workdir:
            return ""
        try:
            text = (self.workdir / "node.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def compile(self) -> None:
        """Byte-compile the package first, as a regular ``pip install`` does: an editable
        install under PYTHONDONTWRITEBYTECODE=1 otherwise compiles every module from source
        at each start (a third of the start-up CPU and about 1 MB of idle RSS).  Nothing to
        do for an installed package: pip compiled it."""
        if self.installed:
            return
        import compileall

        for top in ("waystation", "core", "wire", "gateway", "bridges", "client", "config"):
            if (REPO / top).is_dir():
                compileall.compile_dir(REPO / top, quiet=2)
        if (REPO / "pipeline").is_dir():
            compileall.compile_dir(REPO / "pipeline", quiet=2)

    def start(self) -> float:
        if port_open(self.port):
            raise BrokerError(
                f"port {self.port} is already in use: stop the other broker first "
                "(peers: brokers.sh stop NAME)"
            )
        self.workdir = Path(tempfile.mkdtemp(prefix="waystation-bench-"))
        env = dict(os.environ)
        if not self.installed:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(REPO), env.get("PYTHONPATH", "")) if p
            )
        cmd = self.command()
        with open(self.workdir / "node.log", "wb") as log:
            t0 = time.monotonic()
            self.proc = subprocess.Popen(
                cmd,
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self.proc.pid
        deadline = t0 + self.ready_timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self.failed = True
                raise BrokerError(
                    f"waystation exited with code {rc} after {time.monotonic() - t0:.2f}s, before STOMP "
                    f"{HOST}:{self.port} accepted a connection\n  command: {' '.join(cmd)}\n"
                    f"  cwd: {self.workdir} (kept; log: node.log)\n  --- last output ---\n{self._log_tail()}"
                )
            if port_open(self.port, timeout=0.25):
                return round(time.monotonic() - t0, 3)
            if time.monotonic() > deadline:
                self.failed = True
                raise BrokerError(
                    f"waystation not accepting STOMP on {HOST}:{self.port} after {self.ready_timeout:.0f}s"
                    f"\n  command: {' '.join(cmd)}\n  cwd: {self.workdir} (kept)\n"
                    f"  --- last output ---\n{self._log_tail()}"
                )
            time.sleep(0.02)

    def stop(self) -> float | None:
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        took: float | None = None
        with no_sigint():
            if proc.poll() is None:
                t0 = time.monotonic()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)  # its own session: pgid == pid
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    print("[waystation] ignored SIGTERM for 20s: SIGKILL", file=sys.stderr)
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
                took = round(time.monotonic() - t0, 3)
            # anything left in its process group (children it spawned)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        if self.workdir and not (self.keep or self.failed):
            shutil.rmtree(self.workdir, ignore_errors=True)
        elif self.workdir:
            print(f"[waystation] working dir kept: {self.workdir}", file=sys.stderr)
        return took


# ------------------------------------------------------------------------------------------
# Client runs (each one a subprocess printing one JSON line)
# ------------------------------------------------------------------------------------------
@dataclass
class Settings:
    """Everything a sitting needs; sizes resolved from defaults or --quick."""

    bench_dir: Path
    python: str
    port: int
    n: int
    sync_n: int
    producers: int
    per_producer: int
    warm_n: int
    sync_warm_n: int
    warm_per_producer: int
    reps: int
    timeout: float
    idle: float
    settle: float
    ready_timeout: float
    login: str
    passcode: str
    scenarios: list[Scenario] = field(default_factory=list)

    def sizes(self, scen: Scenario) -> tuple[int, int]:
        """(measured N, warm-up N); for the concurrent scenario: messages per producer."""
        if scen.size == "sync":
            return self.sync_n, min(self.sync_warm_n, self.sync_n)
        if scen.size == "concurrent":
            return self.per_producer, min(self.warm_per_producer, self.per_producer)
        return self.n, min(self.warm_n, self.n)


def client_cmd(
    st: Settings, target: str, scen: Scenario, args: tuple[str, ...], n: int
) -> list[str]:
    """Command line of one measured client run."""
    common = [
        "--port",
        str(st.port),
        "--timeout",
        str(st.timeout),
        "--idle",
        str(st.idle),
        "--login",
        st.login,
        "--passcode",
        st.passcode,
        "--vhost",
        vhost_for(target),
    ]
    if scen.size == "concurrent":
        return [
            st.python,
            str(Path(__file__).resolve()),
            "_concurrent",
            "--producers",
            str(st.producers),
            "--per",
            str(n),
            *common,
        ]
    return [
        st.python,
        str(st.bench_dir / "bench.py"),
        "stomp",
        "--host",
        HOST,
        "--n",
        str(n),
        *common,
        *args,
    ]


def run_client(cmd: list[str], broker_pid: int | None, timeout: float) -> dict[str, Any]:
    """Run one client, parse its JSON line, add broker/client CPU and wall time."""
    b0 = cpu_s(broker_pid) if broker_pid else 0.0
    s0 = system_busy_s()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    limit = 2 * timeout + 60
    try:
        r = subprocess.run(
            cmd, capture_output=True, text=True, timeout=limit, stdin=subprocess.DEVNULL
        )
        out, err, rc = r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired:
        out, err, rc = "", f"client killed after {limit:.0f}s", -9
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s1 = system_busy_s()
    res: dict[str, Any] = {}
    for line in out.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):
                res = json.loads(line)
    if not res:
        res = {"error": (err.strip() or f"no JSON output (rc {rc})")[-1500:]}
    if rc != 0:
        res["rc"] = rc
    b_cpu = (cpu_s(broker_pid) - b0) if broker_pid else 0.0
    c_cpu = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    res["harness_wall_s"] = round(wall, 3)
    res["broker_cpu_pct"] = round(100 * b_cpu / wall, 1) if wall and broker_pid else None
    res["client_cpu_pct"] = round(100 * c_cpu / wall, 1) if wall else None
    # everything else on the machine (other jobs, the sampler): a noise indicator
    res["other_cpu_pct"] = (
        round(max(0.0, 100 * (s1 - s0 - b_cpu - c_cpu) / wall), 1) if wall else None
    )
    if err and ("error" in res or res.get("timed_out")):
        res["stderr_tail"] = err[-800:]
    return res


def complete(r: dict[str, Any]) -> bool:
    """A run counts as clean when nothing timed out or failed and every message arrived."""
    if r.get("error") or r.get("timed_out") or r.get("rc"):
        return False
    want = r.get("confirmed") or r.get("n") or 0
    return r.get("received", want) >= want


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median / min / max of every metric over the clean runs (all runs if none is clean)."""
    good = [r for r in runs if complete(r)]
    out: dict[str, Any] = {"runs": len(runs), "complete": len(good)}
    for k in (*RATE_KEYS, *CPU_KEYS):
        vals = [r[k] for r in (good or runs) if isinstance(r.get(k), int | float)]
        if vals:
            out[k] = {
                "median": round(statistics.median(vals), 2),
                "min": min(vals),
                "max": max(vals),
            }
    return out


def wait_port(port: int, timeout: float, pid: int) -> float | None:
    """Seconds until the STOMP port accepts (0 if at once); None if it never does or pid dies."""
    t0 = time.monotonic()
    while not port_open(port):
        if not alive(pid) or time.monotonic() - t0 > timeout:
            return None
        time.sleep(0.1)
    return round(time.monotonic() - t0, 2)


async def _purge(a: argparse.Namespace, dest: str, idle: float) -> int:
    conn = await stomp_open(a, Deadline(10))
    conn.write(f"SUBSCRIBE\nid:0\ndestination:{dest}\nack:auto\n\n".encode() + b"\x00")
    conn.progress_at = time.monotonic()
    while time.monotonic() - conn.progress_at < idle:
        await asyncio.sleep(0.2)
    await stomp_close(conn)
    return conn.count


def purge(
    st: Settings, target: str, dest: str, idle: float = 2.0, limit: float = 90.0
) -> int | str:
    """Consume what a broken run left in ``dest`` so it cannot burden the next scenario."""
    a = argparse.Namespace(
        port=st.port, vhost=vhost_for(target), login=st.login, passcode=st.passcode
    )
    try:
        return asyncio.run(asyncio.wait_for(_purge(a, dest, idle), limit))
    except Exception as e:  # best effort
        return f"purge failed: {e!r}"[:200]


def measure(
    st: Settings,
    target: str,
    scen: Scenario,
    args: tuple[str, ...],
    n: int,
    pid: int,
    events: list[str],
) -> dict[str, Any]:
    """One guarded client run: wait for the STOMP port, run, purge leftovers of a broken run."""
    waited = wait_port(st.port, st.ready_timeout, pid)
    if waited is None:
        return {
            "error": f"STOMP port {st.port} not accepting connections (broker down)",
            "broker_down": True,
        }
    if waited > 0.2:
        events.append(
            f"{scen.key}: STOMP port was down, back after {waited}s (broker restarted itself?)"
        )
        print(f"[{target}] WARNING {events[-1]}", file=sys.stderr, flush=True)
    r = run_client(client_cmd(st, target, scen, args, n), pid, st.timeout)
    if waited:
        r["waited_for_port_s"] = waited
    if not complete(r) and r.get("dest") and port_open(st.port):
        r["purged"] = purge(st, target, r["dest"])
    return r


def brief(r: dict[str, Any]) -> str:
    """One progress line for a run."""
    keys = (*RATE_KEYS, "received", "timed_out", *CPU_KEYS)
    s = " ".join(f"{k}={r[k]}" for k in keys if r.get(k) is not None)
    if r.get("error"):
        s += " ERROR: " + str(r["error"]).strip().splitlines()[-1][:300]
    return s


def run_target(
    st: Settings, target: str, wcfg: dict[str, Any], save: Callable[[], None], res: dict[str, Any]
) -> None:
    """Start one broker, run every scenario against it, always stop it; fill ``res``."""
    broker: Broker
    if target == "waystation":
        ws = WaystationBroker(
            wcfg["config"], st.port, st.ready_timeout, wcfg["keep"], wcfg.get("python")
        )
        if wcfg.get("compile", True):
            ws.compile()
        res["command"] = " ".join(ws.command())
        res["waystation_from"] = "installed" if ws.installed else f"source (PYTHONPATH={REPO})"
        broker = ws
    else:
        broker = PeerBroker(target, st.bench_dir, st.ready_timeout)
    res.setdefault("scenarios", {})
    events: list[str] = res.setdefault("events", [])
    sampler: Sampler | None = None
    try:
        print(f"[{target}] starting", flush=True)
        try:
            res["ready_s"] = broker.start()
        except BrokerError as e:
            res["error"] = f"did not start: {e}"
            print(f"[{target}] ERROR {res['error']}", file=sys.stderr, flush=True)
            return
        pid = broker.pid
        time.sleep(st.settle)
        if pid is None or not alive(pid):
            res["error"] = "exited right after becoming ready"
            print(f"[{target}] ERROR {res['error']}", file=sys.stderr, flush=True)
            return
        res["pid"] = pid
        res["rss_idle_mb"] = rss_mb(pid)
        print(
            f"[{target}] pid {pid} ready {res['ready_s']}s, idle RSS {res['rss_idle_mb']} MB",
            flush=True,
        )
        sampler = Sampler(pid)
        sampler.start()
        save()
        for scen in st.scenarios:
            args = scenario_args(target, scen)
            entry: dict[str, Any] = {"title": scen.title, "note": scenario_note(target, scen)}
            res["scenarios"][scen.key] = entry
            if args is None:
                entry["skipped"] = True
                print(f"[{target}] {scen.key}: {entry['note']}", flush=True)
                continue
            n, warm_n = st.sizes(scen)
            entry["n"] = n * st.producers if scen.size == "concurrent" else n
            entry["args"] = list(args)
            entry["warmup"] = measure(st, target, scen, args, warm_n, pid, events)
            print(
                f"[{target}] {scen.key} warm-up (n={warm_n}): {brief(entry['warmup'])}", flush=True
            )
            entry["runs"] = []
            for rep in range(st.reps):
                if entry["warmup"].get("broker_down") or not alive(pid):
                    break
                r = measure(st, target, scen, args, n, pid, events)
                entry["runs"].append(r)
                print(f"[{target}] {scen.key} run {rep + 1}/{st.reps}: {brief(r)}", flush=True)
                if r.get("broker_down"):
                    break
            entry["summary"] = summarise(entry["runs"])
            save()
            down = entry["warmup"].get("broker_down") or any(
                r.get("broker_down") for r in entry["runs"]
            )
            if down or not alive(pid):
                res["error"] = f"broker {pid} died or stopped serving STOMP during {scen.key}"
                print(f"[{target}] ERROR {res['error']}", file=sys.stderr, flush=True)
                break
    finally:
        if sampler is not None:
            res["rss_peak_mb"] = sampler.finish()
        if broker.pid and alive(broker.pid) and "rss_idle_mb" in res:
            res["rss_after_mb"] = rss_mb(broker.pid)
        res["stop_s"] = broker.stop()
        print(f"[{target}] stopped (stop {_num(res['stop_s'], 2)} s)", flush=True)
        save()


# ------------------------------------------------------------------------------------------
# Tables
# ------------------------------------------------------------------------------------------
def _num(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "–"
    return f"{x:,.{digits}f}"


def cell(summary: dict[str, Any] | None, key: str, ranges: bool = True, digits: int = 0) -> str:
    """'median (min–max)' of one metric, '–' when absent."""
    if not summary or key not in summary:
        return "–"
    m = summary[key]
    s = _num(m["median"], digits)
    if ranges and summary.get("runs", 0) > 1:
        s += f" ({_num(m['min'], digits)}–{_num(m['max'], digits)})"
    if summary.get("complete", 0) < summary.get("runs", 0):
        s += " ⚠"
    return s


def target_table(name: str, res: dict[str, Any]) -> str:
    """Markdown table of one target's results."""
    lines = [f"### {name}", ""]
    if res.get("error"):
        lines += [f"**error:** {res['error'].splitlines()[0]}", ""]
    lines += [f"**event:** {ev}  " for ev in res.get("events", [])]
    lines.append(
        f"ready {_num(res.get('ready_s'), 2)} s · idle RSS {_num(res.get('rss_idle_mb'), 1)} MB · "
        f"peak RSS {_num(res.get('rss_peak_mb'), 1)} MB · stop {_num(res.get('stop_s'), 2)} s"
    )
    lines += [
        "",
        "| scenario | N | send msg/s | recv msg/s | e2e msg/s | broker CPU % | client CPU % | notes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, e in res.get("scenarios", {}).items():
        notes = [e.get("note", "")] if e.get("note") else []
        if e.get("skipped"):
            lines.append(f"| {key} | – | – | – | – | – | – | {'; '.join(notes)} |")
            continue
        s = e.get("summary")
        if s and "single_rate" in s:
            notes.insert(
                0,
                f"1 producer {cell(s, 'single_rate', False)} msg/s; "
                f"16÷1 = {cell(s, 'ratio_vs_single', False, 2)}×",
            )
        if s and s.get("other_cpu_pct", {}).get("max", 0) > 20:
            notes.append(f"⚠ other load up to {s['other_cpu_pct']['max']:.0f} % CPU during runs")
        if s and s["complete"] < s["runs"]:
            notes.append(f"⚠ {s['runs'] - s['complete']} of {s['runs']} runs incomplete")
        errs = {
            str(r.get("error")).strip().splitlines()[-1][:120]
            for r in e.get("runs", [])
            if r.get("error")
        }
        notes += sorted(errs)
        lines.append(
            f"| {key} | {_num(e.get('n'))} | {cell(s, 'send_rate')} | {cell(s, 'recv_rate')} | "
            f"{cell(s, 'e2e_rate')} | {cell(s, 'broker_cpu_pct', False)} | "
            f"{cell(s, 'client_cpu_pct', False)} | {'; '.join(notes)} |"
        )
    return "\n".join(lines)


def side_by_side(results: dict[str, dict[str, Any]]) -> str:
    """One table: rows = scenario × metric, columns = targets (medians)."""
    names = list(results)
    lines = ["| scenario | metric | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]

    def row(label: str, metric: str, values: list[str]) -> None:
        lines.append(f"| {label} | {metric} | " + " | ".join(values) + " |")

    keys: list[str] = []
    for r in results.values():
        keys += [k for k in r.get("scenarios", {}) if k not in keys]
    for key in keys:
        ents = [results[n].get("scenarios", {}).get(key, {}) for n in names]
        metrics = [
            ("send_rate", "send msg/s"),
            ("recv_rate", "recv msg/s"),
            ("e2e_rate", "e2e msg/s"),
        ]
        if key == "concurrent-sync":
            metrics = [
                ("send_rate", "16 producers, aggregate send msg/s"),
                ("single_rate", "1 producer send msg/s"),
                ("ratio_vs_single", "ratio 16 ÷ 1"),
                ("recv_rate", "recv msg/s"),
                ("e2e_rate", "e2e msg/s"),
            ]
        for mk, label in metrics:
            if key == "live" and mk == "recv_rate":
                continue
            vals = []
            for e in ents:
                if e.get("skipped"):
                    vals.append("skipped")
                else:
                    vals.append(
                        cell(e.get("summary"), mk, False, 2 if mk == "ratio_vs_single" else 0)
                    )
            row(key, label, vals)
    row("broker", "ready s", [_num(results[n].get("ready_s"), 2) for n in names])
    row("broker", "idle RSS MB", [_num(results[n].get("rss_idle_mb"), 1) for n in names])
    row("broker", "peak RSS MB", [_num(results[n].get("rss_peak_mb"), 1) for n in names])

    def other_max(r: dict[str, Any]) -> float | None:
        vals = [
            e["summary"]["other_cpu_pct"]["max"]
            for e in r.get("scenarios", {}).values()
            if e.get("summary", {}).get("other_cpu_pct")
        ]
        return max(vals) if vals else None

    row("noise", "max other CPU % in runs", [_num(other_max(results[n])) for n in names])
    notes = []
    for n in names:
        if results[n].get("error"):
            notes.append(f"- {n}: **error** {results[n]['error'].splitlines()[0]}")
        notes += [f"- {n}: {ev}" for ev in results[n].get("events", [])]
        for key, e in results[n].get("scenarios", {}).items():
            if e.get("note"):
                notes.append(f"- {n} {key}: {e['note']}")
    return "\n".join(lines + ([""] + notes if notes else []))


# ------------------------------------------------------------------------------------------
# Built-in scenario: N concurrent producers, persistent SEND with a receipt on every message
# (client side, runs as `stomp_bench.py _concurrent ...`, stdlib only, prints one JSON line)
# ------------------------------------------------------------------------------------------
def _fail(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
        fut.exception()  # mark retrieved


class StompConn(asyncio.Protocol):
    """Minimal STOMP 1.2 client connection: CONNECTED, RECEIPTs, MESSAGE counting, ERROR.

    As a synchronous producer (:meth:`start_sync`) the next SEND goes out from
    ``data_received`` as soon as the previous RECEIPT is in: no coroutine, future or timer
    per message, so the figure is the broker's round trip and not this client's overhead
    (an awaited future plus ``wait_for`` per message cost ~100 us of client CPU, which
    capped 16 producers in one process near 9,000 msg/s).
    """

    def __init__(self, expect: int = 0) -> None:
        loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.connected: asyncio.Future[bool] = loop.create_future()
        self.receipts: dict[str, asyncio.Future[float]] = {}
        self.expect, self.count = expect, 0
        self.t_last: float | None = None
        self.all_received: asyncio.Future[float] = loop.create_future()
        self.progress_at = time.monotonic()
        self.error: str | None = None
        # synchronous producer state (start_sync)
        self.s_expect: bytes | None = None  # the exact RECEIPT awaited (fast path)
        self.s_rid = ""
        self.s_head = self.s_tail = b""
        self.s_tag, self.s_k, self.s_per = "", 0, 0
        self.s_last = 0.0
        self.s_done: asyncio.Future[float] | None = None

    def start_sync(self, head: bytes, body: bytes, tag: str, per: int) -> asyncio.Future[float]:
        """Send ``per`` SENDs (``head`` + receipt header + ``body``), each after the
        previous one's RECEIPT; the future resolves at the last RECEIPT."""
        self.s_head, self.s_tail = head, b"\n\n" + body + b"\x00"
        self.s_tag, self.s_k, self.s_per = tag, 0, per
        self.s_done = asyncio.get_running_loop().create_future()
        if per:
            self._sync_send()
        else:
            self.s_done.set_result(time.monotonic())
        return self.s_done

    def _sync_send(self) -> None:
        rid = f"{self.s_tag}-{self.s_k}"
        raw = rid.encode()
        self.s_rid = rid
        self.s_expect = b"RECEIPT\nreceipt-id:" + raw + b"\n\n\x00"
        assert self.transport is not None
        self.transport.write(self.s_head + b"receipt:" + raw + self.s_tail)

    def _sync_receipt(self) -> None:
        self.s_last = time.monotonic()
        self.s_k += 1
        if self.s_k < self.s_per:
            self._sync_send()
            return
        self.s_expect = None
        if self.s_done is not None and not self.s_done.done():
            self.s_done.set_result(self.s_last)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # (uvloop's is no subclass)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        err = ConnectionError(f"connection lost: {self.error or exc}")
        for f in [*self.receipts.values(), self.connected, self.all_received, self.s_done]:
            if f is not None:
                _fail(f, err)

    def expect_receipt(self, rid: str) -> asyncio.Future[float]:
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.receipts[rid] = fut
        return fut

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        if self.s_expect is not None and data == self.s_expect and not self.buf:
            self._sync_receipt()  # the common case, without parsing
            return
        buf = self.buf
        buf += data
        pos, size = 0, len(buf)
        while True:
            while pos < size and buf[pos] in (10, 13):  # heart-beats / stray EOLs
                pos += 1
            if pos >= size:
                break
            lf, crlf = buf.find(b"\n\n", pos), buf.find(b"\r\n\r\n", pos)
            if crlf >= 0 and (lf < 0 or crlf < lf):
                head_end, body_start = crlf, crlf + 4
            elif lf >= 0:
                head_end, body_start = lf, lf + 2
            else:
                break
            head = (
                bytes(buf[pos:head_end]).replace(b"\r", b"").decode("utf-8", "replace").split("\n")
            )
            headers: dict[str, str] = {}
            for line in head[1:]:
                k, _, v = line.partition(":")
                headers.setdefault(k, v)
            if "content-length" in headers:
                end = body_start + int(headers["content-length"])
                if end >= size:
                    break
            else:
                end = buf.find(b"\x00", body_start)
                if end < 0:
                    break
            self._frame(head[0], headers, bytes(buf[body_start:end]))
            pos = end + 1
        del buf[:pos]
        self.progress_at = time.monotonic()

    def _frame(self, cmd: str, headers: dict[str, str], body: bytes) -> None:
        now = time.monotonic()
        if cmd == "MESSAGE":
            self.count += 1
            self.t_last = now
            if self.count == self.expect and not self.all_received.done():
                self.all_received.set_result(now)
        elif cmd == "RECEIPT":
            if self.s_expect is not None and headers.get("receipt-id") == self.s_rid:
                self._sync_receipt()
                return
            fut = self.receipts.pop(headers.get("receipt-id", ""), None)
            if fut is not None and not fut.done():
                fut.set_result(now)
        elif cmd == "CONNECTED":
            if not self.connected.done():
                self.connected.set_result(True)
        elif cmd == "ERROR":
            self.error = (headers.get("message", "") + " " + body.decode("utf-8", "replace"))[:500]
            print(f"STOMP ERROR frame: {self.error}", file=sys.stderr)
            exc = RuntimeError(f"STOMP ERROR: {self.error}")
            for f in [*self.receipts.values(), self.connected, self.all_received, self.s_done]:
                if f is not None:
                    _fail(f, exc)


class Deadline:
    """A monotonic deadline."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.001, self.end - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.end


async def stomp_open(a: argparse.Namespace, dl: Deadline, expect: int = 0) -> StompConn:
    """Connect and complete the STOMP handshake."""
    loop = asyncio.get_running_loop()
    transport, conn = await asyncio.wait_for(
        loop.create_connection(lambda: StompConn(expect), HOST, a.port), dl.left()
    )
    conn.transport = transport  # uvloop calls connection_made a turn later
    head = ["CONNECT", "accept-version:1.0,1.1,1.2", f"host:{a.vhost}", "heart-beat:0,0"]
    if a.login:
        head += [f"login:{a.login}", f"passcode:{a.passcode}"]
    conn.write(("\n".join(head) + "\n\n").encode() + b"\x00")
    await asyncio.wait_for(conn.connected, dl.left())
    return conn


async def stomp_close(conn: StompConn) -> None:
    """DISCONNECT with a receipt (2 s at most), then close."""
    try:
        if conn.transport and not conn.transport.is_closing():
            fut = conn.expect_receipt("bye")
            conn.write(b"DISCONNECT\nreceipt:bye\n\n\x00")
            await asyncio.wait_for(fut, 2)
    except Exception:
        pass
    finally:
        if conn.transport:
            conn.transport.close()


async def sync_producers(
    a: argparse.Namespace, dest: str, producers: int, per: int
) -> dict[str, Any]:
    """``producers`` connections, each: SEND persistent+receipt, wait for it, repeat ``per`` times."""
    dl = Deadline(a.timeout)
    body = b"x" * a.size
    head = (
        f"SEND\ndestination:{dest}\npersistent:true\ncontent-type:application/octet-stream\n"
        f"content-length:{len(body)}\n"
    ).encode()
    conns = await asyncio.gather(*(stomp_open(a, dl) for _ in range(producers)))
    c0 = time.process_time()
    timed_out = False
    t0 = time.monotonic()
    dones = [c.start_sync(head, body, str(i), per) for i, c in enumerate(conns)]
    try:
        await asyncio.wait_for(asyncio.gather(*dones), dl.left())
    except TimeoutError:
        timed_out = True
    finally:
        for c in conns:
            c.s_expect = None  # stop sending
        await asyncio.gather(*(stomp_close(c) for c in conns), return_exceptions=True)
    confirmed = [c.s_k for c in conns]
    t_last = [c.s_last for c in conns]
    total = sum(confirmed)
    secs = (max(t_last) - t0) if total else 0.0
    return {
        "sent": producers * per,
        "confirmed": total,
        "send_s": round(secs, 4),
        "send_rate": round(total / secs, 1) if secs > 0 else None,
        "timed_out": timed_out,
        "client_cpu_us_per_msg": round(1e6 * (time.process_time() - c0) / total, 1)
        if total
        else None,
    }


async def drain(a: argparse.Namespace, dest: str, expect: int) -> dict[str, Any]:
    """A fresh auto-ack consumer drains ``expect`` messages (or gives up after --idle s)."""
    dl = Deadline(a.timeout)
    t0 = time.monotonic()
    conn = await stomp_open(a, dl, expect=expect)
    conn.write(f"SUBSCRIBE\nid:0\ndestination:{dest}\nack:auto\n\n".encode() + b"\x00")
    timed_out = False
    while expect and not conn.all_received.done():
        if dl.expired() or time.monotonic() - conn.progress_at > a.idle:
            timed_out = True
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(conn.all_received), min(0.25, dl.left()))
    if conn.all_received.done():
        conn.all_received.result()  # raise a STOMP ERROR
    secs = ((conn.t_last or time.monotonic()) - t0) if conn.count else 0.0
    await stomp_close(conn)
    return {
        "received": conn.count,
        "recv_s": round(secs, 4),
        "recv_rate": round(conn.count / secs, 1) if secs > 0 else None,
        "recv_timed_out": timed_out,
    }


async def concurrent_run(a: argparse.Namespace) -> dict[str, Any]:
    """1 producer, then ``a.producers`` producers (separate queues); drain each; compare."""
    tag = uuid.uuid4().hex[:8]
    single_q, multi_q = f"/queue/bench-c1-{tag}", f"/queue/bench-c{a.producers}-{tag}"
    res: dict[str, Any] = {
        "proto": "stomp",
        "mode": "concurrent-sync",
        "producers": a.producers,
        "per_producer": a.per,
        "n": a.producers * a.per,
        "size": a.size,
        "dest": multi_q,
    }
    one = await sync_producers(a, single_q, 1, a.per)
    res["single_client_cpu_us_per_msg"] = one["client_cpu_us_per_msg"]
    res.update(
        single_n=a.per,
        single_confirmed=one["confirmed"],
        single_send_s=one["send_s"],
        single_rate=one["send_rate"],
    )
    one_d = await drain(a, single_q, one["confirmed"])
    res["single_received"] = one_d["received"]
    many = await sync_producers(a, multi_q, a.producers, a.per)
    res.update(many)
    res.update(await drain(a, multi_q, many["confirmed"]))
    res["timed_out"] = bool(one["timed_out"] or many["timed_out"] or res.pop("recv_timed_out"))
    if res.get("send_s") and res.get("recv_s"):
        res["e2e_s"] = round(res["send_s"] + res["recv_s"], 4)
        res["e2e_rate"] = round(res["received"] / res["e2e_s"], 1)
    if res.get("send_rate") and res.get("single_rate"):
        res["ratio_vs_single"] = round(res["send_rate"] / res["single_rate"], 2)
    return res


def concurrent_main(argv: list[str]) -> int:
    """Entry point of the ``_concurrent`` client subcommand (one JSON line on stdout)."""
    ap = argparse.ArgumentParser(prog="stomp_bench.py _concurrent")
    ap.add_argument("--port", type=int, default=STOMP_PORT)
    ap.add_argument("--producers", type=int, default=16)
    ap.add_argument("--per", type=int, default=1000, help="messages per producer")
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=120, help="seconds per phase")
    ap.add_argument("--idle", type=float, default=10)
    ap.add_argument("--login", default="guest")
    ap.add_argument("--passcode", default="guest")
    ap.add_argument("--vhost", default="/")
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    try:  # the client's own loop overhead is part of every round trip: the fast loop if any
        import uvloop

        res = uvloop.run(concurrent_run(a))
    except ImportError:
        res = asyncio.run(concurrent_run(a))
    res["wall_s"] = round(time.monotonic() - t0, 3)
    res["target"] = f"{HOST}:{a.port}"
    print(json.dumps(res))
    print(brief(res), file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------
def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--target", action="append", default=[], choices=TARGETS, help="one target (repeatable)"
    )
    ap.add_argument(
        "--targets",
        default="",
        help="comma list, run in this order, e.g. waystation,rabbitmq,activemq,coilmq",
    )
    ap.add_argument(
        "--scenarios",
        default="",
        help="comma list of scenario keys (default all): " + ",".join(s.key for s in SCENARIOS),
    )
    ap.add_argument(
        "--json", dest="json_out", help="save raw results here (written after every scenario)"
    )
    ap.add_argument("--quick", action="store_true", help="small N, 1 measured run: a smoke test")
    ap.add_argument("--n", type=int, help="messages for the big scenarios (default 100000)")
    ap.add_argument("--sync-n", type=int, help="messages for persistent-sync (default 5000)")
    ap.add_argument(
        "--producers", type=int, default=16, help="concurrent-sync producers (default 16)"
    )
    ap.add_argument(
        "--per-producer", type=int, help="concurrent-sync messages per producer (default 1000)"
    )
    ap.add_argument("--warm-n", type=int, help="warm-up N for the big scenarios (default 20000)")
    ap.add_argument(
        "--reps", type=int, help="measured runs per scenario, median reported (default 3)"
    )
    ap.add_argument(
        "--timeout", type=float, default=120, help="seconds per client phase (default 120)"
    )
    ap.add_argument(
        "--idle", type=float, default=10, help="give up a drain idle this long (default 10)"
    )
    ap.add_argument(
        "--settle", type=float, default=3, help="seconds after ready before idle RSS (default 3)"
    )
    ap.add_argument(
        "--ready-timeout", type=float, default=90, help="seconds to wait for a broker (default 90)"
    )
    ap.add_argument(
        "--port", type=int, default=STOMP_PORT, help="STOMP port (peers always use 61613)"
    )
    ap.add_argument(
        "--config", help="waystation: config file passed to `waystation.gateway.cli run`"
    )
    ap.add_argument(
        "--keep-data", action="store_true", help="waystation: keep the temp working dir"
    )
    ap.add_argument(
        "--no-compile",
        action="store_true",
        help="waystation: do not byte-compile the package before starting it",
    )
    ap.add_argument(
        "--waystation-python",
        metavar="PATH",
        help="waystation: run the package installed for this interpreter (e.g. a venv's "
        "bin/python after `pip install .`), without this repository on PYTHONPATH",
    )
    ap.add_argument(
        "--bench-dir", default=str(DEFAULT_BENCH_DIR), help="folder of bench.py and brokers.sh"
    )
    ap.add_argument(
        "--client-python", help="interpreter for the clients (default: peers venv, else this one)"
    )
    ap.add_argument("--login", default="guest")
    ap.add_argument("--passcode", default="guest")
    a = ap.parse_args(argv)
    a.target_list = list(a.target) + [t.strip() for t in a.targets.split(",") if t.strip()]
    if not a.target_list:
        ap.error("give --target NAME or --targets a,b,c")
    bad = [t for t in a.target_list if t not in TARGETS]
    if bad:
        ap.error(f"unknown target(s) {bad}; choose from {', '.join(TARGETS)}")
    keys = [k.strip() for k in a.scenarios.split(",") if k.strip()]
    unknown = [k for k in keys if k not in {s.key for s in SCENARIOS}]
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}")
    a.scenario_list = [s for s in SCENARIOS if not keys or s.key in keys]
    if a.port != STOMP_PORT and any(t in PEERS for t in a.target_list):
        ap.error("--port only applies to waystation; the peers listen on 61613")
    return a


def settings_from(a: argparse.Namespace) -> Settings:
    """Resolve sizes (defaults or --quick) and paths."""
    q = a.quick
    bench_dir = Path(a.bench_dir)
    python = a.client_python or (str(PEERS_PYTHON) if PEERS_PYTHON.exists() else sys.executable)
    return Settings(
        bench_dir=bench_dir,
        python=python,
        port=a.port,
        n=a.n or (5000 if q else 100000),
        sync_n=a.sync_n or (500 if q else 5000),
        producers=a.producers,
        per_producer=a.per_producer or (50 if q else 1000),
        warm_n=a.warm_n or (1000 if q else 20000),
        sync_warm_n=100 if q else 1000,
        warm_per_producer=10 if q else 100,
        reps=a.reps or (1 if q else 3),
        timeout=a.timeout,
        idle=a.idle,
        settle=a.settle,
        ready_timeout=a.ready_timeout,
        login=a.login,
        passcode=a.passcode,
        scenarios=a.scenario_list,
    )


def host_info() -> dict[str, Any]:
    """CPU count, memory and load of this machine, for the record."""
    info: dict[str, Any] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    with contextlib.suppress(OSError):
        info["loadavg_start"] = Path("/proc/loadavg").read_text().split()[:3]
    if psutil is not None:
        info["mem_gb"] = round(psutil.virtual_memory().total / 2**30, 1)
    return info


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_concurrent"]:
        return concurrent_main(argv[1:])
    a = parse_args(argv)
    st = settings_from(a)
    if not (st.bench_dir / "bench.py").exists():
        print(f"bench.py not found in {st.bench_dir} (use --bench-dir)", file=sys.stderr)
        return 2
    doc: dict[str, Any] = {
        "started": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": host_info(),
        "settings": {
            "n": st.n,
            "sync_n": st.sync_n,
            "producers": st.producers,
            "per_producer": st.per_producer,
            "warm_n": st.warm_n,
            "sync_warm_n": st.sync_warm_n,
            "warm_per_producer": st.warm_per_producer,
            "reps": st.reps,
            "timeout": st.timeout,
            "settle_s": st.settle,
            "client_python": st.python,
            "bench_dir": str(st.bench_dir),
            "size": 100,
            "login": st.login,
        },
        "targets": {},
    }

    def save() -> None:
        if a.json_out:
            out = Path(a.json_out)
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_suffix(out.suffix + ".tmp")
            tmp.write_text(json.dumps(doc, indent=1))
            os.replace(tmp, out)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    interrupted = False
    try:
        for t in a.target_list:
            res: dict[str, Any] = {}
            doc["targets"][t] = res
            try:
                run_target(
                    st,
                    t,
                    {
                        "config": a.config,
                        "keep": a.keep_data,
                        "compile": not a.no_compile,
                        "python": a.waystation_python,
                    },
                    save,
                    res,
                )
            finally:
                print("\n" + target_table(t, res) + "\n", flush=True)
    except KeyboardInterrupt:
        interrupted = True
        doc["interrupted"] = True
        print("\ninterrupted; brokers stopped; partial results follow", file=sys.stderr)
    doc["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    save()
    if len(doc["targets"]) > 1:
        print(
            f"## Side by side (median msg/s of {st.reps} run(s); N={st.n:,}, sync N={st.sync_n:,}, "
            f"concurrent {st.producers}×{st.per_producer:,}; ⚠ = some run incomplete)\n"
        )
        print(side_by_side(doc["targets"]))
    if a.json_out:
        print(f"\nraw results: {a.json_out}")
    if interrupted:
        return 130
    return 1 if any(r.get("error") for r in doc["targets"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
