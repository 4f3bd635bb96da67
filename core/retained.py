"""Retained messages: the last message kept per address and handed to each new subscriber.

MQTT's retain flag is the model: one message per address, replaced by the next retained send,
cleared by a retained send with an empty body [MQTT-3.3.1-10/11], given to a subscription
when it is made.  A durable message is kept in the bindings journal (it lives as long as it
is not replaced, so it must not pin message journal files); a non-durable one in memory only.
An expired message is dropped when it is next looked at.
"""

from __future__ import annotations

from waystation.core.address import matches
from waystation.core.message import Message, now_ms


class RetainedMessages:
    def __init__(self) -> None:
        self._by_address: dict[str, tuple[int, Message]] = {}  # address -> (record id, message)

    def __len__(self) -> int:
        return len(self._by_address)

    def has(self, address: str) -> bool:
        return address in self._by_address

    def put(self, msg: Message, rid: int) -> int:
        """Keep ``msg`` for its address (``rid``: its record, 0 when in memory only); the
        record id of the message it replaces (0 for none or one in memory)."""
        old = self._by_address.get(msg.address)
        self._by_address[msg.address] = (rid, msg)
        return old[0] if old else 0

    def clear(self, address: str) -> int:
        """Forget the address's message; its record id (0 for none or one in memory)."""
        old = self._by_address.pop(address, None)
        return old[0] if old else 0

    def matching(self, pattern: str) -> tuple[list[Message], list[int]]:
        """The live messages whose address matches ``pattern`` (address order), and the
        record ids of expired ones, now forgotten."""
        now = now_ms()
        found: list[Message] = []
        expired: list[int] = []
        if "*" not in pattern and "#" not in pattern:
            candidates = [pattern] if pattern in self._by_address else []
        else:
            candidates = [a for a in self._by_address if matches(pattern, a)]
        for address in sorted(candidates):
            rid, msg = self._by_address[address]
            if msg.expiration and msg.expiration <= now:
                del self._by_address[address]
                if rid:
                    expired.append(rid)
                continue
            found.append(msg)
        return found, expired


__all__ = ["RetainedMessages"]
