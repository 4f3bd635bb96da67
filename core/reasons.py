"""Why a message was dead-lettered: the values written into ``_WS_DLQ_REASON`` (DESIGN §2).

They are engine vocabulary shared by every part that gives a message up (the post office,
bridges, push registrations), so they live here, where all of them may import them.
"""

from __future__ import annotations

# the engine's own
EXPIRED = "expired"
MAX_DELIVERIES = "max-deliveries"
NO_ROUTE = "no-route"
UNKNOWN_NODE = "invalid-remote-node"
ROUTE_LOOP = "route-loop"  # routes sent a message back to a node it already passed
ADDRESS_FULL = "address-full"

# the consuming client refused the message for good (AMQP rejected, STOMP NACK past the limit)
REJECTED = "rejected"

# a remote end (a bridge's broker, a webhook) refused the message for good
INVALID_REMOTE_DESTINATION = "invalid-remote-destination"
REMOTE_AUTHORIZATION = "remote-authorization"
REMOTE_AUTHENTICATION = "remote-authentication"
MESSAGE_TOO_LARGE = "message-too-large"
REMOTE_REJECTED = "remote-rejected"  # any other permanent refusal of one message

# a bridge gave up waiting for the remote
ROUTING_TIMEOUT = "routing-timeout"
IN_DOUBT_TIMEOUT = "in-doubt-timeout"

__all__ = [
    "ADDRESS_FULL",
    "EXPIRED",
    "INVALID_REMOTE_DESTINATION",
    "IN_DOUBT_TIMEOUT",
    "MAX_DELIVERIES",
    "MESSAGE_TOO_LARGE",
    "NO_ROUTE",
    "REJECTED",
    "REMOTE_AUTHENTICATION",
    "REMOTE_AUTHORIZATION",
    "REMOTE_REJECTED",
    "ROUTE_LOOP",
    "ROUTING_TIMEOUT",
    "UNKNOWN_NODE",
]
