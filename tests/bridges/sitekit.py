"""Two real nodes joined by a bridge through WanProxy, a producer that counts receipts, and a
consumer that checks what arrived."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import stomp
from nodekit import NodeProcess
from stompkit import Collect, connect
from wanproxy import WanProxy

# Fast reconnects and a short liveness time, so faults heal within a test's patience.
FAST_LINK = {
    "retry_interval": "100ms",
    "retry_multiplier": 2.0,
    "max_retry_interval": "1s",
    "heartbeat": "500ms",
    "liveness_timeout": "2s",
}


def toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def bridge_toml(name: str, remote: str, ports: Iterable[int], **options: object) -> str:
    """A ``[[bridges]]`` entry to ``remote`` at 127.0.0.1 on ``ports`` (failover order)."""
    opts: dict[str, object] = {**FAST_LINK, **options}
    lines = [
        "[[bridges]]",
        f"name = {toml_value(name)}",
        f"remote_node = {toml_value(remote)}",
        f"urls = {toml_value([f'tcp://127.0.0.1:{p}' for p in ports])}",
    ]
    lines += [f"{k} = {toml_value(v)}" for k, v in opts.items()]
    return "\n" + "\n".join(lines) + "\n"


@dataclass
class Sites:
    a: NodeProcess
    b: NodeProcess
    proxies: list[WanProxy] = field(default_factory=list)

    @property
    def proxy(self) -> WanProxy:
        return self.proxies[0]

    def start(self) -> Sites:
        """site-b, then site-a; both stopped again if either fails to start."""
        try:
            self.b.start()
            self.a.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for n in (self.a, self.b):
            try:
                n.stop()
            except Exception:
                n.kill9()
        for p in self.proxies:
            p.stop()


def two_sites(
    tmp: Path,
    *,
    a_extra: str = "",
    b_extra: str = "",
    bridge: dict[str, object] | None = None,
    proxies: int = 1,
    b_limits: dict[str, object] | None = None,
    start: bool = True,
) -> Sites:
    """site-b, ``proxies`` WanProxies in front of it, and site-a bridged to them in order."""
    limits = "".join(f"{k} = {toml_value(v)}\n" for k, v in (b_limits or {}).items())
    b = NodeProcess(tmp / "site-b", extra_config=b_extra, name="site-b", stomp=limits)
    wan = [WanProxy(b.stomp_port).start() for _ in range(proxies)]
    a_cfg = bridge_toml("to-site-b", "site-b", [p.port for p in wan], **(bridge or {})) + a_extra
    a = NodeProcess(tmp / "site-a", extra_config=a_cfg, name="site-a")
    sites = Sites(a, b, wan)
    return sites.start() if start else sites


# -- producing --------------------------------------------------------------------------------
def send_all(
    port: int,
    destination: str,
    bodies: Iterable[str],
    *,
    headers: dict[str, str] | None = None,
    batch: int = 200,
    timeout: float = 20.0,
    between: Callable[[int], None] | None = None,
) -> list[str]:
    """Send durable messages with a receipt each, ``batch`` at a time; return the bodies whose
    receipt arrived (stops early if the connection drops).  ``between(i)`` runs after the
    ``i``-th batch was sent, before its receipts are awaited (for fault injection)."""
    conn, listener = connect(port)
    confirmed: list[str] = []
    try:
        pending: list[tuple[str, str]] = []
        items = list(bodies)
        for i in range(0, len(items), batch):
            chunk = items[i : i + batch]
            pending = []
            for body in chunk:
                rid = f"r-{len(confirmed) + len(pending)}-{body}"
                h = {"persistent": "true", "receipt": rid, **(headers or {})}
                try:
                    conn.send(destination, body, headers=h)
                except (stomp.exception.StompException, OSError):
                    return confirmed + _receipted(listener, pending)
                pending.append((rid, body))
            if between is not None:
                between(i // batch)
            want = len(confirmed) + len(pending)

            def done(want: int = want) -> bool:
                return len(listener.receipts) >= want or listener.disconnected

            ok = listener.wait(done, timeout)
            got = _receipted(listener, pending)
            confirmed += got
            if not ok or len(got) < len(pending):
                return confirmed
        return confirmed
    finally:
        if conn.is_connected():
            conn.disconnect()


def _receipted(listener: Collect, pending: list[tuple[str, str]]) -> list[str]:
    with listener.cond:
        seen = set(listener.receipts)
    return [body for rid, body in pending if rid in seen]


# -- consuming ----------------------------------------------------------------------------------
# A Drain's heart-beats (ms): a consumer sends nothing else, and a node closes a connection
# that stays silent for connection_ttl (60s) even while it delivers to it; so a drain waiting
# out a long run under load was closed mid-run, and what came later never reached it.
# Every 5s: a node expects them every 10s (its heart-beat receive), dead after 20s.
DRAIN_HEARTBEAT = 5_000


class Drain:
    """A subscriber that records every message of a queue (auto ack); it heart-beats, so it
    outlives the node's connection TTL however long it waits."""

    def __init__(
        self,
        port: int,
        queue: str,
        *,
        selector: str | None = None,
        login: str = "guest",
        passcode: str = "guest",
    ) -> None:
        self.conn, self.listener = connect(
            port, login=login, passcode=passcode, heartbeats=(DRAIN_HEARTBEAT, 0)
        )
        headers = {"selector": selector} if selector else {}
        self.conn.subscribe(f"/queue/{queue}", id="drain", ack="auto", headers=headers)

    @property
    def messages(self) -> list[stomp.utils.Frame]:
        with self.listener.cond:
            return list(self.listener.messages)

    def bodies(self) -> list[str]:
        return [m.body for m in self.messages]

    def wait_for(self, n: int, timeout: float) -> list[str]:
        self.listener.wait(lambda: len(self.listener.messages) >= n, timeout)
        return self.bodies()

    def wait_all(self, bodies: Iterable[str], timeout: float) -> list[str]:
        """Wait until every one of ``bodies`` arrived (or the timeout); all bodies so far."""
        want = set(bodies)
        end = time.monotonic() + timeout
        seen = 0
        got: set[str] = set()
        while time.monotonic() < end:
            msgs = self.messages
            got.update(m.body for m in msgs[seen:])
            seen = len(msgs)
            if want <= got:
                break
            time.sleep(0.05)
        return self.bodies()

    def close(self) -> None:
        if self.conn.is_connected():
            self.conn.disconnect()


def collect(
    port: int,
    queue: str,
    expect: Iterable[str],
    timeout: float,
    settle: float = 0.5,
    login: str = "guest",
    passcode: str = "guest",
) -> list[str]:
    """Every body of ``queue``: waits until all of ``expect`` arrived, then ``settle`` more
    seconds to catch any extra copy."""
    d = Drain(port, queue, login=login, passcode=passcode)
    try:
        d.wait_all(expect, timeout)
        time.sleep(settle)
        return d.bodies()
    finally:
        d.close()


def dead_letters(
    port: int, reason: str, expect: int = 1, timeout: float = 15.0
) -> list[dict[str, str]]:
    """Headers (and ``body``) of ``expect`` messages dead-lettered at this node with ``reason``."""
    d = Drain(port, "DLQ", selector=f"_WS_DLQ_REASON = '{reason}'")
    try:
        d.wait_for(expect, timeout)
        return [dict(m.headers, body=m.body) for m in d.messages]
    finally:
        d.close()


def wait_log(node: NodeProcess, pattern: str, timeout: float, after: int = 0) -> re.Match[str]:
    """Wait until the node's log (from offset ``after``) matches ``pattern``."""
    rx = re.compile(pattern)
    end = time.monotonic() + timeout
    while True:
        m = rx.search(node.log(), after)
        if m is not None:
            return m
        if time.monotonic() > end:
            raise AssertionError(f"log of {node.name} has no {pattern!r} after {timeout}s")
        time.sleep(0.05)


def check_once_in_order(sent: list[str], confirmed: list[str], received: list[str]) -> None:
    """Exactly once and in order: every confirmed message arrived, nothing twice, nothing
    unknown, and the arrival order is the send order."""
    position = {b: i for i, b in enumerate(sent)}
    unknown = [b for b in received if b not in position]
    assert not unknown, f"{len(unknown)} unexpected messages, e.g. {unknown[:5]}"
    dups = len(received) - len(set(received))
    assert dups == 0, f"{dups} duplicates"
    missing = set(confirmed) - set(received)
    assert not missing, f"{len(missing)} confirmed messages lost, e.g. {sorted(missing)[:5]}"
    order = [position[b] for b in received]
    bad = [i for i in range(1, len(order)) if order[i] <= order[i - 1]]
    assert not bad, f"out of order at {len(bad)} places, first {received[bad[0] - 1 : bad[0] + 1]}"


class Repeater(threading.Thread):
    """Run ``action`` every ``period`` seconds in the background until stopped."""

    def __init__(self, period: float, action: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.period = period
        self.action = action
        self.count = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.period):
            self.action()
            self.count += 1

    def stop(self) -> int:
        self._halt.set()
        self.join(10)
        return self.count
