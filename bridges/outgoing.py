"""A stored message as the SEND frame a bridge forwards (headers, duplicate id, properties)."""

from __future__ import annotations

from waystation.core.message import (
    DEFAULT_PRIORITY,
    DUPLICATE_ID,
    ORIGINAL_ADDRESS,
    ROUTE_TO_NODE,
    Message,
    property_text,
)
from waystation.wire.stomp import encode_frame

# A user's own duplicate id travels on under this name (the bridge's id takes _WS_DUPL_ID).
SOURCE_DUPLICATE_ID = "_WS_SRC_DUPL_ID"
# Headers the remote would read as instructions rather than properties; a property of that
# name is not forwarded.  Scheduled delays were applied here already.
_NOT_FORWARDED = frozenset(
    (
        "destination",
        "receipt",
        "transaction",
        "content-length",
        "persistent",
        "priority",
        "expires",
        "AMQ_SCHEDULED_DELAY",
        "scheduled-delay",
        ROUTE_TO_NODE,
    )
)


def send_frame(
    msg: Message,
    receipt: str,
    forwarding_address: str | None,
    duplicate_id: str | None,
    version: str,
) -> bytes:
    """The SEND for ``msg``: to the forwarding address, else the address it was sent to
    before store-and-forward, else its own; ``duplicate_id`` (when given) lets the remote drop
    resends, and a user's own duplicate id travels on as ``SOURCE_DUPLICATE_ID``."""
    props = msg.properties
    orig = props.get(ORIGINAL_ADDRESS)
    dest = forwarding_address or (orig if isinstance(orig, str) and orig else None)
    headers: list[tuple[str, str]] = [("destination", dest or msg.address), ("receipt", receipt)]
    if msg.durable:
        headers.append(("persistent", "true"))
    if msg.priority != DEFAULT_PRIORITY:
        headers.append(("priority", str(msg.priority)))
    if msg.expiration:
        headers.append(("expires", str(msg.expiration)))
    if duplicate_id is not None:
        headers.append((DUPLICATE_ID, duplicate_id))
    routed = ROUTE_TO_NODE in props
    for k, v in props.items():
        if v is None or k in _NOT_FORWARDED:
            continue
        if routed and k == ORIGINAL_ADDRESS:
            continue  # store-and-forward bookkeeping, now the destination
        if duplicate_id is not None and k == DUPLICATE_ID:
            k = SOURCE_DUPLICATE_ID
        headers.append((k, property_text(v)))
    return encode_frame("SEND", headers, msg.body, version, content_length=True)
