"""Core exceptions -> AMQP error conditions, with the exception's text as the description."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from proton import Condition

from waystation.core.consumer import ConsumerError
from waystation.core.filter import FilterError
from waystation.core.limits import LimitExceeded
from waystation.core.postoffice import AddressFull, RoutingError
from waystation.core.security import NotAuthorized
from waystation.core.session import SessionError
from waystation.core.transaction import TransactionError
from waystation.gateway.amqp.codec import DecodeError

NOT_FOUND = "amqp:not-found"
UNAUTHORIZED = "amqp:unauthorized-access"
RESOURCE_LIMIT = "amqp:resource-limit-exceeded"
INVALID_FIELD = "amqp:invalid-field"
DECODE_ERROR = "amqp:decode-error"
INTERNAL = "amqp:internal-error"
NOT_IMPLEMENTED = "amqp:not-implemented"
RESOURCE_DELETED = "amqp:resource-deleted"
PRECONDITION = "amqp:precondition-failed"
RESOURCE_LOCKED = "amqp:resource-locked"
FORCED = "amqp:connection:forced"
DETACH_FORCED = "amqp:link:detach-forced"
MESSAGE_SIZE = "amqp:link:message-size-exceeded"
TX_UNKNOWN = "amqp:transaction:unknown-id"
TX_ROLLBACK = "amqp:transaction:rollback"

T = TypeVar("T")

# the exceptions a client's request can raise in the core, most specific first
CLIENT_ERRORS = (
    FilterError,
    RoutingError,
    AddressFull,
    NotAuthorized,
    LimitExceeded,
    TransactionError,
    ConsumerError,
    SessionError,
    DecodeError,
    ValueError,
)


def decoded(read: Callable[[], T], field: str) -> T:
    """``read()`` of a field of the client's frame that proton's binding decodes as it is
    read (strings as UTF-8, symbols as ASCII): a DecodeError naming ``field`` (so
    ``amqp:decode-error``) when its bytes are not that, where proton raises a bare
    UnicodeDecodeError that would pass for the node's own bug."""
    try:
        return read()
    except UnicodeDecodeError as e:
        bad = e.object[e.start : e.start + 1].hex()
        raise DecodeError(
            f"{field} is not valid {e.encoding.upper()} (0x{bad} at {e.start})"
        ) from None


def condition(e: BaseException) -> Condition:
    """The AMQP error condition for a core exception."""
    if isinstance(e, FilterError):
        return Condition(INVALID_FIELD, f"invalid selector: {e}")
    if isinstance(e, RoutingError):
        return Condition(NOT_FOUND, str(e))
    if isinstance(e, NotAuthorized):
        return Condition(UNAUTHORIZED, str(e) or "not authorized")
    if isinstance(e, (LimitExceeded, AddressFull)):
        return Condition(RESOURCE_LIMIT, str(e))
    if isinstance(e, TransactionError):
        return Condition(TX_UNKNOWN, str(e))
    if isinstance(e, ConsumerError):
        return Condition(RESOURCE_LOCKED, str(e))
    if isinstance(e, DecodeError):
        return Condition(DECODE_ERROR, str(e))
    if isinstance(e, (SessionError, ValueError)):
        return Condition(INVALID_FIELD, str(e))
    return Condition(INTERNAL, "the node failed to process the request; see its log")


__all__ = ["CLIENT_ERRORS", "condition", "decoded"]
