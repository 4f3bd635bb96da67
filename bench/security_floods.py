#!/usr/bin/env python3
"""Security issue 27's floods against a real node: what each costs a bystander and the node.

Each attack gets a fresh node (security on; users ``admin``, the low-privilege attacker
``app`` and the bystander ``by``, PBKDF2 hashes at the default strength) started with
``--waystation-python`` (default: this repository's source), so one attack's damage cannot
burden the next.  Per attack:

- the **bystander**, a STOMP client in its own process logged in before the attack, sends a
  persistent message with a receipt to its queue every ``--interval`` s and times until both
  the RECEIPT and the MESSAGE are back: p50, p99, max, count and stalls (no answer within
  ``--rtt-timeout``), first for ``--idle-seconds`` with no attack, then during it;
- the node's **memory** from ``/proc/<pid>/status``: VmRSS before, the peak (VmHWM) and
  VmRSS at the end; the size of its data dir after;
- whether the node **survived**: alive and serving a new client's round trip.

The attacks (``--attacks a,b,c,d,e``):

a. ``qos2``: an MQTT 3.1.1 persistent session (clean=0) sends 10,000 QoS 2 PUBLISHes of
   100 bytes with new packet ids and never sends PUBREL.
b. ``auto-create``: the attacker publishes QoS 0 to 10,050 distinct topics; can another
   user still create a queue?
c. ``metrics``: 10,000 queues (admin API), then 5 scrapes of ``/metrics`` (without login;
   with the admin's if refused): size, series and time; ``GET /admin/api/v1/addresses`` and
   ``/queues`` timed.  The bystander runs during the scrapes only.
d. ``login``: wrong passwords for ``app`` from 127.0.0.1, while ``by`` connects over STOMP
   with the correct password from the same address: its connect latency and refusals.
e. ``sessions``: unauthenticated tunnel opens and SockJS sessions from 127.0.0.1 and enough
   other loopback addresses to fill the node-wide cap, then an authenticated user's tunnel
   and SockJS connect from 127.0.0.1 (the flooded address) and from 127.0.0.3.

``--scale`` shrinks every count; below 1 it also scales the node-wide cap an attack aims at
(``max_auto_created`` for b, the tunnel's and SockJS's ``max_sessions`` for e), so a small
run shows the same shape.  Everything is bounded (``--timeout`` per attack) and contacts
only 127.0.0.x; the node is killed in a ``finally``.

  python bench/security_floods.py --waystation-python /tmp/venv-before/bin/python --scale 0.05
  python bench/security_floods.py --waystation-python /tmp/venv-after/bin/python --json after.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing as mp
import os
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent / "tests" / "gateway")]

import aiohttp  # noqa: E402
from nodekit import wait_port  # noqa: E402
from stomp_bench import HOST, WaystationBroker, alive, free_port  # noqa: E402
from tunnelkit import AsyncStomp, RawTunnel, stomp_bytes  # noqa: E402

from waystation.config.passwords import hash_password  # noqa: E402
from waystation.wire.tunnel import H_TOKEN  # noqa: E402

PASSWORDS = {"admin": "adminpw", "app": "secret", "by": "bypw"}
ROLES = {"admin": "admin", "app": "rw", "by": "rw"}
ATTACKER, BYSTANDER, ADMIN = "app", "by", "admin"
# as tests/ops/opskit.py: "rw" may message and create anywhere but not manage
PERMISSIONS = """
[[permissions]]
match = "#"
send = ["rw", "admin"]
consume = ["rw", "admin"]
browse = ["rw", "admin"]
create_durable_queue = ["rw", "admin"]
create_non_durable_queue = ["rw", "admin"]
delete_durable_queue = ["rw", "admin"]
delete_non_durable_queue = ["rw", "admin"]
manage = ["admin"]
"""
BYSTANDER_SOURCE = "127.0.0.2"  # the bystander's own address: per-address limits spare it
OTHER_SOURCE = "127.0.0.3"  # a fresh address for probes
PROBE_SOURCE = "127.0.0.4"
BY_QUEUE = "/queue/bystander"
PER_ADDRESS = 100  # the tunnel's and SockJS's default max_sessions_per_address
MB = 2**20


def basic(user: str) -> dict[str, str]:
    return {"Authorization": aiohttp.encode_basic_auth(user, PASSWORDS[user])}


def scaled(n: int, a: argparse.Namespace) -> int:
    return max(1, round(n * a.scale))


# -- the node ------------------------------------------------------------------------------
def node_config(stomp: int, http: int, mqtt: int, hashes: dict[str, str], extra: str) -> str:
    users = "".join(
        f'[[users]]\nname = "{u}"\npassword_hash = "{h}"\nroles = ["{ROLES[u]}"]\n\n'
        for u, h in hashes.items()
    )
    return f"""
[node]
name = "floods"
data_dir = "data"
log_level = "WARNING"

[acceptors]
amqp = false

[acceptors.stomp]
url = "tcp://{HOST}:{stomp}"

[acceptors.http]
url = "http://{HOST}:{http}"

[acceptors.mqtt]
url = "tcp://{HOST}:{mqtt}"

{users}{PERMISSIONS}
{extra}
"""


class Node:
    """One node for one attack: its own ports, and a temp dir with its config and data (its
    log is in WaystationBroker's working dir)."""

    def __init__(self, python: str | None, hashes: dict[str, str], extra: str, keep: bool):
        self.stomp, self.http, self.mqtt = free_port(), free_port(), free_port()
        self.confdir = Path(tempfile.mkdtemp(prefix="floods-conf-"))
        config = self.confdir / "node.toml"
        config.write_text(node_config(self.stomp, self.http, self.mqtt, hashes, extra))
        self.broker = WaystationBroker(str(config), self.stomp, 90, keep, python)
        self.keep = keep

    def start(self) -> None:
        self.broker.start()
        for port in (self.http, self.mqtt):
            wait_port(port, 30, self.broker.proc)

    @property
    def pid(self) -> int:
        assert self.broker.pid is not None
        return self.broker.pid

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.http}"

    def data_mb(self) -> float:
        root = self.confdir / "data"  # data_dir is resolved against the config file
        files = (p for p in root.rglob("*") if p.is_file()) if root.exists() else ()
        return round(sum(p.stat().st_size for p in files) / MB, 1)

    def kill(self) -> None:
        """SIGKILL at once (its data is thrown away), then let the broker reap and clean."""
        if self.broker.proc is not None and self.broker.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.broker.proc.pid, signal.SIGKILL)
        self.broker.stop()  # removes its working dir (node.log) unless keep
        if not self.keep:
            shutil.rmtree(self.confdir, ignore_errors=True)


def proc_memory_mb(pid: int) -> tuple[float, float] | None:
    """(VmRSS, VmHWM) of ``pid`` in MiB, None once it is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    kb = {k: int(v.split()[0]) for k, _, v in (ln.partition(":") for ln in lines) if k[:2] == "Vm"}
    if "VmRSS" not in kb:
        return None
    return round(kb["VmRSS"] / 1024, 1), round(kb.get("VmHWM", kb["VmRSS"]) / 1024, 1)


class MemoryWatch(threading.Thread):
    """Keeps the node's last (VmRSS, VmHWM): the peak stays known if the node dies."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.last = pid, proc_memory_mb(pid)
        self.start_rss = self.last[0] if self.last else None
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(0.2):
            self.last = proc_memory_mb(self.pid) or self.last

    def finish(self) -> dict[str, float | None]:
        self.halt.set()
        self.join(2)
        self.last = proc_memory_mb(self.pid) or self.last
        peak, end = (self.last[1], self.last[0]) if self.last else (None, None)
        return {"rss_start_mb": self.start_rss, "rss_peak_mb": peak, "rss_end_mb": end}


# -- STOMP round trips (the bystander, the survival check, probes) -------------------------
async def stomp_login(
    port: int, login: str, source: str = HOST, timeout: float = 30, passcode: str | None = None
) -> tuple[AsyncStomp, Any]:
    """A STOMP connection from ``source`` (``login``'s own password unless ``passcode``); the
    first frame the node answered with."""
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(HOST, port, local_addr=(source, 0)), timeout
    )
    client = AsyncStomp(reader, writer)
    client.frame(
        "CONNECT",
        **{"accept-version": "1.2", "host": "floods", "heart-beat": "0,0"},
        login=login,
        passcode=PASSWORDS[login] if passcode is None else passcode,
    )
    return client, await client.next(timeout)


async def round_trip(client: AsyncStomp, dest: str, k: int, timeout: float) -> float:
    """Persistent SEND with a receipt to ``dest`` (subscribed); seconds until both are back."""
    t0 = time.monotonic()
    tag = f"rt-{k}"
    client.frame("SEND", tag.encode(), destination=dest, persistent="true", receipt=tag)
    receipt = message = False
    while not (receipt and message):
        f = await client.next(max(0.001, t0 + timeout - time.monotonic()))
        if f.command == "ERROR":
            raise RuntimeError(f.headers.get("message", "ERROR"))
        receipt = receipt or (f.command == "RECEIPT" and f.headers.get("receipt-id") == tag)
        message = message or (f.command == "MESSAGE" and f.body == tag.encode())
    return time.monotonic() - t0


async def subscribed(port: int, source: str, dest: str) -> AsyncStomp:
    client, first = await stomp_login(port, BYSTANDER, source)
    if first.command != "CONNECTED":
        raise RuntimeError(f"bystander login refused: {first.headers.get('message')}")
    client.frame("SUBSCRIBE", id="0", destination=dest, ack="auto")
    return client


async def _bystander(port: int, interval: float, rtt_timeout: float, stop: Any, out: Any) -> None:
    client = await subscribed(port, BYSTANDER_SOURCE, BY_QUEUE)
    await round_trip(client, BY_QUEUE, 0, rtt_timeout)  # warm, and proves the path
    out.put({"ready": True})
    samples: list[float] = []
    stalls, error, k = 0, None, 0
    while not stop.is_set():
        k += 1
        try:
            samples.append(await round_trip(client, BY_QUEUE, k, rtt_timeout))
        except TimeoutError:
            stalls += 1
            samples.append(rtt_timeout)
        except Exception as e:  # connection lost or refused: the rest of the window is lost
            error = f"{type(e).__name__}: {e}"[:200]
            break
        await asyncio.sleep(interval)
    await client.close()
    out.put({"samples": samples, "stalls": stalls, "error": error})


def _bystander_main(port: int, interval: float, rtt_timeout: float, stop: Any, out: Any) -> None:
    try:
        asyncio.run(_bystander(port, interval, rtt_timeout, stop, out))
    except Exception as e:
        out.put({"ready": False, "error": f"{type(e).__name__}: {e}"[:200]})


def percentile(xs: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(xs)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def rtt_summary(samples: list[float], **extra: Any) -> dict[str, Any]:
    ms = [x * 1000 for x in samples]
    out: dict[str, Any] = {"n": len(ms), **extra}
    if ms:
        out.update(
            p50_ms=round(statistics.median(ms), 2),
            p99_ms=round(percentile(ms, 0.99), 2),
            max_ms=round(max(ms), 2),
        )
    return out


class Bystander:
    """The bystander's process, started by ``with``; :meth:`stop` returns its summary."""

    def __init__(self, node: Node, a: argparse.Namespace) -> None:
        ctx = mp.get_context("spawn")  # no fork of a process holding threads and loops
        self.stop_ev, self.out = ctx.Event(), ctx.Queue()
        self.timeout = a.rtt_timeout
        self.proc = ctx.Process(
            target=_bystander_main,
            args=(node.stomp, a.interval, a.rtt_timeout, self.stop_ev, self.out),
            daemon=True,
        )

    def __enter__(self) -> Bystander:
        self.proc.start()
        try:
            ready = self.out.get(timeout=60)
        except Exception:
            ready = {"error": "no answer in 60 s"}
        if not ready.get("ready"):
            self.__exit__()
            raise RuntimeError(f"bystander did not start: {ready.get('error')}")
        return self

    def stop(self) -> dict[str, Any]:
        self.stop_ev.set()
        try:
            r = self.out.get(timeout=self.timeout + 30)
        except Exception:
            return {"n": 0, "error": "bystander gave no result"}
        return rtt_summary(r["samples"], stalls=r["stalls"], error=r["error"])

    def __exit__(self, *exc: object) -> None:
        self.stop_ev.set()
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()  # ours, by its pid
            self.proc.join(5)


async def survived(node: Node) -> str:
    """'yes (N ms)' when a new connection's round trip (to the bystander's queue, which
    exists) works; 'answers, but …' when the node refuses it; else what happened."""
    if not alive(node.pid):
        return f"no: died (exit {node.broker.proc.poll() if node.broker.proc else '?'})"
    try:
        client = await asyncio.wait_for(subscribed(node.stomp, PROBE_SOURCE, BY_QUEUE), 30)
        rtt = await round_trip(client, BY_QUEUE, 1, 30)
        await client.close()
        return f"yes ({rtt * 1000:.0f} ms)"
    except (RuntimeError, AssertionError) as e:  # an ERROR frame or a closed connection
        return f"answers, but: {e}"[:160]
    except Exception as e:
        return f"no: unresponsive ({type(e).__name__}: {e})"[:160]


# -- raw MQTT 3.1.1 (the attacker needs packets no well-behaved client sends) ---------------
CONNACK, PUBREC, PINGRESP = 2, 5, 13


def _mqtt(first: int, body: bytes) -> bytes:
    n, head = len(body), bytearray([first])
    while True:
        n, digit = divmod(n, 128)
        head.append(digit | (128 if n else 0))
        if not n:
            return bytes(head) + body


def _mqtt_str(text: str) -> bytes:
    raw = text.encode()
    return len(raw).to_bytes(2, "big") + raw


def mqtt_connect(client_id: str, user: str, clean: bool) -> bytes:
    flags = 0xC0 | (0x02 if clean else 0)  # user name, password, clean session
    head = _mqtt_str("MQTT") + bytes([4, flags]) + (60).to_bytes(2, "big")
    return _mqtt(0x10, head + _mqtt_str(client_id) + _mqtt_str(user) + _mqtt_str(PASSWORDS[user]))


def mqtt_publish(topic: str, payload: bytes, qos: int = 0, packet_id: int = 0) -> bytes:
    pid = packet_id.to_bytes(2, "big") if qos else b""
    return _mqtt(0x30 | qos << 1, _mqtt_str(topic) + pid + payload)


class MqttClient:
    """A raw MQTT connection that counts what the node sends back, by packet type."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writer, self.counts, self.closed = writer, Counter[int](), False
        self.changed = asyncio.Event()
        self.connack = b""
        self.task = asyncio.ensure_future(self._read(reader))

    @classmethod
    async def open(cls, port: int, client_id: str, user: str, clean: bool) -> MqttClient:
        c = cls(*await asyncio.open_connection(HOST, port))
        c.writer.write(mqtt_connect(client_id, user, clean))
        await c.wait(lambda: c.counts[CONNACK] > 0, 30)
        if not c.connack or c.connack[1] != 0:
            raise RuntimeError(f"MQTT CONNECT refused: {c.connack!r}")
        return c

    async def _read(self, r: asyncio.StreamReader) -> None:
        try:
            while True:
                first = (await r.readexactly(1))[0]
                n, mult = 0, 1
                while True:
                    b = (await r.readexactly(1))[0]
                    n, mult = n + (b & 127) * mult, mult * 128
                    if b < 128:
                        break
                body = await r.readexactly(n)
                if first >> 4 == CONNACK:
                    self.connack = body
                self.counts[first >> 4] += 1
                self.changed.set()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed = True
            self.changed.set()

    async def wait(self, pred: Callable[[], bool], timeout: float) -> bool:
        end = time.monotonic() + timeout
        while not (pred() or self.closed):
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), max(0.001, end - time.monotonic()))
            if time.monotonic() >= end:
                break
        return pred()

    async def send_all(self, packets: Callable[[int], bytes], n: int) -> int:
        """Write ``packets(i)`` for i < n (flow control: the socket's); how many went out."""
        sent = 0
        try:
            for i in range(n):
                if self.closed:
                    break
                self.writer.write(packets(i))
                sent += 1
                if sent % 100 == 0:
                    await self.writer.drain()
            await self.writer.drain()
        except ConnectionError:
            self.closed = True
        return sent

    async def close(self) -> None:
        """Drop the connection (no DISCONNECT: a persistent session stays on the node)."""
        self.writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), 5)
        self.task.cancel()


# -- the attacks ---------------------------------------------------------------------------
async def qos2_no_pubrel(node: Node, a: argparse.Namespace, out: dict[str, Any]) -> None:
    n, payload = scaled(10_000, a), b"x" * 100
    c = await MqttClient.open(node.mqtt, "floods-qos2", ATTACKER, clean=False)
    t0 = time.monotonic()
    out["publishes"] = await c.send_all(
        lambda i: mqtt_publish("floods/qos2", payload, 2, i % 65535 + 1), n
    )
    await c.wait(lambda: c.counts[PUBREC] >= out["publishes"], a.timeout)
    out.update(pubrec=c.counts[PUBREC], seconds=round(time.monotonic() - t0, 2))
    out["closed_by_node"] = c.closed
    await c.close()
    await asyncio.sleep(1)  # let the session's last state write land before data_mb is read


async def can_create_queue(node: Node) -> str:
    """Can the bystander user still make a new queue (a persistent SEND to a new name)?"""
    client, first = await stomp_login(node.stomp, BYSTANDER, OTHER_SOURCE)
    if first.command != "CONNECTED":
        return f"no: login {first.headers.get('message')}"
    dest = f"/queue/fresh-{uuid.uuid4().hex[:8]}"
    client.frame("SEND", b"x", destination=dest, persistent="true", receipt="r")
    f = await client.next(30)
    await client.close()
    if f.command == "RECEIPT":
        return "yes"
    return f"no: {f.headers.get('message') or f.body.decode(errors='replace')}"[:160]


async def admin_get(http: aiohttp.ClientSession, path: str) -> dict[str, Any]:
    """Time one admin API GET; its size and the number of items it listed."""
    t0 = time.monotonic()
    async with http.get(path, headers=basic(ADMIN)) as r:
        body = await r.read()
    out = {"status": r.status, "seconds": round(time.monotonic() - t0, 3), "bytes": len(body)}
    with contextlib.suppress(ValueError):
        doc = json.loads(body)
        items = (
            doc
            if isinstance(doc, list)
            else next((v for v in doc.values() if isinstance(v, list)), None)
        )
        if items is not None:
            out["items"] = len(items)
    return out


async def auto_create(node: Node, a: argparse.Namespace, out: dict[str, Any]) -> None:
    n, payload = scaled(10_050, a), b"x" * 100
    c = await MqttClient.open(node.mqtt, "floods-autocreate", ATTACKER, clean=True)
    t0 = time.monotonic()
    out["publishes"] = await c.send_all(lambda i: mqtt_publish(f"floods/ac/{i}", payload), n)
    c.writer.write(b"\xc0\x00")  # PINGREQ: its answer comes after every PUBLISH before it
    await c.wait(lambda: c.counts[PINGRESP] > 0, a.timeout)
    out.update(seconds=round(time.monotonic() - t0, 2), closed_by_node=c.closed)
    await c.close()
    out["other_user_can_create"] = await can_create_queue(node)
    async with aiohttp.ClientSession(node.url) as http:
        out["addresses"] = (await admin_get(http, "/admin/api/v1/addresses")).get("items")


async def _create_queues(node: Node, a: argparse.Namespace, out: dict[str, Any]) -> None:
    """Setup of ``metrics``: ``10,000`` queues made through the admin API, 16 at a time."""
    n, ok, errors = scaled(10_000, a), 0, Counter[str]()
    names = iter(range(n))
    t0 = time.monotonic()

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal ok
        for i in names:
            body = {"name": f"m.q{i}", "address": f"m.q{i}"}
            async with http.post("/admin/api/v1/queues", json=body) as r:
                if r.status == 201:
                    ok += 1
                else:
                    errors[f"{r.status} {(await r.text())[:80]}"] += 1

    async with aiohttp.ClientSession(node.url, headers=basic(ADMIN)) as http:
        await asyncio.gather(*(worker(http) for _ in range(16)))
    out.update(queues=ok, create_s=round(time.monotonic() - t0, 1))
    if errors:
        out["create_errors"] = dict(errors.most_common(3))


async def metrics_scrapes(node: Node, a: argparse.Namespace, out: dict[str, Any]) -> None:
    async with aiohttp.ClientSession(node.url) as http:
        async with http.get("/metrics") as r:
            await r.read()
        auth: dict[str, str] = {}
        out["metrics_login"] = f"not needed ({r.status})"
        if r.status in (401, 403):
            auth = basic(ADMIN)
            out["metrics_login"] = f"needed ({r.status})"
        times, body, status = [], b"", 0
        for _ in range(5):
            t0 = time.monotonic()
            async with http.get("/metrics", headers=auth) as r:
                body, status = await r.read(), r.status
            times.append(time.monotonic() - t0)
        series = sum(1 for ln in body.splitlines() if ln.strip() and not ln.startswith(b"#"))
        out["metrics"] = {
            "status": status,
            "bytes": len(body),
            "series": series,
            "scrape_s": [round(t, 3) for t in times],
        }
        for what in ("addresses", "queues"):
            out[f"api_{what}"] = await admin_get(http, f"/admin/api/v1/{what}")


async def login_flood(node: Node, a: argparse.Namespace, out: dict[str, Any]) -> None:
    end = time.monotonic() + max(3.0, a.login_seconds * min(1.0, a.scale))
    tries, answers = Counter[str](), Counter[str]()
    latencies: list[float] = []
    refusals: list[str] = []

    async def guesser() -> None:
        while time.monotonic() < end:
            try:
                client, f = await stomp_login(node.stomp, ATTACKER, passcode="wrong")
                await client.close()
                tries["answered"] += 1
                tries["throttled"] += b"throttle" in f.body
            except Exception:
                tries["errors"] += 1

    async def bystander_connects() -> None:
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                client, f = await stomp_login(node.stomp, BYSTANDER)
                await client.close()
            except Exception as e:
                answers[f"error {type(e).__name__}"] += 1
                continue
            if f.command == "CONNECTED":
                answers["ok"] += 1
                latencies.append(time.monotonic() - t0)
            else:
                answers["refused"] += 1
                refusals.append(f.body.decode(errors="replace").strip()[:120])
            await asyncio.sleep(a.interval)

    await asyncio.gather(*(guesser() for _ in range(8)), bystander_connects())
    out["guesses"] = dict(tries)
    out["by_connects"] = rtt_summary(latencies, **answers)
    if refusals:
        out["by_refused_with"] = refusals[0]


async def _tunnel_probe(node: Node, source: str) -> str:
    """An authenticated user's tunnel: open (with Basic credentials), STOMP CONNECT as ``by``."""
    t0 = time.monotonic()
    conn = aiohttp.TCPConnector(local_addr=(source, 0))
    async with aiohttp.ClientSession(connector=conn, headers=basic(BYSTANDER)) as http:
        async with http.post(f"{node.url}/tunnel/open", params={"protocol": "stomp"}) as r:
            if r.status != 201:
                return f"{r.status} {(await r.text()).strip()[:80]}"
            info = await r.json()
        tunnel = RawTunnel(http, f"{node.url}/tunnel")
        tunnel.sid = str(info["session"])
        http.headers[H_TOKEN] = str(info["token"])
        connect = stomp_bytes(
            "CONNECT", **{"accept-version": "1.2", "host": "floods"}, login=BYSTANDER,
            passcode=PASSWORDS[BYSTANDER],
        )  # fmt: skip
        await tunnel.up(0, connect)
        status, _, body = await tunnel.down(0)
    ok = status == 200 and body.startswith(b"CONNECTED")
    return f"ok {(time.monotonic() - t0) * 1000:.0f} ms" if ok else f"{status} {body[:80]!r}"


async def _sockjs_probe(node: Node, source: str) -> str:
    """An authenticated user's SockJS session (xhr polling): open, CONNECT as ``by``."""
    t0 = time.monotonic()
    base = f"{node.url}/sockjs/stomp/000/probe{uuid.uuid4().hex[:8]}"
    frame = stomp_bytes(
        "CONNECT", **{"accept-version": "1.2", "host": "floods"}, login=BYSTANDER,
        passcode=PASSWORDS[BYSTANDER],
    ).decode()  # fmt: skip
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(source, 0))) as h:
        async with h.post(base + "/xhr") as r:
            if r.status != 200:
                return f"{r.status} {(await r.text()).strip()[:80]}"
        async with h.post(base + "/xhr_send", data=json.dumps([frame])) as r:
            if r.status != 204:
                return f"xhr_send {r.status} {(await r.text()).strip()[:80]}"
        async with h.post(base + "/xhr") as r:
            text = await r.text()
    ok = text.startswith('a["CONNECTED')
    return f"ok {(time.monotonic() - t0) * 1000:.0f} ms" if ok else f"{r.status} {text[:80]!r}"


async def session_flood(node: Node, a: argparse.Namespace, out: dict[str, Any]) -> None:
    cap = scaled(10_000, a)
    sources = [HOST] + [f"127.0.{1 + k // 250}.{1 + k % 250}" for k in range(cap // PER_ADDRESS)]
    tunnel, sockjs = Counter[int](), Counter[int]()
    t0 = time.monotonic()

    async def from_source(k: int, source: str) -> None:
        conn = aiohttp.TCPConnector(local_addr=(source, 0), limit=4)
        async with aiohttp.ClientSession(node.url, connector=conn) as http:
            for i in range(PER_ADDRESS + 2):
                try:
                    async with http.post("/tunnel/open", params={"protocol": "stomp"}) as r:
                        await r.read()
                        tunnel[r.status] += 1
                    async with http.post(f"/sockjs/stomp/000/f{k}x{i}/xhr") as r:
                        await r.read()
                        sockjs[r.status] += 1
                except (aiohttp.ClientError, OSError):
                    tunnel[0] += 1

    await asyncio.gather(*(from_source(k, s) for k, s in enumerate(sources)))
    out.update(
        sources=len(sources),
        flood_s=round(time.monotonic() - t0, 1),
        tunnel_opens=dict(tunnel),
        sockjs_opens=dict(sockjs),
    )
    for source in (HOST, OTHER_SOURCE):
        out[f"tunnel_auth_{source}"] = await _tunnel_probe(node, source)
        out[f"sockjs_auth_{source}"] = await _sockjs_probe(node, source)


# -- one attack, start to finish -----------------------------------------------------------
AttackFn = Callable[[Node, argparse.Namespace, dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Attack:
    name: str
    run: AttackFn
    brief: Callable[[dict[str, Any]], str]
    setup: AttackFn | None = None  # before the bystander starts (not measured)
    config: Callable[[argparse.Namespace], str] = lambda a: ""


def _caps_b(a: argparse.Namespace) -> str:
    return "" if a.scale >= 1 else f"[limits]\nmax_auto_created = {scaled(10_000, a)}\n"


def _caps_e(a: argparse.Namespace) -> str:
    if a.scale >= 1:
        return ""
    n = scaled(10_000, a)
    return f"[acceptors.http.tunnel]\nmax_sessions = {n}\n[acceptors.http.sockjs]\nmax_sessions = {n}\n"


def _brief_metrics(r: dict[str, Any]) -> str:
    m, q, ad = r.get("metrics", {}), r.get("api_queues", {}), r.get("api_addresses", {})
    scrape = m.get("scrape_s") or [0]

    def api(x: dict[str, Any]) -> str:
        status = "" if x.get("status") == 200 else f"status {x.get('status')}, "
        return f"{x.get('seconds')} s ({status}{x.get('items')} items, {x.get('bytes')} B)"

    return (
        f"{r.get('queues')} queues; /metrics login {r.get('metrics_login')}: "
        f"{m.get('bytes', 0) / 1000:,.0f} kB, {m.get('series')} series, "
        f"{min(scrape):.2f}-{max(scrape):.2f} s per scrape; API addresses {api(ad)}, "
        f"queues {api(q)}"
    )


ATTACKS: dict[str, Attack] = {
    "a": Attack(
        "qos2",
        qos2_no_pubrel,
        lambda r: (
            f"{r.get('pubrec')}/{r.get('publishes')} PUBREC in {r.get('seconds')} s, "
            f"closed by node: {r.get('closed_by_node')}"
        ),
    ),
    "b": Attack(
        "auto-create",
        auto_create,
        lambda r: (
            f"{r.get('publishes')} topics in {r.get('seconds')} s, closed by node: "
            f"{r.get('closed_by_node')}; addresses {r.get('addresses')}; "
            f"other user can create: {r.get('other_user_can_create')}"
        ),
        config=_caps_b,
    ),
    "c": Attack("metrics", metrics_scrapes, _brief_metrics, setup=_create_queues),
    "d": Attack(
        "login",
        login_flood,
        lambda r: (
            f"guesses {r.get('guesses')}; by connects {r.get('by_connects')}"
            + (f"; refused with: {r['by_refused_with']}" if r.get("by_refused_with") else "")
        ),
    ),
    "e": Attack(
        "sessions",
        session_flood,
        lambda r: (
            f"{r.get('sources')} sources, tunnel {r.get('tunnel_opens')}, sockjs "
            f"{r.get('sockjs_opens')} in {r.get('flood_s')} s; auth connect: "
            + ", ".join(
                f"{k.replace('_auth_', ' from ')} {v}" for k, v in r.items() if "_auth_" in k
            )
        ),
        config=_caps_e,
    ),
}


def _guarded(fn: AttackFn, node: Node, a: argparse.Namespace, out: dict[str, Any]) -> None:
    """Run one phase under ``--timeout``; a timeout or failure is noted, never raised."""
    try:
        asyncio.run(asyncio.wait_for(fn(node, a, out), a.timeout))
    except TimeoutError:
        out["error"] = f"timed out after {a.timeout:.0f} s"
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"[:300]


def run_attack(key: str, a: argparse.Namespace, hashes: dict[str, str]) -> dict[str, Any]:
    spec = ATTACKS[key]
    res: dict[str, Any] = {"attack": f"{key}. {spec.name}", "result": {}}
    node = Node(a.waystation_python, hashes, spec.config(a), a.keep_data)
    try:
        node.start()
        watch = MemoryWatch(node.pid)
        watch.start()
        res["data_start_mb"] = node.data_mb()  # the journal's pre-allocated files
        with Bystander(node, a) as idle:
            time.sleep(a.idle_seconds)
            res["idle"] = idle.stop()
        if spec.setup:
            _guarded(spec.setup, node, a, res["result"])
        with Bystander(node, a) as by:
            _guarded(spec.run, node, a, res["result"])
            res["bystander"] = by.stop()
        res["survived"] = asyncio.run(survived(node))
        res.update(watch.finish(), data_mb=node.data_mb())
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"[:300]
    finally:
        node.kill()
    return res


def _ms(s: dict[str, Any] | None) -> str:
    if not s or not s.get("n"):
        return f"– ({(s or {}).get('error') or 'no samples'})"
    text = f"{s['p50_ms']:.1f} / {s['p99_ms']:.1f} / {s['max_ms']:.1f} (n {s['n']}"
    text += f", {s['stalls']} stalls" if s.get("stalls") else ""
    return text + (f", lost: {s['error']}" if s.get("error") else "") + ")"


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| attack | bystander RTT ms p50 / p99 / max | idle p50 / p99 | RSS MB start / peak / end "
        "| data MB start / end | survived | what happened |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        idle = r.get("idle") or {}
        rss = " / ".join(
            f"{r.get(k) or '–'}" for k in ("rss_start_mb", "rss_peak_mb", "rss_end_mb")
        )
        what = ATTACKS[r["attack"][0]].brief(r["result"])
        for err in (r["result"].get("error"), r.get("error")):
            what += f"; **{err}**" if err else ""
        lines.append(
            f"| {r['attack']} | {_ms(r.get('bystander'))} | {idle.get('p50_ms', '–')} / "
            f"{idle.get('p99_ms', '–')} | {rss} | {r.get('data_start_mb', '–')} / "
            f"{r.get('data_mb', '–')} | "
            f"{r.get('survived', '–')} | {what} |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--waystation-python", help="an installed node's Python (default: REPO)")
    ap.add_argument("--attacks", default="a,b,c,d,e", help="comma list of a..e")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every count (smoke: 0.05)")
    ap.add_argument("--interval", type=float, default=0.02, help="bystander pause, seconds")
    ap.add_argument("--rtt-timeout", type=float, default=30, help="a round trip stalls after")
    ap.add_argument("--idle-seconds", type=float, default=2, help="bystander alone, first")
    ap.add_argument("--login-seconds", type=float, default=10, help="login flood length")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per attack phase")
    ap.add_argument("--keep-data", action="store_true", help="keep each node's working dir")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args()
    keys = [k.strip() for k in a.attacks.split(",") if k.strip()]
    if bad := [k for k in keys if k not in ATTACKS]:
        ap.error(f"unknown attacks {bad}; choose from {','.join(ATTACKS)}")
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    hashes = {u: hash_password(p) for u, p in PASSWORDS.items()}
    results = []
    for k in keys:
        print(f"[{k}. {ATTACKS[k].name}] running", file=sys.stderr, flush=True)
        results.append(run_attack(k, a, hashes))
        print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    print(f"\nnode: {a.waystation_python or 'source'}; scale {a.scale}\n")
    print(table(results))
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
