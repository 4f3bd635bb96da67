"""``[[users]]``, ``[[permissions]]`` and ``[security]``.

Permissions do not merge: for an address, only the most specific matching ``match`` pattern
applies, and a permission it leaves out is denied there (HornetQ semantics).
"""

from __future__ import annotations

import hmac

from pydantic import Field, model_validator

from waystation.config.errors import Problems
from waystation.config.fields import AddressPattern, Duration, Name, PasswordHashText, Section
from waystation.config.passwords import verify_password
from waystation.config.units import duration

PERMISSIONS = (
    "send",
    "consume",
    "browse",
    "create_durable_queue",
    "delete_durable_queue",
    "create_non_durable_queue",
    "delete_non_durable_queue",
    "manage",
)


class UserConfig(Section):
    name: Name = Field(description="Login name, unique.")
    password: str | None = Field(
        default=None,
        min_length=1,
        description="Plain-text password: allowed, but prefer password_hash.",
    )
    password_hash: PasswordHashText | None = Field(
        default=None,
        description="pbkdf2_sha256$iterations$salt_b64$hash_b64 (python -m waystation.config.passwords).",
    )
    roles: list[Name] = Field(default_factory=list, description="Roles granted to this user.")
    certificate: str | None = Field(
        default=None,
        min_length=1,
        description="Subject of a TLS client certificate that logs in as this user (AMQP "
        "SASL EXTERNAL, MQTT over TLS), as RFC 4514 text, most specific first: "
        "'CN=device-1,O=Acme,C=DE'. The listener's tls table must verify it (ca).",
    )

    nodes: list[Name] | None = Field(
        default=None,
        description="A routing user: the node names a bridge logged in as this user may claim "
        "to be (the ws-node header); a claim of any other name is refused. Unset: any.",
    )

    @model_validator(mode="after")
    def _one_password(self) -> UserConfig:
        both = self.password is not None and self.password_hash is not None
        if both or (self.password is None and self.password_hash is None and not self.certificate):
            raise Problems(
                [((), "give exactly one of password or password_hash (or a certificate)")]
            )
        return self

    def check_password(self, candidate: str) -> bool:
        """Constant-time check of ``candidate`` against the configured password or hash."""
        if self.password_hash is not None:
            return verify_password(candidate, self.password_hash)
        if self.password is None:  # a certificate-only user has no password to guess
            return False
        return hmac.compare_digest(candidate.encode(), self.password.encode())


class PermissionConfig(Section):
    match: AddressPattern = Field(
        description="Address pattern these grants apply to (most specific wins)."
    )
    send: list[Name] = Field(default_factory=list, description="Roles that may send.")
    consume: list[Name] = Field(default_factory=list, description="Roles that may consume.")
    browse: list[Name] = Field(default_factory=list, description="Roles that may browse.")
    create_durable_queue: list[Name] = Field(
        default_factory=list, description="Roles that may create durable queues."
    )
    delete_durable_queue: list[Name] = Field(
        default_factory=list, description="Roles that may delete durable queues."
    )
    create_non_durable_queue: list[Name] = Field(
        default_factory=list, description="Roles that may create non-durable and temporary queues."
    )
    delete_non_durable_queue: list[Name] = Field(
        default_factory=list, description="Roles that may delete non-durable and temporary queues."
    )
    manage: list[Name] = Field(default_factory=list, description="Roles that may use management.")

    def roles(self, permission: str) -> list[str]:
        """Roles granted ``permission`` (one of PERMISSIONS)."""
        if permission not in PERMISSIONS:
            raise KeyError(permission)
        roles: list[str] = getattr(self, permission)
        return roles

    def grants(self) -> dict[str, list[str]]:
        return {p: self.roles(p) for p in PERMISSIONS}


class LoginConfig(Section):
    """``[security.login]``: how failed logins are throttled (see docs/security.md)."""

    free_failures: int = Field(
        default=5,
        ge=1,
        description="Failed logins for one login from one source address before that pair is delayed (other logins from that address are not).",
    )
    free_failures_per_user: int = Field(
        default=10, ge=1, description="Failed logins for one login name before delays start."
    )
    base_delay: Duration = Field(
        default=duration("1s"), description="Lock after the first counted failure; doubles."
    )
    max_delay: Duration = Field(default=duration("60s"), description="Longest lock.")
    forget_after: Duration = Field(
        default=duration("15m"), description="A source or name with no failure for this "
        "long starts afresh.",
    )  # fmt: skip
    max_entries: int = Field(
        default=10000, ge=100, description="Sources (and names) remembered, oldest dropped."
    )
    workers: int = Field(default=2, ge=1, description="Threads running password hashes.")
    max_pending: int = Field(
        default=64, ge=1, description="Checks waiting for a thread; more are refused at once."
    )
    refusal_delay: Duration = Field(
        default=duration("1s"), description="A throttled attempt is answered after this."
    )


class SecurityConfig(Section):
    enabled: bool = Field(
        default=False,
        description="Check logins and permissions. Default: true when any [[users]] are declared.",
    )
    allow_anonymous: bool = Field(
        default=False, description="Accept connections without credentials."
    )
    anonymous_roles: list[Name] = Field(
        default_factory=list, description="Roles of anonymous connections."
    )
    login: LoginConfig = Field(
        default_factory=LoginConfig, description="Throttling of failed logins."
    )


__all__ = ["PERMISSIONS", "LoginConfig", "PermissionConfig", "SecurityConfig", "UserConfig"]
