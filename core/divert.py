"""Diverts: move (exclusive) or copy (non-exclusive) matching messages to another address.

A divert may target ``node::address`` (store-and-forward to another site).  Loops are refused
when diverts are added, and a message that comes round to a divert it has already passed is
not diverted again (a second line of defence for loops made through wildcards).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from waystation.core.address import matches, split_remote
from waystation.core.filter import Filter
from waystation.core.message import DIVERT_PATH, Message

Transformer = Callable[[Message], Message]


class DivertError(ValueError):
    pass


def load_transformer(path: str) -> Transformer:
    """``pkg.mod:func`` or ``pkg.mod.func`` -> the callable."""
    mod_name, sep, attr = path.partition(":")
    if not sep:
        mod_name, _, attr = path.rpartition(".")
    if not mod_name or not attr:
        raise DivertError(
            f"transformer {path!r} is not a dotted path like 'package.module:function'"
        )
    try:
        fn = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise DivertError(f"transformer {path!r} cannot be loaded: {e}") from e
    if not callable(fn):
        raise DivertError(f"transformer {path!r} is not callable")
    return fn


@dataclass(slots=True)
class Divert:
    name: str
    address: str  # may be a wildcard pattern
    target: str
    exclusive: bool = False
    filter: Filter | None = None
    transformer: Transformer | None = None

    def applies(self, msg: Message) -> bool:
        path = msg.annotation(DIVERT_PATH)
        if isinstance(path, str) and self.name in path.split(","):
            return False
        return self.filter is None or self.filter.matches(msg)

    def divert(self, msg: Message, new_id: int) -> Message:
        """A copy for the target: same trace id, the divert added to its divert path."""
        copy = msg.copy(new_id, self.target)
        path = msg.annotation(DIVERT_PATH)
        copy.annotations[DIVERT_PATH] = (
            f"{path},{self.name}" if isinstance(path, str) and path else self.name
        )
        if self.transformer is not None:
            copy = self.transformer(copy)
        return copy


def find_loop(diverts: list[Divert]) -> list[Divert] | None:
    """A chain of diverts that leads back to where it started, or None."""

    def local(target: str) -> str | None:
        node, addr = split_remote(target)
        return None if node is not None else addr

    def next_hops(d: Divert) -> list[Divert]:
        tgt = local(d.target)
        if tgt is None:
            return []
        return [e for e in diverts if matches(e.address, tgt) or e.address == tgt]

    for start in diverts:
        stack: list[tuple[Divert, list[Divert]]] = [(start, [start])]
        while stack:
            d, chain = stack.pop()
            for nxt in next_hops(d):
                if nxt is start:
                    return chain
                if nxt not in chain and len(chain) < 64:
                    stack.append((nxt, [*chain, nxt]))
    return None
