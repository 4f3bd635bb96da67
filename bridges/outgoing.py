"""A stored message as the SEND frame a bridge forwards to another Waystation node.

The headers come from the STOMP mapping (``gateway/stomp/mapping.py``), so the remote turns
them back into the same message: typed properties (``ws-types``), standard fields, creation
time and the trace id (``ws-trace-id``, which the remote adopts instead of making its own).
"""

from __future__ import annotations

from waystation.core.message import ORIGINAL_ADDRESS, Message
from waystation.gateway.stomp.mapping import send_headers
from waystation.wire.stomp import encode_frame

# A user's own duplicate id travels on under this name (the bridge's id takes _WS_DUPL_ID).
SOURCE_DUPLICATE_ID = "_WS_SRC_DUPL_ID"


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
    headers = send_headers(
        msg, destination(msg, forwarding_address), receipt, duplicate_id, SOURCE_DUPLICATE_ID
    )
    return encode_frame("SEND", headers, msg.body, version, content_length=True)


def destination(msg: Message, forwarding_address: str | None) -> str:
    """Where a bridge sends ``msg``: the forwarding address, else the address it was sent to
    before store-and-forward, else its own."""
    orig = msg.annotation(ORIGINAL_ADDRESS)
    return forwarding_address or (orig if isinstance(orig, str) and orig else msg.address)
