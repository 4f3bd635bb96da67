"""The core's objects from the validated config: the only place that does this, so ``core/``
never sees the config package (the node builds its engine with it, a reload its changes)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from waystation.core.engine import DivertSpec, EngineConfig, QueueSpec
from waystation.core.queue import MULTICAST
from waystation.core.security import Permission, SecurityManager, User

if TYPE_CHECKING:
    from waystation.config.schema import Config


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
        routes={r.node: r.via for r in cfg.routes},
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


__all__ = ["engine_config", "security_manager"]
