"""The message: what producers send, queues hold and consumers receive.

A message is immutable once routed except for its annotations (set by diverts, dead-lettering
and bridges before it is stored).  Delivery counts live on the queue's reference, not here,
because one multicast message sits in many queues.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import msgpack

PropertyValue = bool | int | float | str | bytes | None

# Well-known property names (the engine's reserved vocabulary).
DUPLICATE_ID = "_WS_DUPL_ID"
ORIGINAL_ADDRESS = "_WS_ORIG_ADDRESS"
ORIGINAL_QUEUE = "_WS_ORIG_QUEUE"
DEAD_LETTER_REASON = "_WS_DLQ_REASON"
DEAD_LETTER_DETAIL = "_WS_DLQ_DETAIL"
ACTUAL_EXPIRY = "_WS_ACTUAL_EXPIRY"
GROUP_ID = "_WS_GROUP_ID"
ROUTE_TO_NODE = "_WS_ROUTE_TO_NODE"
DIVERT_PATH = "_WS_DIVERT_PATH"

DEFAULT_PRIORITY = 4


def property_text(v: PropertyValue) -> str:
    """A property value as text, for protocols whose headers are strings."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def now_ms() -> int:
    return int(time.time() * 1000)


class IdGenerator:
    """Unique, increasing 64-bit ids that stay above every id seen before a restart."""

    def __init__(self, floor: int = 0) -> None:
        start = max(floor + 1, now_ms() << 16)
        self._counter = itertools.count(start)

    def raise_floor(self, floor: int) -> None:
        nxt = next(self._counter)
        self._counter = itertools.count(max(nxt, floor + 1))

    def __call__(self) -> int:
        return next(self._counter)


@dataclass(slots=True, eq=False)
class Message:
    id: int
    address: str
    body: bytes = b""
    properties: dict[str, PropertyValue] = field(default_factory=dict)
    durable: bool = False
    priority: int = DEFAULT_PRIORITY
    timestamp: int = 0
    expiration: int = 0  # absolute ms since the epoch; 0 = never
    scheduled: int = 0  # absolute ms since the epoch before which it is not delivered; 0 = now
    _size: int = field(default=0, repr=False, compare=False)

    def size(self) -> int:
        """Approximate memory size, used for address size limits.  Computed once, so memory
        accounting stays consistent even if properties change later."""
        n = self._size
        if n:
            return n
        n = 64 + len(self.body) + len(self.address)
        for k, v in self.properties.items():
            n += len(k) + (len(v) if isinstance(v, (str, bytes)) else 8)
        self._size = n
        return n

    def expired(self, at_ms: int | None = None) -> bool:
        return (
            self.expiration != 0 and (at_ms if at_ms is not None else now_ms()) >= self.expiration
        )

    def copy(self, new_id: int, address: str | None = None) -> Message:
        return Message(
            new_id,
            self.address if address is None else address,
            self.body,
            dict(self.properties),
            self.durable,
            self.priority,
            self.timestamp,
            self.expiration,
            self.scheduled,
        )

    def duplicate_id(self) -> str | bytes | None:
        props = self.properties
        if not props:
            return None
        get = props.get
        v = get(DUPLICATE_ID)
        if v is None:
            v = get("_HQ_DUPL_ID")
            if v is None:
                v = get("_AMQ_DUPL_ID")
                if v is None:
                    return None
        return v if isinstance(v, (str, bytes)) else str(v)

    # -- persistence -------------------------------------------------------------------
    def encode(self) -> bytes:
        return _pack(
            (
                self.id,
                self.address,
                self.body,
                self.properties,
                self.durable,
                self.priority,
                self.timestamp,
                self.expiration,
                self.scheduled,
            )
        )

    @staticmethod
    def decode(data: bytes) -> Message:
        t = msgpack.unpackb(data, raw=False, strict_map_key=False)
        return Message(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8])


_packer = msgpack.Packer(use_bin_type=True)
_pack = _packer.pack
