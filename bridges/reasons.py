"""How a remote ERROR maps to a dead-letter reason (the reasons themselves: core.reasons).

A remote ERROR frame is either *permanent* for the message it names (the remote will refuse
it however often it is resent: dead-letter it and go on with the next) or *transient* (store
trouble, a full address: back off and resend).  The text of the ``message`` header decides;
the phrases below cover Waystation's own errors and the usual wording of other STOMP brokers.
"""

from __future__ import annotations

from waystation.core.reasons import (
    INVALID_REMOTE_DESTINATION,
    MESSAGE_TOO_LARGE,
    REMOTE_AUTHENTICATION,
    REMOTE_AUTHORIZATION,
    REMOTE_REJECTED,
)

_TRANSIENT = (
    "store failure",
    "address full",
    "is full",
    "internal error",
    "shutting down",
    "server stopping",
    "try again",
    "timeout",
    "timed out",
)
_AUTHENTICATION = (
    "authentication",
    "bad credentials",
    "password is invalid",
    "invalid password",
    "invalid login",
    "login required",
    "access refused",  # RabbitMQ
)
_AUTHORIZATION = (
    "not authorized",
    "not authorised",
    "unauthorized",
    "permission denied",
    "access denied",
    "may not",
    "forbidden",
)
_DESTINATION = (
    "unknown destination",
    "does not exist",
    "no such destination",
    "invalid destination",
    "destination not found",
    "not_found",
    "no queue",
)
_TOO_LARGE = ("too large", "too big", "exceeds max", "size limit", "maximum size", "max_frame")


def _has(text: str, phrases: tuple[str, ...]) -> bool:
    return any(p in text for p in phrases)


def classify_error(message: str) -> str | None:
    """The dead-letter reason for a message the remote refused with ``message``, or None
    when the refusal is transient and the message should be resent after a backoff."""
    text = message.lower()
    if _has(text, _TOO_LARGE):
        return MESSAGE_TOO_LARGE
    if _has(text, _TRANSIENT):
        return None
    if _has(text, _AUTHORIZATION):
        return REMOTE_AUTHORIZATION
    if _has(text, _DESTINATION):
        return INVALID_REMOTE_DESTINATION
    if _has(text, _AUTHENTICATION):
        return REMOTE_AUTHENTICATION
    return REMOTE_REJECTED


def is_authentication_failure(message: str) -> bool:
    """Whether an ERROR answering CONNECT means the remote refused the credentials."""
    text = message.lower()
    return _has(text, _AUTHENTICATION) or _has(text, _AUTHORIZATION)
