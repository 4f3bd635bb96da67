"""Header identifiers: names a selector resolves against message fields, not properties.

Standard fields are headers too: ``JMSCorrelationID``, ``JMSReplyTo``, ``JMSType`` (the
subject), ``JMSXGroupID``, ``JMSXGroupSeq``, ``JMSXUserID`` and ``WSTraceID``.

JMS names (``JMSPriority``), HornetQ core names (``HQPriority``), Artemis names
(``AMQPriority``) and our own (``WSPriority``) all work, so selectors written for those
brokers run unchanged.  A header name always means the header: a message property with the
same name is ignored by selectors (a producer must not be able to spoof ``JMSPriority``).
"""

from __future__ import annotations

from collections.abc import Callable

from waystation.core.message import Message

HeaderGetter = Callable[[Message], object]


def _priority(m: Message) -> object:
    return m.priority


def _timestamp(m: Message) -> object:
    return m.timestamp


def _expiration(m: Message) -> object:
    return m.expiration


def _durable(m: Message) -> object:
    return "DURABLE" if m.durable else "NON_DURABLE"


def _delivery_mode(m: Message) -> object:
    return "PERSISTENT" if m.durable else "NON_PERSISTENT"


def _size(m: Message) -> object:
    return m.size()


def _message_id(m: Message) -> object:
    return "ID:" + str(m.id)


def _address(m: Message) -> object:
    return m.address


def _trace_id(m: Message) -> object:
    return m.trace_id


def _with_legacy(field: str, prop: str) -> HeaderGetter:
    """A standard field, or (for messages made before it was a field) the property that a
    client used to send it as."""

    def get(m: Message) -> object:
        v = getattr(m, field)
        return m.application_properties.get(prop) if v is None else v

    return get


def _aliases(getter: HeaderGetter, *names: str) -> dict[str, HeaderGetter]:
    return dict.fromkeys(names, getter)


HEADERS: dict[str, HeaderGetter] = {
    **_aliases(_priority, "JMSPriority", "HQPriority", "AMQPriority", "WSPriority"),
    **_aliases(_timestamp, "JMSTimestamp", "HQTimestamp", "AMQTimestamp", "WSTimestamp"),
    **_aliases(_expiration, "JMSExpiration", "HQExpiration", "AMQExpiration", "WSExpiration"),
    **_aliases(_durable, "HQDurable", "AMQDurable", "WSDurable"),
    **_aliases(_delivery_mode, "JMSDeliveryMode"),
    **_aliases(_size, "HQSize", "AMQSize", "WSSize"),
    **_aliases(_message_id, "JMSMessageID"),
    **_aliases(_address, "WSAddress"),
    **_aliases(_with_legacy("correlation_id", "JMSCorrelationID"), "JMSCorrelationID"),
    **_aliases(_with_legacy("reply_to", "JMSReplyTo"), "JMSReplyTo"),
    **_aliases(_with_legacy("subject", "JMSType"), "JMSType"),
    **_aliases(_trace_id, "WSTraceID"),
    **_aliases(_with_legacy("group_id", "JMSXGroupID"), "JMSXGroupID", "WSGroupID"),
    **_aliases(_with_legacy("group_sequence", "JMSXGroupSeq"), "JMSXGroupSeq", "WSGroupSeq"),
    **_aliases(_with_legacy("user_id", "JMSXUserID"), "JMSXUserID", "WSUserID"),
}


def message_header(name: str) -> HeaderGetter | None:
    """The getter for a header identifier, or None for an ordinary property name."""
    return HEADERS.get(name)


def no_header(name: str) -> None:
    """Lookup for plain mappings: every identifier, header names included, is a key."""
    return None
