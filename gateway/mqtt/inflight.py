"""QoS 1 and 2 deliveries the client has not acknowledged yet, and the packet ids they hold.

The client's receive maximum bounds them per connection [MQTT-3.3.4-9], while the core's
window is per consumer: a delivery that arrives with the quota spent waits in ``backlog``
(the session pauses its consumers meanwhile), so overlapping subscriptions never exceed it.
A QoS 2 delivery keeps its packet id from PUBLISH through PUBREC (where the core settles it)
to PUBCOMP; the ids awaiting PUBCOMP are what a persistent session saves, so a reconnect
resends PUBREL instead of reusing an id the client still holds.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from waystation.core.consumer import Consumer

# A shared empty dict standing for "none yet" in per-connection state that most connections
# never fill: the owner replaces it with its own dict before the first write (never write
# to it).
NO_ENTRIES: dict[Any, Any] = {}

SENT = 0  # PUBLISH sent, waiting for PUBACK (QoS 1) or PUBREC (QoS 2)
RELEASED = 1  # QoS 2: PUBREC came, PUBREL sent, waiting for PUBCOMP


class Entry:
    __slots__ = ("consumer", "tag", "qos", "state", "msg_id")

    def __init__(
        self, consumer: Consumer | None, tag: int, qos: int, state: int = SENT, msg_id: int = 0
    ) -> None:
        self.consumer = consumer  # None once settled, or a PUBREL resent after a reconnect
        self.tag = tag
        self.qos = qos
        self.state = state
        self.msg_id = msg_id  # QoS 2 of a persistent session: the message it carries


class Outbound:
    """Packet ids in use towards the client and the deliveries waiting for quota.

    A persistent session's QoS 2 deliveries are saved, one record per packet id (``[message
    id, state]``, see :meth:`record`), before they are written: after a reconnect (or a
    restart) a message that comes back from its queue goes out again with its old packet id
    and DUP set, so a client that had it already recognises it [MQTT-4.3.3-10]; ids awaiting
    PUBCOMP get their PUBREL again."""

    __slots__ = ("entries", "limit", "backlog", "resend", "window_paused", "acked", "_next")

    def __init__(self, limit: int) -> None:
        self.entries: dict[int, Entry] = {}
        self.limit = limit  # the client's receive maximum (65535 when it names none)
        self.backlog: deque[Any] | None = None  # made when first needed (a deque is big)
        # message id -> the packet id it was sent with (persistent sessions' QoS 2 only)
        self.resend: dict[int, int] = NO_ENTRIES
        self.window_paused = False  # consumers paused: the quota is spent
        # the consumer PUBACKs settled in this batch of packets, dispatched once at its end
        self.acked: Consumer | None = None
        self._next = 1

    def add(self, consumer: Consumer | None, tag: int, qos: int) -> int:
        """A free packet id, now held by this delivery."""
        entries = self.entries
        pid = self._next
        reserved = self.resend
        while pid in entries or (reserved and pid in reserved.values()):
            pid = pid + 1 if pid < 65535 else 1
        self._next = pid + 1 if pid < 65535 else 1
        entries[pid] = Entry(consumer, tag, qos)
        return pid

    def saved(self) -> list[list[int]]:
        """Every QoS 2 delivery a persistent session keeps, ``[packet id, message id,
        state]`` (what its records hold, together)."""
        out = [[pid, *rec] for pid in self.entries if (rec := self.record(pid)) is not None]
        out.extend([pid, mid, SENT] for mid, pid in self.resend.items())
        return out

    def record(self, pid: int) -> list[int] | None:
        """What a persistent session keeps of QoS 2 delivery ``pid`` (``[message id,
        state]``; None: nothing, it is over)."""
        e = self.entries.get(pid)
        if e is None or e.qos != 2 or not (e.state == RELEASED or e.msg_id):
            return None
        return [e.msg_id, e.state]

    def restore(self, saved: dict[str, list[int]] | list[list[int]]) -> None:
        """From the saved records (one per packet id; a list: as saved before, whole)."""
        rows = [[int(k), *v] for k, v in saved.items()] if isinstance(saved, dict) else saved
        for pid, msg_id, state in rows:
            if state == RELEASED:
                self.entries[pid] = Entry(None, 0, 2, RELEASED)
            elif msg_id:
                if self.resend is NO_ENTRIES:
                    self.resend = {}
                self.resend[msg_id] = pid

    def released(self) -> list[int]:
        """Packet ids awaiting PUBCOMP."""
        return [pid for pid, e in self.entries.items() if e.state == RELEASED]


class Inbound:
    """QoS 2 packet ids received and not yet released by PUBREL [MQTT-4.3.3-9]: a PUBLISH
    with one of them is a resend, not a new message."""

    __slots__ = ("awaiting_rel", "dup_ids", "routing", "pending", "blocked")

    def __init__(self) -> None:
        # (dicts used as sets: an empty dict costs a third of an empty set, per connection)
        self.awaiting_rel: dict[int, None] = {}  # PUBREC sent (or due)
        self.dup_ids: dict[int, str] = {}  # persistent session: packet id -> duplicate id
        self.routing: dict[int, None] = {}  # ids whose message is not routed and stored yet
        self.pending = 0  # QoS 1/2 messages not yet acknowledged (the receive quota)
        self.blocked = False  # reading paused: an address is full (BLOCK policy)

    def restore(self, saved: dict[str, str] | list[list[int | str]]) -> None:
        """From the saved records (packet id -> duplicate id; a list: as saved before)."""
        rows = list(saved.items()) if isinstance(saved, dict) else saved
        for pid, dup in rows:
            self.awaiting_rel[int(pid)] = None
            self.dup_ids[int(pid)] = str(dup)


__all__ = ["NO_ENTRIES", "RELEASED", "SENT", "Entry", "Inbound", "Outbound"]
