"""A Waystation node: the engine built from config (gateway/core_config.py), its protocol
listeners and bridges, and reloading its config file while it runs.

What a node does not use yet it does not load: the HTTP port answers its probes before the
web application exists (gateway/http/ops/front.py), the bridge machinery (which pulls in
the HTTP client) is imported when the first bridge is configured or added, and the event
log and feed when configured."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from waystation.core.authentication import Authenticator, authenticator, install_authenticator
from waystation.core.divert import DivertError
from waystation.core.engine import Engine
from waystation.core.store.api import Journal
from waystation.core.store.journal import LEAVE_ON_DISK_OVER, FileJournal
from waystation.gateway.adapters import ADAPTERS
from waystation.gateway.admission import login_policy
from waystation.gateway.core_config import engine_config, security_manager
from waystation.gateway.http.ops.front import FrontContext, HttpFront
from waystation.gateway.reload import reload as reload_config
from waystation.gateway.stomp import stomp_options
from waystation.gateway.stream import ListenerLimits, StreamServer

if TYPE_CHECKING:
    from waystation.bridges.manager import BridgeManager
    from waystation.config.schema import Config
    from waystation.core.event_feed import EventFeed
    from waystation.core.events import EventSink
    from waystation.gateway.adapter import ProtocolAdapter, SessionOpener
    from waystation.gateway.http.context import HttpContext

log = logging.getLogger("waystation.node")


class NodeError(Exception):
    """The config is valid but asks for something this node cannot do."""


def server_tls(tls: Any) -> ssl.SSLContext | None:
    """An SSL context for a listener's ``tls`` table (None when the table is absent)."""
    if tls is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(tls.cert), str(tls.key))
    if tls.ca is not None:
        ctx.load_verify_locations(str(tls.ca))
        ctx.verify_mode = ssl.CERT_REQUIRED if tls.require_client_cert else ssl.CERT_OPTIONAL
    return ctx


def listener_label(protocol: str, index: int) -> str:
    """``stomp`` for a protocol's main listener, ``stomp.1``... for its extras."""
    return protocol if index == 0 else f"{protocol}.{index}"


def opener(adapter: ProtocolAdapter, engine: Engine, acceptor: Any) -> SessionOpener:
    """How a listener of ``adapter`` opens a session for a new connection."""
    return lambda link: adapter.new_session(engine, link, acceptor)


def _bridge_manager(engine: Engine, configs: list[Any]) -> BridgeManager:
    from waystation.bridges.manager import BridgeManager

    return BridgeManager(engine, configs)


class Node:
    def __init__(self, cfg: Config, config_path: str | None = None) -> None:
        self.cfg = cfg
        self.config_path = config_path  # what a reload reads (None: the embedded defaults)
        ecfg = engine_config(cfg)
        journal: Journal | None = None
        bindings: Journal | None = None
        if cfg.node.persistence:
            j = cfg.node.journal
            journal = FileJournal(
                Path(cfg.node.data_dir) / "journal",
                file_size=j.file_size,
                min_files=j.min_files,
                sync=j.sync,
                compact_min_files=j.compact_min_files,
                compact_percentage=j.compact_percentage,
                leave_on_disk_over=LEAVE_ON_DISK_OVER,
            )
            # queue definitions live long: their own small journal keeps them from pinning
            # message journal files
            bindings = FileJournal(
                Path(cfg.node.data_dir) / "bindings", file_size=1 << 20, sync=j.sync
            )
        events: EventSink | None = None
        ev = cfg.node.event_log
        if ev.enabled:  # the event log and feed are loaded only when configured
            from waystation.core.eventlog import EventLog, EventLogError

            try:
                events = EventLog(
                    cfg.node.event_log_dir,
                    cfg.node.name,
                    format=ev.format,
                    max_file_size=ev.max_file_size,
                    max_files=ev.max_files,
                    roll_interval=ev.roll_interval.total_seconds(),
                    buffer_limit=ev.buffer_limit,
                )
            except EventLogError as e:
                raise NodeError(f"node.event_log: {e}") from None
        self.event_feed: EventFeed | None = None
        if ev.publish_address:  # live events; the files stay as configured
            from waystation.core.event_feed import EventFeed

            events = self.event_feed = EventFeed(ev.publish_address, cfg.node.name, events)
        self.engine = Engine(
            ecfg, journal, events=events, security=security_manager(cfg), bindings=bindings
        )
        install_authenticator(
            self.engine,
            Authenticator(self.engine.security, login_policy(cfg.security.login)),
        )
        self._bridges: BridgeManager | None = None
        if cfg.bridges:
            try:
                self._bridges = _bridge_manager(self.engine, cfg.bridges)
            except DivertError as e:  # a transformer that cannot be loaded
                raise NodeError(f"bridges: {e}") from None
        self.servers: list[Any] = []
        self.labels: list[str] = []  # each server's name in ports(): "stomp", "stomp.1"...
        self.accepting = False  # started and not stopping: GET /ready
        self.stopped = asyncio.Event()

    async def start(self) -> None:
        t0 = time.monotonic()
        await self.engine.start()
        if self.event_feed is not None:
            self.event_feed.attach(self.engine)
        for adapter in ADAPTERS.values():
            if adapter.on_start is not None:
                adapter.on_start(self.engine)
        acc = self.cfg.acceptors
        engine = self.engine
        sessions = {name: opener(a, engine, getattr(acc, name)) for name, a in ADAPTERS.items()}
        for name, adapter in ADAPTERS.items():
            acceptor = getattr(acc, name)
            if not acceptor.enabled:
                continue
            for i, (ep, tls) in enumerate(acceptor.listeners()):
                server = StreamServer(
                    name,
                    sessions[name],
                    ep.host,
                    ep.port,
                    server_tls(tls),
                    ListenerLimits.of(acceptor),
                    adapter.refusal,
                )
                await server.start()
                self.servers.append(server)
                self.labels.append(listener_label(name, i))
        if acc.http.enabled:

            def http_context() -> HttpContext:
                from waystation.gateway.http.context import HttpContext

                return HttpContext(
                    engine,
                    acc.http,
                    stomp_options(acc.stomp),
                    engine.config.data_dir,
                    sessions,
                    ADAPTERS,
                    ready=lambda: self.accepting,
                    bridges=self.bridge_status,
                    reload=self.reload,
                    bridge_control=self.bridges,
                )

            front = FrontContext(
                engine, acc.http, engine.config.data_dir, lambda: self.accepting, http_context
            )
            (ep, tls), *extra = acc.http.listeners()
            http = HttpFront(front, ep.host, ep.port, server_tls(tls))
            await http.start()
            self.servers.append(http)
            self.labels.append("http")
            for i, (ep, tls) in enumerate(extra, 1):  # one app (REST state, pushes), more ports
                self.servers.append(await http.add_site(ep.host, ep.port, server_tls(tls)))
                self.labels.append(listener_label("http", i))
        for name in ("amqp", "mqtt"):
            if name not in ADAPTERS and getattr(acc, name).enabled:
                log.info("%s listener is not available in this version; skipped", name)
        if self._bridges is not None:
            await self._bridges.start()
        self.accepting = True
        log.info("node %s ready in %.0f ms", self.cfg.node.name, (time.monotonic() - t0) * 1000)

    async def reload(self) -> list[str]:
        """Re-read the config file and apply what changed (raises ReloadRefused)."""
        changes = await reload_config(self, self.config_path)
        for c in changes:
            log.info("reload: %s", c)
        if not changes:
            log.info("reload: nothing changed")
        return changes

    def ports(self) -> dict[str, int]:
        """Bound ports by listener: ``stomp``, ``http``..., extras as ``stomp.1``..."""
        return {label: s.bound_port() for label, s in zip(self.labels, self.servers, strict=True)}

    @property
    def bridges(self) -> BridgeManager:
        """The node's bridges (the manager is made on first use when none is configured)."""
        if self._bridges is None:
            self._bridges = _bridge_manager(self.engine, [])
        return self._bridges

    def bridge_status(self) -> list[dict[str, object]]:
        """Each bridge's link state and counters (see ``CoreBridge.status``)."""
        return self._bridges.status() if self._bridges is not None else []

    async def stop(self) -> None:
        """Stop the bridges and accepting, close connections, finish in-flight writes, close
        the store."""
        self.accepting = False
        if self._bridges is not None:
            await self._bridges.stop()
        for s in self.servers:
            await s.stop()
        await self.engine.stop()
        authenticator(self.engine).close()
        self.stopped.set()


__all__ = ["Node", "NodeError"]
