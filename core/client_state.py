"""What a protocol keeps for a client between its connections (MQTT's persistent session:
its subscriptions, the QoS 2 packet ids it is in the middle of).

A value is saved per (scope, key), the scope being ``"<protocol>/<client id>"``, in the
bindings journal (long-lived, small) and comes back after a restart.  Values are msgpack
data; one value is bounded so a client cannot grow the node's state without limit.
"""

from __future__ import annotations

from typing import Any


class ClientStates:
    def __init__(self) -> None:
        self._values: dict[tuple[str, str], tuple[int, Any]] = {}  # (scope, key) -> (rid, value)

    def __len__(self) -> int:
        return len(self._values)

    def get(self, scope: str, key: str) -> Any:
        found = self._values.get((scope, key))
        return None if found is None else found[1]

    def put(self, scope: str, key: str, value: Any, rid: int) -> int:
        """Keep ``value``; the record id of the value it replaces (0 for none)."""
        old = self._values.get((scope, key))
        self._values[(scope, key)] = (rid, value)
        return old[0] if old else 0

    def drop(self, scope: str, key: str) -> int:
        old = self._values.pop((scope, key), None)
        return old[0] if old else 0

    def scopes(self, prefix: str = "") -> set[str]:
        """Scopes holding something (``prefix``: e.g. ``"mqtt/"``)."""
        return {s for s, _ in self._values if s.startswith(prefix)}


__all__ = ["ClientStates"]
