"""Users, roles and per-address permissions.

Permissions are granted per address pattern to lists of roles.  As in HornetQ, the most
specific matching pattern decides alone (no inheritance from less specific patterns).
Password checking is a callable handed in by the caller, so the engine does not care how
passwords are hashed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from waystation.core.address import matches, specificity


class Permission(StrEnum):
    SEND = "send"
    CONSUME = "consume"
    BROWSE = "browse"
    CREATE_DURABLE_QUEUE = "create_durable_queue"
    DELETE_DURABLE_QUEUE = "delete_durable_queue"
    CREATE_NON_DURABLE_QUEUE = "create_non_durable_queue"
    DELETE_NON_DURABLE_QUEUE = "delete_non_durable_queue"
    MANAGE = "manage"


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    roles: frozenset[str] = frozenset()


ANONYMOUS = Principal("anonymous")
# the node itself (bridges, the REST push and pull machinery acting for a checked user): every
# permission, and the node's own names (``sf.*``) allowed
SYSTEM = Principal("$node", frozenset({"$node"}))


class AuthenticationError(Exception):
    pass


class NotAuthorized(Exception):
    pass


@dataclass(slots=True)
class User:
    name: str
    check_password: Callable[[str], bool]
    roles: frozenset[str] = frozenset()
    certificate: str | None = None  # subject (RFC 4514 text) of a TLS client cert that is this user
    nodes: frozenset[str] | None = None  # node names this (routing) user may claim; None: any


@dataclass(slots=True)
class SecurityManager:
    """``enabled=False`` lets everybody in with every permission (the embedded default)."""

    enabled: bool = False
    users: dict[str, User] = field(default_factory=dict)
    permissions: dict[str, dict[Permission, frozenset[str]]] = field(default_factory=dict)
    allow_anonymous: bool = False
    anonymous_roles: frozenset[str] = frozenset()
    # successful checks, keyed by a digest of the password: slow hashes are not re-run on
    # every connect of the same client
    _verified: set[tuple[str, bytes]] = field(default_factory=set)

    def authenticate(self, login: str | None, passcode: str | None) -> Principal:
        if not self.enabled:
            return Principal(login or "anonymous")
        if not login:
            if self.allow_anonymous:
                return Principal(ANONYMOUS.name, self.anonymous_roles)
            raise AuthenticationError("login required")
        user = self.users.get(login)
        key = (login, hashlib.sha256((passcode or "").encode()).digest())
        if user is not None and key in self._verified:
            return Principal(user.name, user.roles)
        if user is None or not user.check_password(passcode or ""):
            raise AuthenticationError(f"bad credentials for user {login!r}")
        if len(self._verified) > 10000:
            self._verified.clear()
        self._verified.add(key)
        return Principal(user.name, user.roles)

    def by_certificate(self, subject: str) -> Principal:
        """The user a verified TLS client certificate with ``subject`` logs in as."""
        if not self.enabled:
            return Principal(subject)
        for user in self.users.values():
            if user.certificate is not None and user.certificate == subject:
                return Principal(user.name, user.roles)
        raise AuthenticationError(f"no user has the certificate {subject!r}")

    def may_claim(self, principal: Principal, node: str) -> bool:
        """Whether a link logged in as ``principal`` may state that it is node ``node``."""
        if not self.enabled or principal is SYSTEM:
            return True
        user = self.users.get(principal.name)
        return user is not None and (user.nodes is None or node in user.nodes)

    def may_take_traffic(self, principal: Principal, node: str) -> bool:
        """Whether a link logged in as ``principal`` may take what waits here for ``node``
        (a dialled-in link): only a user bound to that node by name, when security is on."""
        if not self.enabled or principal is SYSTEM:
            return True
        user = self.users.get(principal.name)
        return user is not None and user.nodes is not None and node in user.nodes

    def allowed(self, principal: Principal, permission: Permission, address: str) -> bool:
        if not self.enabled or principal is SYSTEM:
            return True
        best = max(
            (p for p in self.permissions if matches(p, address)), key=specificity, default=None
        )
        if best is None:
            return False
        roles = self.permissions[best].get(permission, frozenset())
        return bool(roles & principal.roles)

    def check(self, principal: Principal, permission: Permission, address: str) -> None:
        if not self.allowed(principal, permission, address):
            raise NotAuthorized(
                f"user {principal.name!r} may not {permission.value.replace('_', ' ')} on {address!r}"
            )
