"""Core refusals as MQTT reason codes (one table for PUBLISH, SUBSCRIBE and CONNECT)."""

from __future__ import annotations

from waystation.core.consumer import ConsumerError
from waystation.core.limits import LimitExceeded
from waystation.core.postoffice import AddressFull, RoutingError
from waystation.core.security import NotAuthorized
from waystation.core.session import SessionError
from waystation.gateway.mqtt.topics import TopicError
from waystation.wire.mqtt import ReasonCode

R = ReasonCode


class Refused(Exception):
    """A request answered with a reason code."""

    def __init__(self, reason: int, text: str) -> None:
        super().__init__(text)
        self.reason = reason
        self.text = text


# what the core (or the topic rule) refuses a request with: answered, never a crash
REFUSALS = (
    NotAuthorized,
    AddressFull,
    LimitExceeded,
    RoutingError,
    SessionError,
    ConsumerError,
    TopicError,
    Refused,
    ValueError,
)


def refusal_reason(e: Exception, *, topic_filter: bool = False) -> tuple[int, str]:
    """The v5 reason code (and reason string) for a refusal."""
    if isinstance(e, Refused):
        return e.reason, e.text
    if isinstance(e, NotAuthorized):
        return R.NOT_AUTHORIZED, str(e)
    if isinstance(e, (AddressFull, LimitExceeded)):
        return R.QUOTA_EXCEEDED, str(e)
    if isinstance(e, TopicError):
        return (R.TOPIC_FILTER_INVALID if topic_filter else R.TOPIC_NAME_INVALID), str(e)
    return R.UNSPECIFIED_ERROR, str(e)


__all__ = ["REFUSALS", "Refused", "refusal_reason"]
