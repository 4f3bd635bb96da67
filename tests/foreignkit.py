"""Start a real ActiveMQ Classic (Debian package, /usr/share/activemq) for foreign-bridge tests.

The broker gets its own base folder (config, KahaDB data, tmp, console log) and a single STOMP
transport connector on a free loopback port; it is started and stopped by its process id.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from nodekit import free_port, wait_port

ACTIVEMQ_HOME = Path("/usr/share/activemq")

_XML = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" useJmx="false" brokerName="wstest"
          dataDirectory="{base}/data" schedulerSupport="false" advisorySupport="false">
    <persistenceAdapter><kahaDB directory="{base}/data/kahadb"/></persistenceAdapter>
    <systemUsage><systemUsage>
      <storeUsage><storeUsage limit="1 gb"/></storeUsage>
      <tempUsage><tempUsage limit="1 gb"/></tempUsage>
    </systemUsage></systemUsage>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:{port}?maximumConnections=100"/>
    </transportConnectors>
  </broker>
</beans>
"""

# the JVM options of Debian's /usr/bin/activemq (see ../shared/bench/brokers.sh)
_JVM = [
    "-Xms128M",
    "-Xmx256M",
    "-Dorg.apache.activemq.UseDedicatedTaskRunner=false",
    "--add-reads=java.xml=java.logging",
    "--add-opens=java.base/java.security=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.naming/javax.naming.spi=ALL-UNNAMED",
    "--add-opens=java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
]


def available() -> bool:
    return (ACTIVEMQ_HOME / "bin" / "activemq.jar").exists()


class ActiveMQ:
    """One broker process; ``start``/``stop`` may be repeated (the data folder persists)."""

    def __init__(self, base: Path, port: int | None = None) -> None:
        self.base = base
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        for d in ("conf", "data", "tmp"):
            (base / d).mkdir(parents=True, exist_ok=True)
        (base / "conf" / "activemq.xml").write_text(_XML.format(base=base, port=self.port))

    def start(self, timeout: float = 60.0) -> float:
        """Launch and wait until the STOMP port accepts; returns the seconds that took."""
        if not available():
            raise RuntimeError(f"ActiveMQ is not installed ({ACTIVEMQ_HOME}); run scripts/test")
        b = self.base
        cmd = [
            "java",
            *_JVM,
            f"-Djava.io.tmpdir={b / 'tmp'}",
            f"-Dactivemq.classpath={b / 'conf'}",
            f"-Dactivemq.home={ACTIVEMQ_HOME}",
            f"-Dactivemq.base={b}",
            f"-Dactivemq.conf={b / 'conf'}",
            f"-Dactivemq.data={b / 'data'}",
            "-jar",
            str(ACTIVEMQ_HOME / "bin" / "activemq.jar"),
            "start",
            f"xbean:file:{b / 'conf' / 'activemq.xml'}",
        ]
        with open(b / "console.log", "ab") as log:
            self.proc = subprocess.Popen(
                cmd, cwd=b, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        try:
            return wait_port(self.port, timeout, proc=self.proc)
        except RuntimeError:
            raise RuntimeError(
                f"ActiveMQ exited with {self.proc.returncode}; see {b / 'console.log'}"
            ) from None
        except TimeoutError:
            self.stop()
            raise TimeoutError(f"ActiveMQ not listening after {timeout}s") from None

    def stop(self, grace: float = 20.0, *, kill: bool = False) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after ``grace`` seconds; ``kill``: SIGKILL now."""
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)

    def restart(self, *, kill: bool = False) -> float:
        """Stop (``kill``: ``kill -9``) and start again on the same port and data."""
        self.stop(kill=kill)
        return self.start()
