"""The ``[limits]`` table: what one client may hold in the core, for every protocol.

Listener-level limits (connections, time to CONNECT, frame sizes) live with each acceptor;
these are the engine's own (see ``core.limits`` and docs/security.md).
"""

from __future__ import annotations

from pydantic import Field

from waystation.config.fields import Section, Size
from waystation.config.units import size
from waystation.core.limits import DEFAULT_LIMITS, Limits

_D = DEFAULT_LIMITS


class LimitsConfig(Section):
    max_sessions_per_user: int = Field(
        default=_D.max_sessions_per_user,
        ge=-1,
        description="Open connections (sessions) one user may have, over every protocol; -1 unlimited.  Applies with security on.",
    )
    max_consumers_per_session: int = Field(
        default=_D.max_consumers_per_session, ge=1, description="Consumers one connection may hold."
    )
    max_window: int = Field(
        default=_D.max_window,
        ge=1,
        description="Most unsettled messages one consumer may hold (STOMP prefetch-count, MQTT receive maximum); larger or unbounded requests are lowered to it.",
    )
    max_credit: int = Field(
        default=_D.max_credit, ge=1, description="Most link credit one consumer may be granted."
    )
    max_transactions_per_session: int = Field(
        default=_D.max_transactions_per_session,
        ge=1,
        description="Open transactions one connection may have.",
    )
    max_transaction_messages: int = Field(
        default=_D.max_transaction_messages,
        ge=1,
        description="Messages one open transaction may hold before commit.",
    )
    max_transaction_size: Size = Field(
        default=size("64MiB"), description="Bytes one open transaction may hold before commit."
    )
    max_auto_created: int = Field(
        default=_D.max_auto_created,
        ge=0,
        description="Auto-created queues and addresses on the node; past it, sends and subscriptions that would create one are refused.",
    )

    max_state_size: Size = Field(
        default=size("1MiB"),
        description="Largest value a protocol saves for one client between connections (an "
        "MQTT persistent session's subscriptions, its QoS 2 packet ids).",
    )
    max_retained: int = Field(
        default=_D.max_retained,
        ge=0,
        description="Retained messages on the node (one per address at most); past it, a "
        "retained send to an address without one is refused.",
    )

    max_auto_created_per_user: int = Field(
        default=_D.max_auto_created_per_user,
        ge=0,
        description="Auto-created queues and addresses one user's sends and subscriptions may "
        "hold at once (security on); past it, that user's sends and subscriptions that would "
        "create one are refused, other users unaffected.",
    )
    max_state_size_per_user: Size = Field(
        default=size("64MiB"),
        description="Bytes of saved client state (MQTT persistent sessions) one user may hold "
        "over all its client ids (security on).",
    )
    max_saved_sessions_per_user: int = Field(
        default=_D.max_saved_sessions_per_user,
        ge=1,
        description="Client ids with a saved session (MQTT clean-session 0 / session expiry) one "
        "user may hold (security on).",
    )
    max_unreleased_per_client: int = Field(
        default=_D.max_unreleased_per_client,
        ge=1,
        le=65535,
        description="MQTT QoS 2 packet ids one client may have received and not yet released "
        "(PUBREL); past it the connection is closed (MQTT 5: reason 0x93, and it is the "
        "advertised Receive Maximum).",
    )

    def engine_limits(self) -> Limits:
        return Limits(
            max_sessions_per_user=self.max_sessions_per_user,
            max_consumers_per_session=self.max_consumers_per_session,
            max_window=self.max_window,
            max_credit=self.max_credit,
            max_transactions_per_session=self.max_transactions_per_session,
            max_transaction_messages=self.max_transaction_messages,
            max_transaction_bytes=self.max_transaction_size,
            max_auto_created=self.max_auto_created,
            max_state_bytes=self.max_state_size,
            max_retained=self.max_retained,
            max_auto_created_per_user=self.max_auto_created_per_user,
            max_state_bytes_per_user=self.max_state_size_per_user,
            max_saved_sessions_per_user=self.max_saved_sessions_per_user,
            max_unreleased_per_client=self.max_unreleased_per_client,
        )
