"""Checks across tables: unique names, divert loops, role references, bridge sources.

``problems`` returns errors (the config is refused); ``warnings`` returns advice.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from waystation.config import defaults
from waystation.config.errors import Loc, describe, format_loc
from waystation.config.fields import Endpoint
from waystation.config.routing import QueueConfig
from waystation.config.security import PERMISSIONS
from waystation.core.address import matches, split_remote

if TYPE_CHECKING:
    from waystation.config.routing import DivertConfig
    from waystation.config.schema import Config

Problem = tuple[Loc, str]


def implicit_queues(config: Config) -> list[QueueConfig]:
    """Queues for dead-letter and expiry addresses that nothing declared (e.g. DLQ, ExpiryQueue)."""
    bound = {q.address for q in config.queues} | {t.name for t in config.topics}
    wanted: list[str] = []
    for settings in config.address_settings.values():
        for address in (settings.dead_letter_address, settings.expiry_address):
            if address is not None and address not in bound and address not in wanted:
                wanted.append(address)
    return [QueueConfig.model_validate({"name": a}) for a in wanted]


def _duplicates(items: Iterable[str], where: str, key: str) -> list[Problem]:
    first: dict[str, int] = {}
    out: list[Problem] = []
    for i, value in enumerate(items):
        if value in first:
            out.append(
                (
                    (where, i, key),
                    f"duplicate {key} {value!r} (first used at {format_loc((where, first[value]))})",
                )
            )
        else:
            first[value] = i
    return out


def _local_address(target: str, node_name: str) -> str:
    """Where a divert target lands locally: the address, or the store-and-forward queue."""
    node, address = split_remote(target)
    if node is None or node == node_name:
        return address
    return defaults.sf_queue(node)


def divert_loops(diverts: Sequence[DivertConfig], node_name: str) -> list[Problem]:
    """Cycles in the graph divert -> diverts whose source pattern matches its target."""
    targets = [_local_address(d.target, node_name) for d in diverts]
    edges = [[j for j, e in enumerate(diverts) if matches(e.address, t)] for t in targets]
    state = [0] * len(diverts)  # 0 new, 1 on the current path, 2 done
    cycles: list[list[int]] = []

    def visit(i: int, path: list[int]) -> None:
        state[i] = 1
        path.append(i)
        for j in edges[i]:
            if state[j] == 1:
                cycles.append(path[path.index(j) :])
            elif state[j] == 0:
                visit(j, path)
        path.pop()
        state[i] = 2

    for i in range(len(diverts)):
        if state[i] == 0:
            visit(i, [])
    out: list[Problem] = []
    for cycle in cycles:
        shown = [
            d.target if t == d.target else f"{d.target} (queue {t})"
            for d, t in zip(diverts, targets, strict=True)
        ]
        chain = " -> ".join([diverts[cycle[0]].address] + [shown[i] for i in cycle])
        names = ", ".join(diverts[i].name for i in cycle)
        noun = "diverts" if len(cycle) > 1 else "divert"
        out.append((("diverts", cycle[0], "target"), f"divert loop: {chain} via {noun} {names}"))
    return out


def _roles(config: Config) -> list[Problem]:
    known = {r for u in config.users for r in u.roles} | set(config.security.anonymous_roles)
    listing = ", ".join(sorted(known)) or "none"
    out: list[Problem] = []
    for i, grant in enumerate(config.permissions):
        for permission in PERMISSIONS:
            for k, role in enumerate(grant.roles(permission)):
                if role not in known:
                    out.append(
                        (
                            ("permissions", i, permission, k),
                            f"unknown role {role!r}: no user has it (known roles: {listing})",
                        )
                    )
    if config.security.enabled and not config.users and not config.security.allow_anonymous:
        out.append(
            (
                ("security", "enabled"),
                "security is on but there are no [[users]] and allow_anonymous is false",
            )
        )
    return out


def _bridges(config: Config) -> list[Problem]:
    queues = {q.name for q in config.queues} | {
        s.name for t in config.topics for s in t.subscriptions
    }
    out: list[Problem] = []
    drained: dict[str, int] = {}  # queue -> the first Waystation bridge draining it
    for i, bridge in enumerate(config.bridges):
        if not bridge.foreign:
            first = drained.setdefault(bridge.queue, i)
            if first != i and "accept" in (bridge.direction, config.bridges[first].direction):
                out.append(
                    (
                        ("bridges", i, "queue"),
                        f"[[bridges]][{first}] already drains {bridge.queue!r}: a node that "
                        'dials in ("accept") is served by one bridge, the only one on its queue',
                    )
                )
        if bridge.receive_as is not None and bridge.receive_as not in {
            u.name for u in config.users
        }:
            out.append(
                (
                    ("bridges", i, "receive_as"),
                    f"no [[users]] entry named {bridge.receive_as!r}",
                )
            )
        if bridge.remote_node == config.node.name:
            out.append(
                (("bridges", i, "remote_node"), f"{bridge.remote_node!r} is this node's own name")
            )
        if bridge.queue not in queues and not bridge.queue.startswith(defaults.SF_QUEUE_PREFIX):
            out.append(
                (
                    ("bridges", i, "queue"),
                    f"queue {bridge.queue!r} is not declared in [[queues]] "
                    f"(only store-and-forward queues '{defaults.SF_QUEUE_PREFIX}<node>' exist implicitly)",
                )
            )
    return out


def problems(config: Config) -> list[Problem]:
    """Everything that makes ``config`` unusable, each at its key path."""
    out = _duplicates((q.name for q in config.queues), "queues", "name")
    out += _duplicates((t.name for t in config.topics), "topics", "name")
    for i, topic in enumerate(config.topics):
        out += [
            (("topics", i) + loc, msg)
            for loc, msg in _duplicates(
                (s.name for s in topic.subscriptions), "subscriptions", "name"
            )
        ]
    out += _duplicates((d.name for d in config.diverts), "diverts", "name")
    out += _duplicates((b.name for b in config.bridges), "bridges", "name")
    out += _duplicates((u.name for u in config.users), "users", "name")
    out += _duplicates((p.match for p in config.permissions), "permissions", "match")
    out += divert_loops(config.diverts, config.node.name)
    out += _roles(config)
    out += _bridges(config)
    return out


def warnings(config: Config) -> list[str]:
    """Advice for the operator, formatted like errors."""
    out: list[Problem] = []
    for i, user in enumerate(config.users):
        if user.password is not None:
            out.append(
                (
                    ("users", i, "password"),
                    "plain-text password; prefer password_hash (python -m waystation.config.passwords)",
                )
            )
    if not config.security.enabled:
        for name, acceptor in config.acceptors.enabled().items():
            endpoint: Endpoint = acceptor.endpoint
            if not endpoint.is_loopback:
                out.append(
                    (("acceptors", name), f"listens on {endpoint.host} with security disabled")
                )
    bridged = {b.remote_node for b in config.bridges} | {r.node for r in config.routes}
    for i, divert in enumerate(config.diverts):
        node = divert.remote_node
        if node is not None and node != config.node.name and node not in bridged:
            out.append(
                (
                    ("diverts", i, "target"),
                    f"no [[bridges]] entry for node {node!r}: messages will wait in "
                    f"{defaults.sf_queue(node)!r}",
                )
            )
    return [describe(loc, msg, config.source or "<config>") for loc, msg in out]
