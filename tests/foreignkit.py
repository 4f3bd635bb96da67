"""Start a real ActiveMQ Classic (Debian package, /usr/share/activemq) or RabbitMQ 3.10 (Debian
package, with its AMQP 1.0 plugin) for foreign-bridge tests.

The broker gets its own base folder (config, KahaDB data, tmp, console log) and a single STOMP
transport connector on a free loopback port; it is started and stopped by its process id.
"""

from __future__ import annotations

import contextlib
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


# -- RabbitMQ 3.10 with its AMQP 1.0 plugin --------------------------------------------------------
RABBITMQ_SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")
RABBITMQ_PLUGINS = Path("/usr/lib/rabbitmq/bin/rabbitmq-plugins")


def rabbitmq_available() -> bool:
    return RABBITMQ_SERVER.exists()


class RabbitMQ:
    """One RabbitMQ node (Debian's rabbitmq-server) with only ``rabbitmq_amqp1_0`` enabled, its
    own node name, folders, AMQP port and distribution port (../shared/bench/brokers.sh sets
    the same variables); ``start``/``stop`` may be repeated (the mnesia folder persists)."""

    def __init__(self, base: Path, port: int | None = None) -> None:
        self.base = base
        self.port = port or free_port()
        self.dist_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        for d in ("home", "mnesia", "log"):
            (base / d).mkdir(parents=True, exist_ok=True)
        (base / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.port}\n"
            "loopback_users = none\n"
            "log.console = false\n"
            "log.file.level = info\n"
        )
        env = dict(os.environ)
        env.update(
            HOME=str(base / "home"),
            RABBITMQ_NODENAME=f"wstest{self.port}@localhost",
            RABBITMQ_CONFIG_FILE=str(base / "rabbitmq.conf"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(base / "enabled_plugins"),
            RABBITMQ_MNESIA_BASE=str(base / "mnesia"),
            RABBITMQ_LOG_BASE=str(base / "log"),
            RABBITMQ_PID_FILE=str(base / "beam.pid"),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            ERL_EPMD_ADDRESS="127.0.0.1",
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
            RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
        )
        self.env = env

    def start(self, timeout: float = 90.0) -> float:
        """Launch and wait until the AMQP port accepts; returns the seconds that took."""
        if not rabbitmq_available():
            raise RuntimeError("rabbitmq-server is not installed; run scripts/test")
        b = self.base
        if not (b / "enabled_plugins").exists():
            subprocess.run(
                [str(RABBITMQ_PLUGINS), "enable", "--offline", "rabbitmq_amqp1_0"],
                env=self.env,
                cwd=b,
                check=True,
                capture_output=True,
            )
        with open(b / "console.log", "ab") as log:
            self.proc = subprocess.Popen(
                [str(RABBITMQ_SERVER)],
                env=self.env,
                cwd=b,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            return wait_port(self.port, timeout, proc=self.proc)
        except RuntimeError:
            raise RuntimeError(
                f"RabbitMQ exited with {self.proc.returncode}; see {b / 'console.log'}"
            ) from None
        except TimeoutError:
            self.stop()
            raise TimeoutError(f"RabbitMQ not listening after {timeout}s") from None

    def _beam_pid(self) -> int | None:
        try:
            return int((self.base / "beam.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def stop(self, grace: float = 60.0, *, kill: bool = False) -> None:
        """SIGTERM (the script stops the node cleanly), SIGKILL after ``grace`` seconds;
        ``kill``: SIGKILL the Erlang VM now."""
        p, self.proc = self.proc, None
        beam = self._beam_pid()
        if p is None or p.poll() is not None:
            return
        if kill and beam is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(beam, signal.SIGKILL)
        p.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)
        if beam is not None:  # the VM outlives a killed script: make sure it is gone
            with contextlib.suppress(ProcessLookupError):
                os.kill(beam, signal.SIGKILL)
            _wait_gone(beam)  # else its closing socket still accepts during the restart
        (self.base / "beam.pid").unlink(missing_ok=True)

    def restart(self, *, kill: bool = False) -> float:
        self.stop(kill=kill)
        return self.start()


def _wait_gone(pid: int, timeout: float = 20.0) -> None:
    import time as _time

    end = _time.monotonic() + timeout
    while _time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        except PermissionError:
            pass
        _time.sleep(0.05)


def _durable_option() -> type:
    from proton import Terminus
    from proton.reactor import LinkOption

    class DurableTerminus(LinkOption):
        """RabbitMQ 3.x declares the queue of ``/queue/<q>`` with the terminus's durability:
        the same as the bridges' (durable), else the declarations conflict."""

        def apply(self, link: object) -> None:
            t = link.target if link.is_sender else link.source  # type: ignore[attr-defined]
            t.durability = Terminus.DELIVERIES

    return DurableTerminus


def _DurableTerminus() -> object:  # noqa: N802 - reads like the class it makes
    return _durable_option()()


def amqp_send(port: int, address: str, bodies: list[str], properties: dict | None = None) -> None:
    """Send durable messages to ``address`` with python-qpid-proton's blocking client, each
    confirmed (``accepted``) before the call returns."""
    from proton import Message
    from proton.utils import BlockingConnection

    conn = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{port}", timeout=30)
    try:
        snd = conn.create_sender(address, options=[_DurableTerminus()])
        for b in bodies:
            snd.send(Message(body=b, durable=True, properties=dict(properties or {})))
    finally:
        conn.close()


def body_text(body: object) -> str:
    """An AMQP body as text: a data section (bytes) decoded, an amqp-value string as is."""
    return bytes(body).decode() if isinstance(body, (bytes, bytearray, memoryview)) else str(body)


def amqp_receive(port: int, address: str, expect: set[str], timeout: float) -> list[object]:
    """proton Messages from ``address`` until every body of ``expect`` arrived (accepting
    each), then whatever else arrives within a short settle time."""
    import time as _time

    from proton import Timeout
    from proton.utils import BlockingConnection

    conn = BlockingConnection(f"amqp://guest:guest@127.0.0.1:{port}", timeout=30)
    got: list[object] = []
    try:
        rcv = conn.create_receiver(address, credit=200, options=[_DurableTerminus()])
        end = _time.monotonic() + timeout
        seen: set[str] = set()
        while _time.monotonic() < end:
            wait = 0.5 if expect <= seen else max(0.1, end - _time.monotonic())
            try:
                m = rcv.receive(timeout=wait)
            except Timeout:
                if expect <= seen:
                    break
                continue
            rcv.accept()
            got.append(m)
            seen.add(body_text(m.body))
    finally:
        conn.close()
    return got
