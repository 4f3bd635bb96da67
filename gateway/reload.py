"""A config reload (SIGHUP, the admin API): what changed in the file is applied to the
running node without dropping a client; an invalid file is refused and the running config
kept.

Applied live: users, roles and permissions (new logins and checks use them; a connection
keeps the roles it logged in with), address settings (every queue takes them up), queues
and topics added, diverts added, removed or changed, bridges added, removed or changed
(a changed bridge is stopped and started again; what it had not forwarded waits in its
store-and-forward queue), routes (messages sent from then on take them), the ``[logging]``
table and ``node.log_level``.  Not applied, logged as needing a restart: listeners, the rest
of the node table, limits and the event log.  Queues removed from the file are kept (they
may hold messages): delete them with the admin API.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from waystation.config import ConfigError, load_config
from waystation.core.authentication import Authenticator, install_authenticator
from waystation.core.divert import DivertError
from waystation.core.engine import QueueSpec
from waystation.core.queue import MULTICAST
from waystation.gateway import logs
from waystation.gateway.admission import login_policy
from waystation.gateway.core_config import engine_config, security_manager

if TYPE_CHECKING:
    from waystation.config.schema import Config
    from waystation.gateway.node import Node

log = logging.getLogger("waystation.reload")

RESTART_ONLY = ("node", "acceptors", "limits")


class ReloadRefused(Exception):
    """The new file is invalid or cannot be applied: nothing changed."""


async def reload(node: Node, path: str | None) -> list[str]:
    """Apply the file at ``path`` (the node's own file when None); what changed, in words."""
    try:
        new = load_config(path)
    except ConfigError as e:
        raise ReloadRefused(f"invalid configuration, running config kept:\n{e}") from None
    old: Config = node.cfg
    engine = node.engine
    done: list[str] = []
    # diverts first checked as a whole (a loop or a bad transformer refuses the reload)
    old_diverts = {d.name: d for d in old.diverts}
    new_diverts = {d.name: d for d in new.diverts}
    if (old.users, old.permissions, old.security) != (new.users, new.permissions, new.security):
        engine.security = security_manager(new)
        install_authenticator(
            engine, Authenticator(engine.security, login_policy(new.security.login))
        )
        done.append(f"security: {len(new.users)} users, {len(new.permissions)} permission rules")
    if (old.logging, old.node.log_level) != (new.logging, new.node.log_level):
        logs.configure(new)  # first: what follows is logged the new way
        done.append(logs.describe(new))
    if old.address_settings != new.address_settings:
        engine.replace_address_settings(new.engine_address_settings())
        done.append("address settings replaced")
    ecfg = engine_config(new)
    for qspec in ecfg.queues:
        if engine.queue(qspec.name) is None:
            _create(node, qspec)
            done.append(f"queue {qspec.name!r} created")
    for topic in ecfg.topics:
        if topic not in engine.post.addresses:
            engine.post.ensure_address(topic, MULTICAST)
            done.append(f"topic {topic!r} created")
    for name in old_diverts.keys() - new_diverts.keys():
        engine.remove_divert(name)
        done.append(f"divert {name!r} removed")
    for spec in ecfg.diverts:
        if old_diverts.get(spec.name) == new_diverts[spec.name]:
            continue
        engine.remove_divert(spec.name)
        try:
            engine.add_divert(spec)
        except DivertError as e:
            done.append(f"divert {spec.name!r} NOT applied: {e}")
            continue
        done.append(f"divert {spec.name!r} {'changed' if spec.name in old_diverts else 'added'}")
    old_bridges = {b.name: b for b in old.bridges}
    new_bridges = {b.name: b for b in new.bridges}
    for name, b in old_bridges.items():
        if new_bridges.get(name) != b:
            await node.bridges.remove(name)
            if name not in new_bridges:
                done.append(f"bridge {name!r} removed")
    for name, b in new_bridges.items():
        if old_bridges.get(name) != b:
            await node.bridges.add(b)
            done.append(f"bridge {name!r} {'restarted' if name in old_bridges else 'added'}")
    if old.routes != new.routes:  # after the bridges: a new route may lead through a new one
        engine.post.routes = dict(ecfg.routes)
        done.append(f"routes replaced ({len(new.routes)} in the file)")
    for key in RESTART_ONLY:
        if getattr(old, key) != getattr(new, key):
            done.append(f"[{key}] changed: applies at the next restart")
    gone = {q.name for q in old.queues} - {q.name for q in new.queues}
    for name in sorted(gone):
        done.append(f"queue {name!r} no longer in the file: kept (delete it with the admin API)")
    node.cfg = new
    return done


def _create(node: Node, spec: QueueSpec) -> None:
    node.engine.create_queue(
        spec.name,
        spec.address or spec.name,
        routing=spec.routing,
        durable=spec.durable,
        filter=spec.filter,
        exclusive=spec.exclusive,
        max_consumers=spec.max_consumers,
    )


__all__ = ["ReloadRefused", "reload"]
