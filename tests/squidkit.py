"""A real squid (Debian package) on loopback for proxy tests, run in the foreground.

By default it behaves like a strict corporate proxy: plain HTTP requests pass, ``CONNECT``
and WebSocket upgrades are denied (403), nothing is cached.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from nodekit import free_port, wait_port

SQUID = "/usr/sbin/squid"
NCSA_AUTH = "/usr/lib/squid/basic_ncsa_auth"


def ensure_squid() -> str:
    """The squid binary, installing the Debian package when it is missing."""
    if not Path(SQUID).exists():
        subprocess.run(
            ["apt-get", "install", "-y", "squid"],
            check=True,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive", "RUNLEVEL": "1"},  # no service
            capture_output=True,
        )
    return SQUID


class Squid:
    def __init__(
        self,
        workdir: Path | None = None,
        *,
        deny_connect: bool = True,
        deny_upgrade: bool = True,
        idle_timeout: int = 60,
        auth: tuple[str, str] | None = None,
    ) -> None:
        """``auth`` = (user, password): every request must carry Proxy-Authorization
        (Basic), checked by squid's own basic_ncsa_auth helper; 407 otherwise."""
        # squid writes its logs as the proxy user, who cannot enter pytest's tmp_path (only
        # root can): by default it gets a folder of its own under /tmp
        self._own_dir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="squid-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.workdir, 0o777)  # squid drops to the proxy user for its logs
        self.port = free_port()
        rules = []
        if deny_connect:
            rules.append("http_access deny CONNECT")
        if deny_upgrade:
            rules += ["acl upgrade req_header Upgrade .", "http_access deny upgrade"]
        if auth is not None:
            hashed = subprocess.run(
                ["openssl", "passwd", "-1", auth[1]], check=True, capture_output=True, text=True
            ).stdout.strip()
            passwd = self.workdir / "passwd"
            passwd.write_text(f"{auth[0]}:{hashed}\n")
            passwd.chmod(0o644)
            rules += [
                f"auth_param basic program {NCSA_AUTH} {passwd}",
                "auth_param basic realm waystation-tests",
                "acl authed proxy_auth REQUIRED",
                "http_access deny !authed",
            ]
        self.conf = self.workdir / "squid.conf"
        self.conf.write_text(
            "\n".join(
                [
                    f"http_port 127.0.0.1:{self.port}",
                    "acl CONNECT method CONNECT",
                    *rules,
                    "acl local src 127.0.0.0/8",
                    "http_access allow local",
                    "http_access deny all",
                    "cache deny all",
                    "cache_mem 8 MB",
                    f"pid_filename {self.workdir}/squid.pid",
                    f"access_log stdio:{self.workdir}/access.log",
                    f"cache_log {self.workdir}/cache.log",
                    "cache_store_log none",
                    f"coredump_dir {self.workdir}",
                    "shutdown_lifetime 0 seconds",
                    f"read_timeout {idle_timeout} seconds",
                    f"client_lifetime {idle_timeout * 10} seconds",
                    "forwarded_for delete",
                    "via off",
                    "",
                ]
            )
        )
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Squid:
        ensure_squid()
        out = open(self.workdir / "squid.out", "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(
            [SQUID, "-N", "-f", str(self.conf)], stdout=out, stderr=subprocess.STDOUT
        )
        out.close()
        try:
            wait_port(self.port, timeout=30, proc=self.proc)
        except RuntimeError as e:
            raise RuntimeError(f"{e}\n{self.log()}") from None
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def close(self) -> None:
        """Stop, and remove the folder when squidkit made it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Squid:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def restart(self, down_for: float = 0.0) -> None:
        """Stop (dropping every connection through it), wait, start on the same port."""
        self.stop()
        time.sleep(down_for)
        self.start()

    def access_log(self) -> str:
        p = self.workdir / "access.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def access_log_with(self, *fragments: str, timeout: float = 10.0) -> str:
        """The access log once every fragment is in it (squid logs a transaction when it
        ends, which can be a moment after the client saw the answer), or as it is then."""
        end = time.monotonic() + timeout
        log = self.access_log()
        while not all(f in log for f in fragments) and time.monotonic() < end:
            time.sleep(0.05)
            log = self.access_log()
        return log

    def log(self) -> str:
        parts = []
        for name in ("squid.out", "cache.log"):
            p = self.workdir / name
            if p.exists():
                parts.append(p.read_text(errors="replace")[-3000:])
        return "\n".join(parts)


__all__ = ["Squid", "ensure_squid"]
