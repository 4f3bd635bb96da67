"""Start real ``waystation run`` processes for integration tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Users for the security tests: "app" (role rw) may do anything anywhere; "reader" (ro) and
# "limited" (lim) get only what a test module's own [[permissions]] add for their roles.
SECURITY_USERS = """
[[users]]
name = "app"
password = "secret"
roles = ["rw"]

[[users]]
name = "reader"
password = "r"
roles = ["ro"]

[[users]]
name = "limited"
password = "l"
roles = ["lim"]

[[permissions]]
match = "#"
send = ["rw"]
consume = ["rw"]
browse = ["rw"]
create_durable_queue = ["rw"]
create_non_durable_queue = ["rw"]
delete_durable_queue = ["rw"]
delete_non_durable_queue = ["rw"]
"""

# An address whose sends block once 1 KiB is stored (for backpressure tests).
BLOCKING = """
[address_settings."blk.#"]
max_size_bytes = "1KiB"
full_policy = "BLOCK"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(
    port: int, timeout: float = 15.0, proc: subprocess.Popen[bytes] | None = None
) -> float:
    t0 = time.monotonic()
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return time.monotonic() - t0
        except OSError:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"node exited with {proc.returncode} before listening") from None
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"port {port} not accepting after {timeout}s") from None
            time.sleep(0.02)


class NodeProcess:
    """A node with its own data folder and STOMP port; restartable, killable."""

    def __init__(
        self,
        workdir: Path,
        extra_config: str = "",
        name: str = "test-node",
        log_level: str = "INFO",
        http: bool | str = False,
        stomp: str = "",
        stomp_scheme: str = "tcp",
        amqp: bool | str = False,
        mqtt: bool | str = False,
    ) -> None:
        """``http``: True opens the HTTP listener on ``http_port``; a string also adds its
        lines to the ``[acceptors.http]`` table.  ``stomp``: lines for ``[acceptors.stomp]``.
        ``amqp`` and ``mqtt`` likewise (``amqp_port``, ``mqtt_port``)."""
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.stomp_port = free_port()
        self.http_port = free_port() if http else 0
        http_table = ""
        if http:
            extra = http if isinstance(http, str) else ""
            http_table = f'[acceptors.http]\nurl = "http://127.0.0.1:{self.http_port}"\n{extra}\n'
        http_line = "" if http else "http = false"
        self.amqp_port = free_port() if amqp else 0
        self.mqtt_port = free_port() if mqtt else 0
        stream_tables = ""
        for proto, on, port in (("amqp", amqp, self.amqp_port), ("mqtt", mqtt, self.mqtt_port)):
            if on:
                extra = on if isinstance(on, str) else ""
                stream_tables += f'[acceptors.{proto}]\nurl = "tcp://127.0.0.1:{port}"\n{extra}\n'
            else:
                http_line += f"\n{proto} = false"
        stomp_table = (
            f'[acceptors.stomp]\nurl = "{stomp_scheme}://127.0.0.1:{self.stomp_port}"\n{stomp}\n'
        )

        self.name = name
        self.config_path = workdir / "node.toml"
        self.config_path.write_text(
            f"""
[node]
name = "{name}"
data_dir = "data"
log_level = "{log_level}"

[acceptors]
{http_line}
{stomp_table}
{http_table}
{stream_tables}
{extra_config}
"""
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "node.log"
        self.ready_seconds = 0.0

    def start(self) -> NodeProcess:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "waystation.gateway.cli", "run", str(self.config_path)],
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        log.close()
        try:
            self.ready_seconds = wait_port(self.stomp_port, proc=self.proc)
            for port in (self.http_port, self.amqp_port, self.mqtt_port):
                if port:
                    wait_port(port, proc=self.proc)
        except BaseException:
            self.kill9()  # a node that never listened is not left running
            raise
        return self

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def stop(self, timeout: float = 15) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def restart(self) -> NodeProcess:
        self.stop()
        return self.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class RawStomp:
    """A plain socket for sending malformed input and reading the raw reply."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def connect(self, version: str = "1.2", extra: str = "") -> bytes:
        self.send(
            f"CONNECT\naccept-version:{version}\nhost:localhost\n{extra}\n".encode() + b"\x00"
        )
        return self.read_frame()

    def read_frame(self) -> bytes:
        """One frame (up to and including NUL), skipping heart-beat EOLs."""
        buf = b""
        while True:
            chunk = self.sock.recv(1)
            if not chunk:
                return buf
            if not buf and chunk in (b"\n", b"\r"):
                continue
            buf += chunk
            if chunk == b"\x00":
                return buf

    def read_until_closed(self, limit: float = 5.0) -> bytes:
        self.sock.settimeout(limit)
        out = b""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return out
                out += chunk
        except TimeoutError as e:
            raise AssertionError(f"server did not close the connection; got {out!r}") from e

    def close(self) -> None:
        self.sock.close()


def header(frame: bytes, name: str) -> str | None:
    for line in frame.split(b"\n\n", 1)[0].split(b"\n")[1:]:
        k, _, v = line.partition(b":")
        if k.decode() == name:
            return v.decode()
    return None
