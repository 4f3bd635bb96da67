"""A stored message as the SEND frame a bridge forwards to another Waystation node.

The headers come from the STOMP mapping (``gateway/stomp/mapping.py``), so the remote turns
them back into the same message: typed properties (``ws-types``), standard fields, creation
time and the trace id (``ws-trace-id``, which the remote adopts instead of making its own).
"""

from __future__ import annotations

from waystation.core.message import Message
from waystation.gateway.stomp.mapping import (
    SOURCE_DUPLICATE_ID,
    forward_destination,
    send_headers,
)
from waystation.wire.stomp import encode_frame

destination = forward_destination


def send_frame(
    msg: Message,
    receipt: str,
    forwarding_address: str | None,
    duplicate_id: str | None,
    version: str,
) -> bytes:
    """The SEND for ``msg`` (to :func:`forward_destination`); ``duplicate_id`` (when given)
    lets the remote drop resends, and a user's own duplicate id travels on as
    ``SOURCE_DUPLICATE_ID``."""
    headers = send_headers(msg, forward_destination(msg, forwarding_address), receipt, duplicate_id)
    return encode_frame("SEND", headers, msg.body, version, content_length=True)


__all__ = ["SOURCE_DUPLICATE_ID", "destination", "send_frame"]
