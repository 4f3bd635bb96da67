"""A Waystation node: the engine built from config, and its protocol listeners.

This is the only place that turns the validated config into core objects, so ``core/``
never sees the config package.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from waystation.bridges.manager import BridgeManager
from waystation.core.authentication import Authenticator, authenticator, install_authenticator
from waystation.core.divert import DivertError
from waystation.core.engine import DivertSpec, Engine, EngineConfig, QueueSpec
from waystation.core.eventlog import EventLog, EventLogError
from waystation.core.events import EventSink
from waystation.core.queue import MULTICAST
from waystation.core.security import Permission, SecurityManager, User
from waystation.core.store.api import Journal
from waystation.core.store.journal import FileJournal
from waystation.gateway.adapters import ADAPTERS
from waystation.gateway.admission import login_policy
from waystation.gateway.http.server import HttpContext, HttpServer
from waystation.gateway.stomp import stomp_options
from waystation.gateway.stream import ListenerLimits, StreamServer

if TYPE_CHECKING:
    from waystation.config.schema import Config
    from waystation.gateway.adapter import ProtocolAdapter, SessionOpener

log = logging.getLogger("waystation.node")


class NodeError(Exception):
    """The config is valid but asks for something this node cannot do."""


def engine_config(cfg: Config) -> EngineConfig:
    queues = [
        QueueSpec(q.name, q.address, q.routing, q.durable, q.filter, q.exclusive, q.max_consumers)
        for q in cfg.queues
    ]
    topics: list[str] = []
    for t in cfg.topics:
        topics.append(t.name)
        for s in t.subscriptions:
            queues.append(QueueSpec(s.name, t.name, MULTICAST, s.durable, s.filter))
    remote = {b.remote_node for b in cfg.bridges}
    return EngineConfig(
        node_name=cfg.node.name,
        data_dir=Path(cfg.node.data_dir) if cfg.node.persistence else None,
        address_settings=cfg.engine_address_settings(),
        queues=queues,
        topics=topics,
        diverts=[
            DivertSpec(d.name, d.address, d.target, d.filter, d.exclusive, d.transformer)
            for d in cfg.diverts
        ],
        remote_nodes=remote,
        wildcard_routing=cfg.node.wildcard_routing,
        expiry_scan_period=cfg.node.message_expiry_scan_period.total_seconds(),
        duplicate_cache_size=cfg.node.id_cache_size,
        limits=cfg.limits.engine_limits(),
    )


def security_manager(cfg: Config) -> SecurityManager:
    sec = cfg.security
    users = {
        u.name: User(
            u.name,
            u.check_password,
            frozenset(u.roles),
            u.certificate,
            None if u.nodes is None else frozenset(u.nodes),
        )
        for u in cfg.users
    }
    perms: dict[str, dict[Permission, frozenset[str]]] = {}
    for p in cfg.permissions:
        perms[p.match] = {Permission(k): frozenset(v) for k, v in p.grants().items()}
    return SecurityManager(
        enabled=sec.enabled,
        users=users,
        permissions=perms,
        allow_anonymous=sec.allow_anonymous,
        anonymous_roles=frozenset(sec.anonymous_roles),
    )


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


def opener(adapter: ProtocolAdapter, engine: Engine, acceptor: Any) -> SessionOpener:
    """How a listener of ``adapter`` opens a session for a new connection."""
    return lambda link: adapter.new_session(engine, link, acceptor)


class Node:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
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
            )
            # queue definitions live long: their own small journal keeps them from pinning
            # message journal files
            bindings = FileJournal(
                Path(cfg.node.data_dir) / "bindings", file_size=1 << 20, sync=j.sync
            )
        events: EventSink | None = None
        ev = cfg.node.event_log
        if ev.enabled:
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
        self.engine = Engine(
            ecfg, journal, events=events, security=security_manager(cfg), bindings=bindings
        )
        install_authenticator(
            self.engine,
            Authenticator(self.engine.security, login_policy(cfg.security.login)),
        )
        try:
            self.bridges = BridgeManager(self.engine, cfg.bridges)
        except DivertError as e:  # a transformer that cannot be loaded
            raise NodeError(f"bridges: {e}") from None
        self.servers: list[Any] = []
        self.accepting = False  # started and not stopping: GET /ready
        self.stopped = asyncio.Event()

    async def start(self) -> None:
        t0 = time.monotonic()
        await self.engine.start()
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
            ep = acceptor.endpoint
            server = StreamServer(
                name,
                sessions[name],
                ep.host,
                ep.port,
                server_tls(acceptor.tls),
                ListenerLimits.of(acceptor),
                adapter.refusal,
            )
            await server.start()
            self.servers.append(server)
        if acc.http.enabled:
            ep = acc.http.endpoint
            ctx = HttpContext(
                engine,
                acc.http,
                stomp_options(acc.stomp),
                engine.config.data_dir,
                sessions,
                ADAPTERS,
                ready=lambda: self.accepting,
                bridges=self.bridge_status,
            )
            http = HttpServer(ctx, ep.host, ep.port, server_tls(acc.http.tls))
            await http.start()
            self.servers.append(http)
        for name in ("amqp", "mqtt"):
            if name not in ADAPTERS and getattr(acc, name).enabled:
                log.info("%s listener is not available in this version; skipped", name)
        await self.bridges.start()
        self.accepting = True
        log.info("node %s ready in %.0f ms", self.cfg.node.name, (time.monotonic() - t0) * 1000)

    def ports(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.servers:
            out["http" if isinstance(s, HttpServer) else s.name] = s.bound_port()
        return out

    def bridge_status(self) -> list[dict[str, object]]:
        """Each bridge's link state and counters (see ``CoreBridge.status``)."""
        return self.bridges.status()

    async def stop(self) -> None:
        """Stop the bridges and accepting, close connections, finish in-flight writes, close
        the store."""
        self.accepting = False
        await self.bridges.stop()
        for s in self.servers:
            await s.stop()
        await self.engine.stop()
        authenticator(self.engine).close()
        self.stopped.set()


__all__ = ["Node", "NodeError", "engine_config", "security_manager"]
