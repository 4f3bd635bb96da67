"""AMQP 1.0 for Waystation: proton's engine driven sans-I/O on the node's loop (docs/amqp.md)."""

from __future__ import annotations

from waystation.gateway.adapter import ProtocolAdapter
from waystation.gateway.amqp.sasl import SASL_HEADER, SYS_TEMP, mechanisms_frame, outcome_frame
from waystation.gateway.amqp.session import AmqpOptions, AmqpSession, options_from


def _refusal(why: str) -> bytes:
    """A connection refused at the door: the SASL exchange ends at once with a transient
    system error, which clients report as a failed connection (and may retry)."""
    return SASL_HEADER + mechanisms_frame(["PLAIN"]) + outcome_frame(SYS_TEMP)


ADAPTER = ProtocolAdapter(
    name="amqp",
    new_session=lambda engine, link, acceptor: AmqpSession(engine, link, options_from(acceptor)),
    refusal=_refusal,
    subprotocols=("amqp", "AMQPWSB10"),
    text_frames=False,
)

__all__ = ["ADAPTER", "AmqpOptions", "AmqpSession"]
