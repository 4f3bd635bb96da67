"""STOMP 1.0-1.2: the adapter entry (see ``gateway/adapter.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from waystation.config.units import to_ms
from waystation.gateway.adapter import ProtocolAdapter
from waystation.gateway.stomp.server import refusal_frame
from waystation.gateway.stomp.session import StompOptions, StompSession
from waystation.wire.stomp import Limits

if TYPE_CHECKING:
    from waystation.config.listeners import StompAcceptor


def stomp_options(st: StompAcceptor) -> StompOptions:
    """Session options from ``[acceptors.stomp]``; WebSocket and tunnel sessions share them."""
    return StompOptions(
        Limits(
            max_frame_size=st.max_frame_size,
            max_headers=st.max_headers,
            max_header_length=st.max_header_length,
            max_body_size=st.max_body_size,
        ),
        heartbeat_send_ms=to_ms(st.heartbeat_send),
        heartbeat_receive_ms=to_ms(st.heartbeat_receive),
        heartbeat_min_ms=to_ms(st.heartbeat_min),
        connection_ttl=st.connection_ttl.total_seconds(),
    )


ADAPTER = ProtocolAdapter(
    name="stomp",
    new_session=lambda engine, link, acceptor: StompSession(engine, link, stomp_options(acceptor)),
    refusal=refusal_frame,
    subprotocols=("v12.stomp", "v11.stomp", "v10.stomp"),
    text_frames=True,
)

__all__ = ["ADAPTER", "stomp_options"]
