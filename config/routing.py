"""Addresses and routing: ``[[queues]]``, ``[[topics]]``, ``[address_settings."pattern"]``,
``[[diverts]]``."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from waystation.config.fields import (
    AddressName,
    AddressPattern,
    DottedPath,
    Duration,
    DurationOrOff,
    FilterText,
    FullPolicyChoice,
    Name,
    Section,
    Size,
    SizeOrUnlimited,
    TargetAddress,
    address_name,
    choice,
)
from waystation.config.units import to_ms
from waystation.core.address import split_remote
from waystation.core.settings import AddressSettings


def _is_address(value: object) -> bool:
    try:
        address_name(value)
    except ValueError:
        return False
    return True


# --- [[queues]] and [[topics]] -----------------------------------------------------------------


class QueueConfig(Section):
    name: AddressName = Field(description="Queue name (concrete, no wildcards).")
    address: AddressName = Field(description="Address the queue is bound to; defaults to name.")
    routing: Annotated[Literal["anycast", "multicast"], choice("anycast", "multicast")] = Field(
        default="anycast",
        description="anycast (point-to-point) or multicast (a subscription on a topic address).",
    )
    durable: bool = Field(default=True, description="Survives restarts.")
    filter: FilterText = Field(
        default=None, description="Selector: only matching messages enter the queue."
    )
    max_consumers: int = Field(default=-1, ge=-1, description="-1 = unlimited.")
    exclusive: bool = Field(
        default=False, description="Deliver to one consumer at a time, failing over in order."
    )

    @model_validator(mode="before")
    @classmethod
    def _address_defaults_to_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "address" not in data:
            # A bad or missing name is reported once, at name; "_" only fills the gap.
            return {**data, "address": data["name"] if _is_address(data.get("name")) else "_"}
        return data


class SubscriptionConfig(Section):
    name: AddressName = Field(description="Subscription (queue) name, unique within the topic.")
    filter: FilterText = Field(default=None, description="Selector for this subscription.")
    durable: bool = Field(
        default=True, description="Keeps messages while no subscriber is connected."
    )


class TopicConfig(Section):
    name: AddressName = Field(description="Multicast address.")
    subscriptions: list[SubscriptionConfig] = Field(
        default_factory=list, description="Pre-declared subscriptions."
    )


# --- [address_settings."pattern"] ---------------------------------------------------------------


class AddressSettingsConfig(Section):
    """Unset keys inherit from less specific patterns, then the built-in defaults."""

    dead_letter_address: AddressName | None = Field(
        default=None, description="Where undeliverable messages go."
    )
    max_delivery_attempts: int | None = Field(
        default=None, ge=-1, description="Failed deliveries before dead-lettering; -1 = unlimited."
    )
    redelivery_delay: Duration | None = Field(
        default=None, description="Wait before redelivering a rejected message."
    )
    redelivery_multiplier: float | None = Field(
        default=None, ge=1.0, description="Backoff factor per failed delivery."
    )
    max_redelivery_delay: Duration | None = Field(
        default=None, description="Cap on the redelivery delay (0 = 10 x redelivery_delay)."
    )
    expiry_address: AddressName | None = Field(
        default=None, description="Where expired messages go (unset: dropped)."
    )
    expiry_delay: DurationOrOff | None = Field(
        default=None, description='Expiry given to messages sent without one; "off" or -1 = none.'
    )
    max_size_bytes: SizeOrUnlimited | None = Field(
        default=None, description="Memory limit per address; -1 = unlimited."
    )
    page_size_bytes: Size | None = Field(
        default=None, gt=0, description="Page file size when paging."
    )
    full_policy: FullPolicyChoice | None = Field(
        default=None, description="BLOCK, FAIL, DROP or PAGE when max_size_bytes is reached."
    )
    last_value_key: str | None = Field(
        default=None,
        min_length=1,
        description="Property whose value makes queues here last-value queues.",
    )
    default_consumer_window: int | None = Field(
        default=None, ge=-1, description="Messages in flight per consumer; -1 = unbounded."
    )
    send_to_dla_on_no_route: bool | None = Field(
        default=None, description="Unroutable messages go to the dead-letter address."
    )
    auto_create_queues: bool | None = Field(default=None, description="Create queues on first use.")
    auto_create_addresses: bool | None = Field(
        default=None, description="Create addresses on first use."
    )
    auto_delete_queues: bool | None = Field(
        default=None,
        description="Delete a queue a client's send or subscription auto-created once it has "
        "had no consumer and no message for auto_delete_queues_delay (default true).",
    )
    auto_delete_queues_delay: Duration | None = Field(
        default=None, description="How long such a queue stays unused before it goes (default 5s)."
    )
    auto_delete_addresses: bool | None = Field(
        default=None,
        description="Delete an address a client's send or subscription auto-created once it has "
        "had no queue, no retained message and no divert for auto_delete_addresses_delay "
        "(default true).",
    )
    auto_delete_addresses_delay: Duration | None = Field(
        default=None,
        description="How long such an address stays unused before it goes (default 5s).",
    )
    duplicate_cache_size: int | None = Field(
        default=None, ge=0, description="Duplicate ids remembered per address."
    )

    def to_engine(self) -> AddressSettings:
        """The engine's settings (durations in ms, "off" as -1)."""

        def ms(value: timedelta | None) -> int | None:
            return None if value is None else to_ms(value)

        expiry = self.expiry_delay
        return AddressSettings(
            dead_letter_address=self.dead_letter_address,
            max_delivery_attempts=self.max_delivery_attempts,
            redelivery_delay_ms=ms(self.redelivery_delay),
            redelivery_multiplier=self.redelivery_multiplier,
            max_redelivery_delay_ms=ms(self.max_redelivery_delay),
            expiry_address=self.expiry_address,
            expiry_delay_ms=-1 if expiry == "off" else ms(expiry),
            max_size_bytes=self.max_size_bytes,
            page_size_bytes=self.page_size_bytes,
            full_policy=self.full_policy,
            last_value_key=self.last_value_key,
            default_consumer_window=self.default_consumer_window,
            send_to_dla_on_no_route=self.send_to_dla_on_no_route,
            auto_create_queues=self.auto_create_queues,
            auto_create_addresses=self.auto_create_addresses,
            auto_delete_queues=self.auto_delete_queues,
            auto_delete_queues_delay_ms=ms(self.auto_delete_queues_delay),
            auto_delete_addresses=self.auto_delete_addresses,
            auto_delete_addresses_delay_ms=ms(self.auto_delete_addresses_delay),
            duplicate_cache_size=self.duplicate_cache_size,
        )


# --- [[diverts]] -------------------------------------------------------------------------------


class DivertConfig(Section):
    name: Name = Field(description="Unique divert name.")
    address: AddressPattern = Field(description="Source address or pattern watched.")
    target: TargetAddress = Field(
        description="Local address, or 'node::address' (store-and-forward)."
    )
    filter: FilterText = Field(default=None, description="Only matching messages are diverted.")
    exclusive: bool = Field(
        default=False, description="true moves the message; false sends a copy."
    )
    transformer: DottedPath | None = Field(
        default=None, description="'pkg.module:function' applied to each diverted message."
    )

    @property
    def remote_node(self) -> str | None:
        return split_remote(self.target)[0]
