"""Resource limits the core enforces for every protocol (issue: no client starves the rest).

Each has a safe default; a client that reaches one gets :class:`LimitExceeded`, whose text
names the limit so an adapter can pass it on as it is (STOMP ERROR, HTTP 429/503, AMQP
``amqp:resource-limit-exceeded``).
"""

from __future__ import annotations

from dataclasses import dataclass


class LimitExceeded(Exception):
    """A configured limit refused the request; ``limit`` is the setting's name."""

    def __init__(self, limit: str, message: str) -> None:
        super().__init__(f"{message} (limit {limit})")
        self.limit = limit


@dataclass(slots=True, frozen=True)
class Limits:
    max_sessions_per_user: int = 1000
    max_consumers_per_session: int = 1000
    max_window: int = 1000  # unsettled messages one consumer may hold (prefetch)
    max_credit: int = 10000  # link credit one consumer may be granted at once
    max_transactions_per_session: int = 100
    max_transaction_messages: int = 10000
    max_transaction_bytes: int = 64 * 1024 * 1024
    max_auto_created: int = 10000  # auto-created queues and addresses on the node
    max_state_bytes: int = 1024 * 1024  # one saved value of a client's state (MQTT session)
    max_retained: int = 100000  # retained messages on the node
    # per-user quotas beside the node-wide ones (applied with security on, where users exist)
    max_auto_created_per_user: int = 1000  # auto-created queues and addresses one user made
    max_state_bytes_per_user: int = 64 * 1024 * 1024  # saved client state one user holds
    max_saved_sessions_per_user: int = 1000  # client ids with saved state (MQTT sessions)
    max_unreleased_per_client: int = 1000  # QoS 2 packet ids received and not yet released


DEFAULT_LIMITS = Limits()

__all__ = ["DEFAULT_LIMITS", "LimitExceeded", "Limits"]
