"""Address settings: per-pattern knobs merged field by field from the most specific match.

Every field is optional on a pattern; ``resolve`` walks the matching patterns from the most
specific to the least and takes the first value set for each field, then falls back to the
built-in defaults.  Results are cached per concrete address.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum

from waystation.core.address import matches, specificity

MAX_CACHED = 16384  # resolved addresses kept; queues keep their own, so a clear costs little


class FullPolicy(StrEnum):
    BLOCK = "BLOCK"
    FAIL = "FAIL"
    DROP = "DROP"
    PAGE = "PAGE"


@dataclass(frozen=True, slots=True)
class AddressSettings:
    dead_letter_address: str | None = None
    max_delivery_attempts: int | None = None  # -1 = unlimited
    redelivery_delay_ms: int | None = None
    redelivery_multiplier: float | None = None
    max_redelivery_delay_ms: int | None = None
    expiry_address: str | None = None
    expiry_delay_ms: int | None = None  # applied to messages sent without an expiration; -1 = none
    max_size_bytes: int | None = None  # -1 = unlimited
    page_size_bytes: int | None = None
    full_policy: FullPolicy | None = None
    last_value_key: str | None = None
    default_consumer_window: int | None = None  # messages in flight per consumer
    send_to_dla_on_no_route: bool | None = None
    auto_create_queues: bool | None = None
    auto_create_addresses: bool | None = None
    auto_delete_queues: bool | None = None
    auto_delete_queues_delay_ms: int | None = None  # unused (no consumer, empty) this long
    auto_delete_addresses: bool | None = None
    auto_delete_addresses_delay_ms: int | None = None  # unused (no queue, no retained) this long
    duplicate_cache_size: int | None = None

    def merged_over(self, other: AddressSettings) -> AddressSettings:
        """Fields set here win; unset fields come from ``other``."""
        values = {}
        for f in fields(self):
            mine = getattr(self, f.name)
            values[f.name] = mine if mine is not None else getattr(other, f.name)
        return AddressSettings(**values)


DEFAULTS = AddressSettings(
    dead_letter_address=None,
    max_delivery_attempts=10,
    redelivery_delay_ms=0,
    redelivery_multiplier=1.0,
    max_redelivery_delay_ms=0,  # 0 = 10 x redelivery delay
    expiry_address=None,
    expiry_delay_ms=-1,
    max_size_bytes=64 * 1024 * 1024,  # per address in memory; PAGE beyond keeps memory bounded
    page_size_bytes=10 * 1024 * 1024,
    full_policy=FullPolicy.PAGE,
    last_value_key=None,
    default_consumer_window=1000,
    send_to_dla_on_no_route=False,
    auto_create_queues=True,
    auto_create_addresses=True,
    auto_delete_queues=True,
    auto_delete_queues_delay_ms=5000,
    auto_delete_addresses=True,
    auto_delete_addresses_delay_ms=5000,
    duplicate_cache_size=20000,
)


@dataclass(frozen=True, slots=True)
class Resolved:
    """Fully resolved settings for one address (no field is None except optional names)."""

    dead_letter_address: str | None
    max_delivery_attempts: int
    redelivery_delay_ms: int
    redelivery_multiplier: float
    max_redelivery_delay_ms: int
    expiry_address: str | None
    expiry_delay_ms: int
    max_size_bytes: int
    page_size_bytes: int
    full_policy: FullPolicy
    last_value_key: str | None
    default_consumer_window: int
    send_to_dla_on_no_route: bool
    auto_create_queues: bool
    auto_create_addresses: bool
    auto_delete_queues: bool
    auto_delete_queues_delay_ms: int
    auto_delete_addresses: bool
    auto_delete_addresses_delay_ms: int
    duplicate_cache_size: int

    def redelivery_delay(self, delivery_count: int) -> float:
        """Seconds to wait before redelivering after the ``delivery_count``-th failed delivery."""
        base = self.redelivery_delay_ms
        if base <= 0:
            return 0.0
        delay = base * (self.redelivery_multiplier ** max(0, delivery_count - 1))
        cap = self.max_redelivery_delay_ms or base * 10
        return min(delay, cap) / 1000.0


class SettingsRepository:
    """Pattern -> AddressSettings, resolved per address with caching."""

    def __init__(
        self,
        patterns: dict[str, AddressSettings] | None = None,
        defaults: AddressSettings = DEFAULTS,
    ) -> None:
        """``defaults``: what applies where no pattern says (DEFAULTS, or the node's own)."""
        self._patterns: dict[str, AddressSettings] = dict(patterns or {})
        self._defaults = defaults
        self._cache: dict[str, Resolved] = {}
        self._refresh_flags()

    def replace(self, patterns: dict[str, AddressSettings]) -> None:
        """Every pattern at once (a config reload)."""
        self._patterns = dict(patterns)
        self._cache.clear()
        self._refresh_flags()

    def set(self, pattern: str, settings: AddressSettings) -> None:
        self._patterns[pattern] = settings
        self._cache.clear()
        self._refresh_flags()

    def has_size_limits(self) -> bool:
        """Whether some address may be over a limit with BLOCK, FAIL or DROP (when none can,
        those checks are skipped on the hot path; PAGE is the queues' own business)."""
        return self._limits

    def has_expiry_delays(self) -> bool:
        """Whether any pattern gives messages a default expiry."""
        return self._expiry_delays

    def _refresh_flags(self) -> None:
        pats = [*self._patterns.values(), self._defaults]
        # conservative: settings merge across patterns, so each field is looked at on its own
        limited = any(p.max_size_bytes is not None and p.max_size_bytes >= 0 for p in pats)
        strict = any(
            p.full_policy is not None and p.full_policy is not FullPolicy.PAGE for p in pats
        )
        self._limits = limited and strict
        self._expiry_delays = any(
            p.expiry_delay_ms is not None and p.expiry_delay_ms > 0 for p in pats
        )

    def patterns(self) -> dict[str, AddressSettings]:
        return dict(self._patterns)

    def resolve(self, address: str) -> Resolved:
        hit = self._cache.get(address)
        if hit is not None:
            return hit
        matching = [p for p in self._patterns if matches(p, address)]
        matching.sort(key=specificity, reverse=True)
        merged = AddressSettings()
        for p in matching:
            merged = merged.merged_over(self._patterns[p])
        merged = merged.merged_over(self._defaults)
        values = {f.name: getattr(merged, f.name) for f in fields(merged)}
        resolved = Resolved(**values)
        if len(self._cache) >= MAX_CACHED:  # addresses come and go (auto-create, auto-delete)
            self._cache.clear()
        self._cache[address] = resolved
        return resolved


__all__ = ["AddressSettings", "FullPolicy", "Resolved", "SettingsRepository", "DEFAULTS"]
