"""What a protocol keeps for a client between its connections (MQTT's persistent session:
its subscriptions, the QoS 2 packet ids it is in the middle of).

A value is saved per (scope, key), the scope being ``"<protocol>/<client id>"``, in the
bindings journal (long-lived, small) and comes back after a restart.  Values are msgpack
data; one value is bounded so a client cannot grow the node's state without limit.

A key ending in ``/`` names a *group*: ``load`` of ``"qos2_in/"`` answers every key under it
(``{"17": ..., "18": ...}``) and ``drop`` drops them all.  A protocol that keeps a set that
grows one item at a time keeps one key per item, so saving one more writes one small record
instead of the whole set again (the cost of a write does not grow with what is stored).

With security on a scope belongs to the user who first saved into it (the reserved key
``$owner``, saved with it): another user may not read, change or drop it, and each user's
scopes and their bytes are counted for the per-user quotas.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from waystation.core.limits import LimitExceeded, Limits
from waystation.core.security import NotAuthorized

OWNER = "$owner"  # reserved key: the user a scope belongs to


class _Scope:
    __slots__ = ("values", "owner", "size")

    def __init__(self) -> None:
        self.values: dict[str, tuple[int, Any, int]] = {}  # key -> (rid, value, record bytes)
        self.owner: str | None = None
        self.size = 0  # bytes of its records, the owner's included


class ClientStates:
    def __init__(self) -> None:
        self._scopes: dict[str, _Scope] = {}
        self._bytes: Counter[str] = Counter()  # user -> bytes of the scopes it owns
        self._owned: Counter[str] = Counter()  # user -> scopes it owns
        self._n = 0

    def __len__(self) -> int:
        return self._n

    # -- reading ---------------------------------------------------------------------------
    def get(self, scope: str, key: str) -> Any:
        """The value of ``key``, or for a group key (``"x/"``) a dict of its members by the
        rest of their key (None if nothing)."""
        s = self._scopes.get(scope)
        if s is None:
            return None
        if key.endswith("/"):
            n = len(key)
            group = {k[n:]: v[1] for k, v in s.values.items() if k.startswith(key)}
            return group or None
        found = s.values.get(key)
        return None if found is None else found[1]

    def owner(self, scope: str) -> str | None:
        s = self._scopes.get(scope)
        return None if s is None else s.owner

    def size(self, scope: str, key: str) -> int:
        """Bytes of the record holding ``key`` (0: none)."""
        s = self._scopes.get(scope)
        found = s.values.get(key) if s is not None else None
        return 0 if found is None else found[2]

    def usage(self, user: str) -> tuple[int, int]:
        """(scopes, bytes) the user owns."""
        return self._owned[user], self._bytes[user]

    def only_owner(self, scope: str) -> bool:
        """Whether the scope holds nothing but its owner record (it can go)."""
        s = self._scopes.get(scope)
        return s is not None and len(s.values) == 1 and OWNER in s.values

    def scopes(self, prefix: str = "") -> set[str]:
        """Scopes holding something (``prefix``: e.g. ``"mqtt/"``)."""
        return {k for k in self._scopes if k.startswith(prefix)}

    # -- who may: ownership and the per-user quotas ----------------------------------------------
    def check_access(self, scope: str, user: str | None) -> None:
        """Refuse ``user`` a scope another user owns (``user`` None: not checked)."""
        if user is None:
            return
        s = self._scopes.get(scope)
        if s is not None and s.owner is not None and s.owner != user:
            raise NotAuthorized(f"the saved state of {scope!r} belongs to another user")

    def admit(self, scope: str, key: str, size: int, user: str, limits: Limits) -> bool:
        """Check that ``user`` may save ``size`` bytes under ``key``: its scope, and its
        quotas (``max_saved_sessions_per_user``, ``max_state_bytes_per_user``; a save that
        does not grow what the user holds always may).  Whether the scope is new to the
        user, who must then be recorded as its owner."""
        self.check_access(scope, user)
        s = self._scopes.get(scope)
        claim = s is None or s.owner is None
        scopes, used = self.usage(user)
        if claim and scopes >= limits.max_saved_sessions_per_user:
            raise LimitExceeded(
                "max_saved_sessions_per_user",
                f"user {user!r} already holds {scopes} saved client sessions",
            )
        grow = size - self.size(scope, key) + (s.size if claim and s is not None else 0)
        if grow > 0 and used + grow > limits.max_state_bytes_per_user:
            raise LimitExceeded(
                "max_state_bytes_per_user",
                f"user {user!r} holds {used} bytes of saved client state; "
                f"{grow} more is over {limits.max_state_bytes_per_user}",
            )
        return claim

    # -- changing --------------------------------------------------------------------------
    def put(self, scope: str, key: str, value: Any, rid: int, size: int = 0) -> int:
        """Keep ``value`` (its record ``size`` bytes); the record id of the value it replaces
        (0 for none).  The ``$owner`` key sets the scope's owner."""
        s = self._scopes.get(scope)
        if s is None:
            s = self._scopes[scope] = _Scope()
        old = s.values.get(key)
        s.values[key] = (rid, value, size)
        delta = size - (old[2] if old else 0)
        if old is None:
            self._n += 1
        s.size += delta
        if s.owner is not None:
            self._bytes[s.owner] += delta
        if key == OWNER:
            self._set_owner(s, str(value))
        return old[0] if old else 0

    def drop(self, scope: str, key: str) -> list[int]:
        """Forget ``key`` (a group key: all its members); the record ids to delete."""
        s = self._scopes.get(scope)
        if s is None:
            return []
        keys = [k for k in s.values if k.startswith(key)] if key.endswith("/") else [key]
        rids = []
        for k in keys:
            old = s.values.pop(k, None)
            if old is None:
                continue
            self._n -= 1
            rids.append(old[0])
            s.size -= old[2]
            if s.owner is not None:
                self._bytes[s.owner] -= old[2]
            if k == OWNER:
                self._set_owner(s, None)
        if not s.values:
            del self._scopes[scope]
        return rids

    def _set_owner(self, s: _Scope, user: str | None) -> None:
        """Move the scope's bytes and count to ``user``'s quota (from its owner's)."""
        if s.owner == user:
            return
        if s.owner is not None:
            self._owned[s.owner] -= 1
            self._bytes[s.owner] -= s.size
            if self._owned[s.owner] <= 0:
                del self._owned[s.owner]
                self._bytes.pop(s.owner, None)
        s.owner = user
        if user is not None:
            self._owned[user] += 1
            self._bytes[user] += s.size


__all__ = ["OWNER", "ClientStates"]
