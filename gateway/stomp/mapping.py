"""STOMP frames <-> messages: the one place that says which header is which field.

A SEND becomes a message by :func:`message_from_send`; a message becomes the headers of a
MESSAGE frame by :func:`delivery_headers` (the session adds ``destination``, ``message-id``,
``subscription``, ``ack`` and ``redelivered``) or of a bridge's SEND by
:func:`send_headers`.  The table is in ``docs/mapping.md``; in short:

* steering headers: ``persistent`` (``true``: durable), ``priority`` (0-9), ``expires``
  (absolute ms; 0 = never), ``AMQ_SCHEDULED_DELAY`` / ``scheduled-delay`` (ms from now);
* standard fields: ``amqp-message-id`` (the application's message id; ``message-id`` is the
  server's), ``correlation-id``, ``reply-to``, ``content-type``, ``content-encoding``,
  ``user-id``, ``subject``, ``JMSXGroupID``, ``JMSXGroupSeq``, ``timestamp`` (creation time,
  ms), ``ws-trace-id`` (the trace id: a message that already has one, from a bridge or a
  relaying client, keeps it); MESSAGE frames leave out ``timestamp`` and ``ws-trace-id``
  (a bridge's SEND has them);
* every other header is an application property, a string unless ``ws-types`` says
  otherwise.

Typed properties: the header ``ws-types`` lists ``name=type`` pairs separated by commas, the
type one of ``null bool int long float double string binary timestamp uuid`` (a name holding
``%``, ``,`` or ``=`` writes them as ``%25``, ``%2C``, ``%3D``).  The header ``name`` then
carries the value as text: ``true``/``false``, a decimal integer, a number, base64 for
binary, milliseconds since the epoch for a timestamp, the canonical form of a UUID, and
anything (conventionally nothing) for null.  Example::

    SEND
    destination:/queue/orders
    urgent:true
    count:3
    ws-types:urgent=bool,count=int

MESSAGE frames carry ``ws-types`` for every property that is not a string, so a typed
property survives any number of STOMP hops (a bridge, a client that relays).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import unquote

from waystation.core.message import (
    DEFAULT_PRIORITY,
    DESTINATION,
    DUPLICATE_ID,
    FIELD_INDEX,
    ORIGINAL_ADDRESS,
    ROUTE_TO_NODE,
    STRING,
    TYPE_NAMES,
    Message,
    PropertyValue,
    parse_typed,
    type_name,
    typed_text,
)

TYPES_HEADER = "ws-types"
TRACE_HEADER = "ws-trace-id"
NODE_HEADER = "ws-node"  # CONNECT: the node a link claims to be; CONNECTED: the node answering
# SUBSCRIBE on a link from another node (that claimed its name): send this node's
# store-and-forward traffic for it back over the connection (``direction = "both"``); its
# MESSAGEs are ACKed once stored there, or NACKed with the dead-letter reason in REASON_HEADER
REVERSE_HEADER = "ws-link"
REASON_HEADER = "ws-reason"
# A user's own duplicate id travels on under this name when a link between nodes stamps its
# own (stable) id as _WS_DUPL_ID
SOURCE_DUPLICATE_ID = "_WS_SRC_DUPL_ID"
MESSAGE_ID_HEADER = "amqp-message-id"  # the application's id (as RabbitMQ's STOMP names it)

# header <-> standard string field
FIELD_HEADERS: dict[str, str] = {
    "correlation-id": "correlation_id",
    "reply-to": "reply_to",
    "content-type": "content_type",
    "content-encoding": "content_encoding",
    "user-id": "user_id",
    "subject": "subject",
    "JMSXGroupID": "group_id",
}
GROUP_SEQ_HEADER = "JMSXGroupSeq"
# ids that may be typed (AMQP allows string, ulong, uuid, binary)
_TYPED_FIELDS = {MESSAGE_ID_HEADER: "message_id", "correlation-id": "correlation_id"}

# SEND headers that steer the send (or are framing) rather than travel with the message
CONTROL_HEADERS = frozenset(
    (
        "destination",
        "receipt",
        "transaction",
        "content-length",
        "persistent",
        "priority",
        "expires",
        "timestamp",
        "AMQ_SCHEDULED_DELAY",
        "scheduled-delay",
        TYPES_HEADER,
        TRACE_HEADER,
        MESSAGE_ID_HEADER,
        GROUP_SEQ_HEADER,
        *FIELD_HEADERS,
    )
)
# headers whose presence needs work beyond copying (looked at only when one is present)
_SPECIAL = CONTROL_HEADERS - {
    "destination",
    "receipt",
    "transaction",
    "content-length",
    "persistent",
}
# SEND header -> what it is: _FIELD a standard string field (copied on the way), _STEER needs
# work (steering, ids, types), _FRAMING only skipped; a header not here is a property
_FRAMING, _STEER, _FIELD = 0, 1, 2
_KINDS: dict[str, int] = {
    k: _FIELD if k in FIELD_HEADERS else _STEER if k in _SPECIAL else _FRAMING
    for k in CONTROL_HEADERS
}
# SEND headers of the standard fields -> their place in ``Message._std``
_FIELD_SLOTS = {h: FIELD_INDEX[f] for h, f in FIELD_HEADERS.items()}
# MESSAGE headers of the standard fields, by their place in ``Message._std``
_ID_SLOTS = tuple((FIELD_INDEX[f], h) for h, f in _TYPED_FIELDS.items())
_STRING_SLOTS = tuple(
    (FIELD_INDEX[f], h) for h, f in FIELD_HEADERS.items() if h not in _TYPED_FIELDS
)
_GROUP_SEQ_SLOT = FIELD_INDEX["group_sequence"]
# MESSAGE headers that the frame owns: a property of that name is not sent as a header
OWN_HEADERS = frozenset(
    (
        "destination",
        "message-id",
        "subscription",
        "ack",
        "content-length",
        "persistent",
        "priority",
        "expires",
        "redelivered",
        "timestamp",
        TYPES_HEADER,
        TRACE_HEADER,
    )
)
MAX_INT64 = 2**63 - 1


def message_from_send(
    msg_id: int,
    address: str,
    headers: Mapping[str, str],
    body: bytes,
    now: int,
    *,
    user: str | None = None,
) -> Message:
    """The message for a SEND to ``address`` (the session parsed ``destination``).

    ``msg_id`` is the engine's new id, ``now`` the creation time (ms) unless the frame has
    ``timestamp``.  ``user`` (the authenticated user, when security is on) becomes the
    ``user_id`` of a SEND without a ``user-id`` header.  A ``user-id`` header is kept as the
    producer's claim, not checked: a bridge forwards the original producer's, under its own
    login.  ValueError, naming the header and the expected form, for a bad value; the
    destination as sent is kept as the ``_WS_DESTINATION`` annotation when it is a plain name
    (a prefixed form is what a subscriber prints anyway)."""
    props: dict[str, PropertyValue] = {}
    special = False
    fields: list[tuple[str, str]] | None = None
    kinds = _KINDS
    for k, v in headers.items():
        kind = kinds.get(k)
        if kind is None:
            props[k] = v
        elif kind == _FIELD:  # content-type and friends: common, so not "special"
            if fields is None:
                fields = []
            fields.append((k, v))
        elif kind:
            special = True
    msg = Message(
        msg_id, address, body, props, headers.get("persistent") == "true", DEFAULT_PRIORITY, now
    )
    if fields is not None:
        for k, v in fields:  # by place: a setattr by name is a Python call per field
            msg._set_field(_FIELD_SLOTS[k], v)
    dest = headers.get("destination")
    if dest == address:  # a plain name: kept, since a subscriber's form would add a prefix
        msg._ann = {DESTINATION: dest}  # (a /queue/ or /topic/ form is what it prints anyway)
    if special:
        _apply_special(msg, headers, props, now)
    if user is not None and msg.user_id is None:
        msg.user_id = user
    return msg


def _apply_special(
    msg: Message,
    h: Mapping[str, str],
    props: dict[str, PropertyValue],
    now: int,
) -> None:
    """The rarely used headers: steering, standard fields, types, trace id."""
    if "priority" in h:
        msg.priority = _int_header(h, "priority", 0, 9)
    if "expires" in h:
        msg.expiration = _int_header(h, "expires", 0, MAX_INT64)
    if "timestamp" in h:
        msg.timestamp = _int_header(h, "timestamp", 0, MAX_INT64)
    delay_name = (
        "AMQ_SCHEDULED_DELAY"
        if "AMQ_SCHEDULED_DELAY" in h
        else "scheduled-delay"
        if "scheduled-delay" in h
        else None
    )
    if delay_name is not None:
        delay = _int_header(h, delay_name, -MAX_INT64, MAX_INT64)
        msg.scheduled = max(0, min(now + delay, MAX_INT64))
    if MESSAGE_ID_HEADER in h:
        msg.message_id = h[MESSAGE_ID_HEADER]
    if GROUP_SEQ_HEADER in h:
        msg.group_sequence = _int_header(h, GROUP_SEQ_HEADER, 0, 2**32 - 1)
    trace = h.get(TRACE_HEADER)
    if trace is not None:
        if not trace or len(trace) > 256:
            raise ValueError(f"invalid {TRACE_HEADER} header: expected 1 to 256 characters")
        msg.trace_id = trace
    types = h.get(TYPES_HEADER)
    if types is not None:
        for name, type_ in parse_types(types):
            if name in props:
                props[name] = _typed(name, type_, h[name])
            elif name in _TYPED_FIELDS and name in h:
                setattr(msg, _TYPED_FIELDS[name], _typed(name, type_, h[name]))
            elif name in h:
                raise ValueError(
                    f"{TYPES_HEADER}: header {name!r} is not a property and cannot be typed"
                )
            else:
                raise ValueError(f"{TYPES_HEADER} names {name!r}, a header the frame does not have")


def _typed(name: str, type_: str, text: str) -> PropertyValue:
    try:
        return parse_typed(type_, text)
    except ValueError as e:
        raise ValueError(f"invalid header {name!r}: {e}") from None


def parse_types(value: str) -> list[tuple[str, str]]:
    """``a=int,b%2Cc=bool`` -> ``[("a", "int"), ("b,c", "bool")]``; ValueError for an
    entry that is not ``name=type`` with a known type."""
    out: list[tuple[str, str]] = []
    for entry in value.split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, eq, type_ = entry.rpartition("=")
        if not eq or not name:
            raise ValueError(f"invalid {TYPES_HEADER} entry {entry!r}: expected name=type")
        type_ = type_.strip()
        if type_ not in TYPE_NAMES:
            raise ValueError(
                f"invalid {TYPES_HEADER} entry {entry!r}: unknown type {type_!r}, expected one "
                f"of {', '.join(TYPE_NAMES)}"
            )
        out.append((unquote(name.strip()), type_))
    return out


def format_types(types: Iterable[tuple[str, str]]) -> str:
    return ",".join(f"{_quote(n)}={t}" for n, t in types)


def _quote(name: str) -> str:
    if "%" in name or "," in name or "=" in name:
        return name.replace("%", "%25").replace(",", "%2C").replace("=", "%3D")
    return name


def delivery_headers(msg: Message) -> dict[str, str]:
    """The headers of a MESSAGE frame for ``msg``, apart from those the session adds
    (destination, message-id, subscription, ack, redelivered).  Properties come first (with
    the visible annotations such as ``_WS_DLQ_REASON``), then the standard fields and
    ``ws-types``.  Creation time and trace id are not shown (selectors can use
    ``JMSTimestamp`` and ``WSTraceID``; the trace id is in the event log): a MESSAGE frame is
    on the hot path, and clients never got them before."""
    out: dict[str, str] = {}
    types: list[tuple[str, str]] | None = None
    own = OWN_HEADERS
    props = msg.properties if msg._ann else msg._props  # skip the property on the hot path
    for k, v in props.items():
        if k in own:
            continue
        if type(v) is str:
            out[k] = v
            continue
        t = type_name(v)
        out[k] = typed_text(v)
        if t != STRING:
            if types is None:
                types = []
            types.append((k, t))
    m = msg
    if m._std is not None:  # any standard field set (has_fields(), without the call)
        types = _fields(m, out, types)
    if m.durable:
        out["persistent"] = "true"
    if m.priority != DEFAULT_PRIORITY:
        out["priority"] = str(m.priority)
    if m.expiration:
        out["expires"] = str(m.expiration)
    if types:
        out[TYPES_HEADER] = format_types(types)
    return out


def _fields(
    msg: Message, out: dict[str, str], types: list[tuple[str, str]] | None
) -> list[tuple[str, str]] | None:
    """The standard fields as headers; the types of non-string ids join ``types``."""
    std = msg._std
    if std is None:  # no standard field set
        return types
    for i, header in _ID_SLOTS:
        v = std[i]
        if v is not None:
            out[header] = typed_text(v)
            if type(v) is not str:
                types = types or []
                types.append((header, type_name(v)))
    for i, header in _STRING_SLOTS:
        v = std[i]
        if v is not None:
            out[header] = v  # type: ignore[assignment]
    seq = std[_GROUP_SEQ_SLOT]
    if seq is not None:
        out[GROUP_SEQ_HEADER] = str(seq)
    return types


# properties a bridge does not send as headers: the remote would read them as instructions
# (a scheduled delay was applied here already) or they are the message's own fields.  The
# CONTROL_HEADERS less the ones that are standard fields: a property of such a name (set
# through another protocol, or a message from before the field existed) is sent and becomes
# that field on the remote, unless the message has the field, which ``_fields`` writes last.
_NOT_SENT = (CONTROL_HEADERS - {MESSAGE_ID_HEADER, GROUP_SEQ_HEADER, *FIELD_HEADERS}) | {
    ROUTE_TO_NODE
}
# annotations a bridge does not forward: store-and-forward bookkeeping and the producer's
# destination string (the remote records the SEND's own)
_NOT_FORWARDED = frozenset((ROUTE_TO_NODE, DESTINATION))


def send_headers(
    msg: Message,
    destination: str,
    receipt: str | None,
    duplicate_id: str | None,
    source_duplicate_name: str = SOURCE_DUPLICATE_ID,
) -> list[tuple[str, str]]:
    """The headers of a bridge's SEND of ``msg`` to another Waystation node: everything
    :func:`message_from_send` on the remote turns back into the same message (types,
    standard fields, trace id, creation time).  ``duplicate_id`` (when given) takes
    ``_WS_DUPL_ID`` and a user's own duplicate id travels as ``source_duplicate_name``."""
    out: dict[str, str] = {"destination": destination}
    if receipt is not None:
        out["receipt"] = receipt
    if duplicate_id is not None:
        out[DUPLICATE_ID] = duplicate_id
    props = msg.application_properties
    types: list[tuple[str, str]] = []
    for k, v in props.items():
        if duplicate_id is not None and k == DUPLICATE_ID:
            k = source_duplicate_name
        if k in _NOT_SENT or k in out:
            continue
        _typed_header(out, types, k, v)
    ann = msg._ann
    if ann:
        routed = ROUTE_TO_NODE in ann
        for k, v in ann.items():
            if k in _NOT_FORWARDED or (routed and k == ORIGINAL_ADDRESS) or k in out:
                continue
            _typed_header(out, types, k, v)
    all_types = _fields(msg, out, types or None)  # a field wins over a legacy property
    if msg.durable:
        out["persistent"] = "true"
    if msg.priority != DEFAULT_PRIORITY:
        out["priority"] = str(msg.priority)
    if msg.expiration:
        out["expires"] = str(msg.expiration)
    if msg.timestamp:
        out["timestamp"] = str(msg.timestamp)
    if msg.trace_id is not None:
        out[TRACE_HEADER] = msg.trace_id
    if all_types:
        out[TYPES_HEADER] = format_types(all_types)
    return list(out.items())


def forward_destination(msg: Message, forwarding_address: str | None) -> str:
    """Where a link to another node sends ``msg``: the forwarding address, else the address
    it was sent to before store-and-forward, else its own."""
    orig = msg.annotation(ORIGINAL_ADDRESS)
    return forwarding_address or (orig if isinstance(orig, str) and orig else msg.address)


def _typed_header(
    out: dict[str, str], types: list[tuple[str, str]], k: str, v: PropertyValue
) -> None:
    if type(v) is str:
        out[k] = v
        return
    t = type_name(v)
    out[k] = typed_text(v)
    if t != STRING:
        types.append((k, t))


def _int_header(h: Mapping[str, str], name: str, lo: int, hi: int) -> int:
    text = h[name]
    s = text.strip()
    if len(s) > 24:
        raise ValueError(f"invalid {name} header {text[:30]!r}...: expected an integer")
    try:
        v = int(s)
    except ValueError:
        raise ValueError(f"invalid {name} header {text!r}: expected an integer") from None
    if v < lo or v > hi:
        raise ValueError(f"invalid {name} header {v}: expected {lo}..{hi}")
    return v


__all__ = [
    "CONTROL_HEADERS",
    "FIELD_HEADERS",
    "MESSAGE_ID_HEADER",
    "OWN_HEADERS",
    "TRACE_HEADER",
    "TYPES_HEADER",
    "delivery_headers",
    "format_types",
    "message_from_send",
    "parse_types",
    "send_headers",
]
