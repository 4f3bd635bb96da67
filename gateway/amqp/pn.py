"""Proton's C engine called directly on the per-message path.

The ``proton`` Python classes wrap every event, link and delivery in objects with attribute
records: several microseconds a message, most of the adapter's cost in a profile.  Transfers,
dispositions and flow go through these thin calls on the raw pointers instead; attaches,
conditions and other rare work keep using the wrappers (``Link.wrap(ptr)``).
"""

from __future__ import annotations

from typing import Any

from cproton_ffi import ffi, lib

NULL = ffi.NULL
DELIVERY = lib.PN_DELIVERY
LINK_FLOW = lib.PN_LINK_FLOW
ACCEPTED = lib.PN_ACCEPTED
REJECTED = lib.PN_REJECTED
RELEASED = lib.PN_RELEASED
MODIFIED = lib.PN_MODIFIED
RECEIVED = lib.PN_RECEIVED

collector_peek = lib.pn_collector_peek
collector_pop = lib.pn_collector_pop
event_type = lib.pn_event_type
event_delivery = lib.pn_event_delivery
event_link = lib.pn_event_link
delivery_link = lib.pn_delivery_link
is_receiver = lib.pn_link_is_receiver
readable = lib.pn_delivery_readable
partial = lib.pn_delivery_partial
pending = lib.pn_delivery_pending
aborted = lib.pn_delivery_aborted
remote_settled = lib.pn_delivery_settled
remote_state = lib.pn_delivery_remote_state
updated = lib.pn_delivery_updated
update = lib.pn_delivery_update
settle = lib.pn_delivery_settle
advance = lib.pn_link_advance
credit = lib.pn_link_credit
flow = lib.pn_link_flow
drain_mode = lib.pn_link_get_drain
incref = lib.pn_incref
decref = lib.pn_decref
new_delivery = lib.pn_delivery
link_send = lib.pn_link_send
from_buffer = ffi.from_buffer
transport_push = lib.pn_transport_push  # (transport, bytes, len) -> bytes taken, < 0: closed
transport_pending = lib.pn_transport_pending


# one C buffer reused by every receive on the loop's thread: a transfer is copied once,
# straight into the bytes object, instead of through a bytearray per message
_RECV_SIZE = 64 * 1024
_recv_buf = ffi.new("char[]", _RECV_SIZE)
_link_recv = lib.pn_link_recv
_unpack = ffi.unpack


def recv_or_none(link: Any, n: int) -> bytes | None:
    """The ``n`` pending bytes of the link's current delivery; None when proton refuses
    (an aborted delivery: its ``pending`` is 1 and the read fails)."""
    if n <= 0:
        return b""
    buf = _recv_buf if n <= _RECV_SIZE else ffi.new("char[]", n)
    got = _link_recv(link, buf, n)
    if got < 0:
        return None
    return _unpack(buf, got)


def recv(link: Any, n: int) -> bytes:
    """The ``n`` pending bytes of the link's current delivery."""
    buf = _recv_buf if n <= _RECV_SIZE else ffi.new("char[]", n)
    got = lib.pn_link_recv(link, buf, n)
    if got < 0:
        return b""
    return ffi.unpack(buf, got)


def send(link: Any, tag: bytes, payload: bytes) -> Any:
    """A new delivery on the sender ``link`` carrying ``payload``; returns it."""
    d = lib.pn_delivery(link, (len(tag), ffi.from_buffer(tag)))
    lib.pn_link_send(link, payload, len(payload))  # cffi passes the bytes' own buffer
    lib.pn_link_advance(link)
    return d


_OUT_SIZE = 256 * 1024
_out_buf = ffi.new("char[]", _OUT_SIZE)


def transport_take(transport: Any, n: int) -> bytes:
    """The first ``n`` pending output bytes of ``transport``, removed from it."""
    buf = _out_buf if n <= _OUT_SIZE else ffi.new("char[]", n)
    got = lib.pn_transport_peek(transport, buf, n)
    if got < 0:
        return b""
    lib.pn_transport_pop(transport, got)
    return ffi.unpack(buf, got)


def tag(d: Any) -> bytes:
    t = lib.pn_delivery_tag(d)
    return ffi.unpack(t.start, t.size)


__all__ = ["recv", "send", "tag", "transport_take"]
