"""The message: what producers send, queues hold and consumers receive.

A message has three kinds of data, kept apart (DESIGN §7):

* **application properties** (``properties``): the application's own, typed. A value is one
  of null (``None``), boolean (``bool``), long (``int``, 64-bit), int (:class:`Int32`),
  double (``float``), float (:class:`Float32`), string (``str``), binary (``bytes``),
  timestamp (:class:`Timestamp`, ms since the epoch) or uuid (``uuid.UUID``); the type
  survives the journal, a restart and a bridge.
* **standard fields**: ``message_id`` (the application's id; ``id`` is this node's number),
  ``correlation_id``, ``reply_to``, ``content_type``, ``content_encoding``, ``user_id``,
  ``subject``, ``group_id``, ``group_sequence``, ``timestamp`` (creation time, ms),
  ``expiration`` (absolute expiry, ms; 0 = never), plus ``trace_id`` (``"<node>/<id>"`` of
  the node where the message first entered, never changed afterwards).
* **annotations** (``annotations``): the engine's own ``_WS_*`` bookkeeping (original address
  and queue, dead-letter reason, actual expiry, store-and-forward node, divert path, the
  destination as the producer named it).

For compatibility with selectors and clients that read ``_WS_DLQ_REASON`` and friends as
properties, ``properties`` *reads* through to the annotations of a message that has any
(writes still go to the application properties); ``application_properties`` is the
application's dict alone.  A message without annotations pays nothing for this.

A message is immutable once routed except for its annotations (set by diverts,
dead-lettering and bridges before it is stored).  Delivery counts live on the queue's
reference, not here, because one multicast message sits in many queues.
"""

from __future__ import annotations

import base64
import itertools
import struct
import time
import uuid
from collections.abc import MutableMapping
from typing import Any

import msgpack

# This module is compiled (docs/building.md): the classes a compiled class cannot be (int and
# float subclasses, a MutableMapping) live in modules of their own.
from waystation.core.properties_view import DESTINATION, PropertiesView, is_private
from waystation.core.property_types import Float32, Int32, PropertyValue, Timestamp

# Well-known annotation names (the engine's reserved vocabulary).  _WS_DUPL_ID is the one
# ``_WS_`` name that is an application property: clients set it for duplicate detection.
DUPLICATE_ID = "_WS_DUPL_ID"
ORIGINAL_ADDRESS = "_WS_ORIG_ADDRESS"
ORIGINAL_QUEUE = "_WS_ORIG_QUEUE"
DEAD_LETTER_REASON = "_WS_DLQ_REASON"
DEAD_LETTER_DETAIL = "_WS_DLQ_DETAIL"
ACTUAL_EXPIRY = "_WS_ACTUAL_EXPIRY"
GROUP_ID = "_WS_GROUP_ID"  # legacy: a group id given as a property (see Message.group)
ROUTE_TO_NODE = "_WS_ROUTE_TO_NODE"
DIVERT_PATH = "_WS_DIVERT_PATH"
# the nodes that stored and forwarded a message towards another node, in order ("a,b"): a node
# that finds itself there dead-letters the message as a route loop
ROUTE_PATH = "_WS_ROUTE_PATH"
# the destination as the producer named it (DESTINATION) and the adapters' private
# annotations (PRIVATE_PREFIX): core/properties_view.py, which hides them from ``properties``
RETAINED = "_WS_P_RETAINED"  # a retained message handed to a new subscription

# the annotations (the first journal format kept them among the properties)
ANNOTATION_NAMES = frozenset(
    (
        ORIGINAL_ADDRESS,
        ORIGINAL_QUEUE,
        DEAD_LETTER_REASON,
        DEAD_LETTER_DETAIL,
        ACTUAL_EXPIRY,
        ROUTE_TO_NODE,
        DIVERT_PATH,
        DESTINATION,
    )
)

DEFAULT_PRIORITY = 4

# -- property types ------------------------------------------------------------------------
NULL, BOOLEAN, INT, LONG, FLOAT, DOUBLE, STRING, BINARY, TIMESTAMP, UUID = (
    "null",
    "bool",
    "int",
    "long",
    "float",
    "double",
    "string",
    "binary",
    "timestamp",
    "uuid",
)
TYPE_NAMES = (NULL, BOOLEAN, INT, LONG, FLOAT, DOUBLE, STRING, BINARY, TIMESTAMP, UUID)
_TYPE_OF: dict[type, str] = {
    type(None): NULL,
    bool: BOOLEAN,
    Int32: INT,
    int: LONG,
    Float32: FLOAT,
    float: DOUBLE,
    str: STRING,
    bytes: BINARY,
    Timestamp: TIMESTAMP,
    uuid.UUID: UUID,
}


def type_name(v: object) -> str:
    """The property type of ``v`` (one of TYPE_NAMES); TypeError for anything else."""
    t = _TYPE_OF.get(type(v))
    if t is not None:
        return t
    for cls, name in _TYPE_OF.items():  # a subclass (an IntEnum, a str subclass)
        if cls is not type(None) and isinstance(v, cls):
            return name
    raise TypeError(f"{type(v).__name__} is not a message property type")


def property_text(v: PropertyValue) -> str:
    """A property value as text, for protocols whose headers are strings.  With its
    :func:`type_name` it turns back into the same value by :func:`parse_typed`."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(float(v))
    return str(int(v)) if isinstance(v, int) else str(v)


def typed_text(v: PropertyValue) -> str:
    """Like :func:`property_text`, but binary is base64, so any bytes survive a text hop."""
    if isinstance(v, bytes):
        return base64.b64encode(v).decode("ascii")
    return property_text(v)


_MAX_TYPED_TEXT = 64  # characters of a number, boolean or uuid: longer text is refused early


def parse_typed(type_: str, text: str) -> PropertyValue:
    """``text`` (as made by :func:`typed_text`) as a value of property type ``type_``.

    ValueError, naming the type and the expected form, for text that is not such a value;
    the cost is bounded by the text's length (numbers longer than 64 characters are refused
    before conversion)."""
    if type_ == STRING:
        return text
    if type_ == BINARY:
        try:
            return base64.b64decode(text.encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError):
            raise ValueError(f"{text[:40]!r} is not base64 (binary)") from None
    if type_ == NULL:
        return None
    if type_ not in TYPE_NAMES:
        raise ValueError(
            f"unknown property type {type_!r}: expected one of {', '.join(TYPE_NAMES)}"
        )
    s = text.strip()
    if len(s) > _MAX_TYPED_TEXT:
        raise ValueError(f"{text[:40]!r}... is too long for type {type_}")
    try:
        if type_ == BOOLEAN:
            low = s.lower()
            if low == "true":
                return True
            if low == "false":
                return False
            raise ValueError
        if type_ == INT:
            return Int32(int(s))
        if type_ == LONG:
            v = int(s)
            if not -(2**63) <= v < 2**63:
                raise ValueError
            return v
        if type_ == TIMESTAMP:
            return Timestamp(int(s))
        if type_ == FLOAT:
            return Float32(float(s))
        if type_ == DOUBLE:
            return float(s)
        return uuid.UUID(s)
    except ValueError:
        raise ValueError(f"{text!r} is not of type {type_} ({_FORMS[type_]})") from None


_FORMS = {
    BOOLEAN: "expected true or false",
    INT: "expected an integer in -2147483648..2147483647",
    LONG: "expected an integer in -2^63..2^63-1",
    TIMESTAMP: "expected milliseconds since the epoch",
    FLOAT: "expected a number within 32-bit float range",
    DOUBLE: "expected a number",
    UUID: "expected a UUID like 123e4567-e89b-12d3-a456-426614174000",
}


def now_ms() -> int:
    return int(time.time() * 1000)


class IdGenerator:
    """Unique, increasing 64-bit ids that stay above every id seen before a restart."""

    def __init__(self, floor: int = 0) -> None:
        start = max(floor + 1, now_ms() << 16)
        self._counter = itertools.count(start)

    def raise_floor(self, floor: int) -> None:
        nxt = next(self._counter)
        self._counter = itertools.count(max(nxt, floor + 1))

    def __call__(self) -> int:
        return next(self._counter)


# standard fields, in journal order
STANDARD_FIELDS = (
    "message_id",
    "correlation_id",
    "reply_to",
    "content_type",
    "content_encoding",
    "user_id",
    "subject",
    "group_id",
    "group_sequence",
    "trace_id",
)


class Message:
    """One message.  Positional arguments as before: ``Message(id, address, body,
    properties, durable, priority, timestamp, expiration, scheduled)``; annotations and
    standard fields are keyword-only."""

    __slots__ = (
        "id",
        "address",
        "body",
        "_props",
        "durable",
        "priority",
        "timestamp",
        "expiration",
        "scheduled",
        "_ann",
        "_std",
        "trace_id",
        "_size",
    )

    def __init__(
        self,
        id: int,
        address: str,
        body: bytes = b"",
        properties: dict[str, PropertyValue] | None = None,
        durable: bool = False,
        priority: int = DEFAULT_PRIORITY,
        timestamp: int = 0,
        expiration: int = 0,  # absolute ms since the epoch; 0 = never
        scheduled: int = 0,  # absolute ms since the epoch before which it is not delivered
        *,
        annotations: dict[str, PropertyValue] | None = None,
        trace_id: str | None = None,
        **fields: PropertyValue,
    ) -> None:
        """``fields``: standard fields by name (``message_id=...``, ``content_type=...``)."""
        self.id = id
        self.address = address
        self.body = body
        self._props = properties if properties is not None else {}
        self.durable = durable
        self.priority = priority
        self.timestamp = timestamp
        self.expiration = expiration
        self.scheduled = scheduled
        self._ann = annotations
        self._std: list[PropertyValue] | None = None  # the standard fields, when any is set
        self.trace_id = trace_id
        self._size = 0
        if fields:
            for name, value in fields.items():
                if name not in FIELD_INDEX:
                    raise TypeError(f"Message has no standard field {name!r}")
                setattr(self, name, value)

    def has_fields(self) -> bool:
        """Whether any standard field (apart from the trace id) was ever set: lets a
        protocol mapping skip them all with one test."""
        return self._std is not None

    # -- standard fields: kept in ``_std`` (one slot, None until one is set), so a message
    # without any costs one assignment, and a mapping skips them all with one test
    def _set_field(self, index: int, value: PropertyValue) -> None:
        s = self._std
        if s is None:
            if value is None:
                return
            s = self._std = [None] * len(FIELD_INDEX)
        s[index] = value

    @property
    def message_id(self) -> PropertyValue:
        s = self._std
        return s[0] if s is not None else None

    @message_id.setter
    def message_id(self, value: PropertyValue) -> None:
        self._set_field(0, value)

    @property
    def correlation_id(self) -> PropertyValue:
        s = self._std
        return s[1] if s is not None else None

    @correlation_id.setter
    def correlation_id(self, value: PropertyValue) -> None:
        self._set_field(1, value)

    @property
    def reply_to(self) -> str | None:
        s = self._std
        return s[2] if s is not None else None  # type: ignore[return-value]

    @reply_to.setter
    def reply_to(self, value: str | None) -> None:
        self._set_field(2, value)

    @property
    def content_type(self) -> str | None:
        s = self._std
        return s[3] if s is not None else None  # type: ignore[return-value]

    @content_type.setter
    def content_type(self, value: str | None) -> None:
        self._set_field(3, value)

    @property
    def content_encoding(self) -> str | None:
        s = self._std
        return s[4] if s is not None else None  # type: ignore[return-value]

    @content_encoding.setter
    def content_encoding(self, value: str | None) -> None:
        self._set_field(4, value)

    @property
    def user_id(self) -> str | None:
        s = self._std
        return s[5] if s is not None else None  # type: ignore[return-value]

    @user_id.setter
    def user_id(self, value: str | None) -> None:
        self._set_field(5, value)

    @property
    def subject(self) -> str | None:
        s = self._std
        return s[6] if s is not None else None  # type: ignore[return-value]

    @subject.setter
    def subject(self, value: str | None) -> None:
        self._set_field(6, value)

    @property
    def group_id(self) -> str | None:
        s = self._std
        return s[7] if s is not None else None  # type: ignore[return-value]

    @group_id.setter
    def group_id(self, value: str | None) -> None:
        self._set_field(7, value)

    @property
    def group_sequence(self) -> int | None:
        s = self._std
        return s[8] if s is not None else None  # type: ignore[return-value]

    @group_sequence.setter
    def group_sequence(self, value: int | None) -> None:
        self._set_field(8, value)

    # -- the three kinds of data ----------------------------------------------------------
    @property
    def properties(self) -> MutableMapping[str, PropertyValue]:
        """The application properties, reading through to visible annotations (see module
        doc).  Writes go to the application properties."""
        a = self._ann
        if not a or all(is_private(k) for k in a):
            return self._props
        return PropertiesView(self._props, a)

    @properties.setter
    def properties(self, value: dict[str, PropertyValue]) -> None:
        self._props = value

    @property
    def application_properties(self) -> dict[str, PropertyValue]:
        """The application's properties alone (no annotations)."""
        return self._props

    @property
    def annotations(self) -> dict[str, PropertyValue]:
        """The engine's ``_WS_*`` annotations (made on first use)."""
        a = self._ann
        if a is None:
            a = self._ann = {}
        return a

    def annotation(self, name: str) -> PropertyValue:
        a = self._ann
        return a.get(name) if a else None

    def get_property(self, name: str) -> PropertyValue:
        """``properties.get(name)`` without making a view: one lookup for callers that ask
        every message for one name (a last-value key, a group)."""
        p = self._props
        v = p.get(name)
        if v is None:
            a = self._ann
            if a and not is_private(name) and name not in p:
                return a.get(name)
        return v

    def group(self) -> PropertyValue:
        """The message group: the ``group_id`` field, or a legacy ``_WS_GROUP_ID`` property."""
        s = self._std  # read directly: the queue asks for every message it hands out
        if s is not None:
            g = s[7]  # group_id (see STANDARD_FIELDS)
            if g is not None:
                return g
        p = self._props
        return p.get(GROUP_ID) if p else None

    # -- sizes, expiry, copies --------------------------------------------------------------
    def size(self) -> int:
        """Approximate memory size, used for address size limits.  Computed once, so memory
        accounting stays consistent even if properties change later."""
        n = self._size
        if n:
            return n
        n = 64 + len(self.body) + len(self.address)
        for k, v in self._props.items():
            n += len(k) + (len(v) if isinstance(v, (str, bytes)) else 8)
        a = self._ann
        if a:
            for k, v in a.items():
                n += len(k) + (len(v) if isinstance(v, (str, bytes)) else 8)
        t = self.trace_id
        if t is not None:
            n += len(t)
        self._size = n
        return n

    def expired(self, at_ms: int | None = None) -> bool:
        return (
            self.expiration != 0 and (at_ms if at_ms is not None else now_ms()) >= self.expiration
        )

    def copy(self, new_id: int, address: str | None = None) -> Message:
        """A new message with every field, property and annotation (the trace id too)."""
        a = self._ann
        m = Message(
            new_id,
            self.address if address is None else address,
            self.body,
            dict(self._props),
            self.durable,
            self.priority,
            self.timestamp,
            self.expiration,
            self.scheduled,
            annotations=dict(a) if a else None,
            trace_id=self.trace_id,
        )
        if self._std is not None:
            m._std = list(self._std)
        return m

    def duplicate_id(self) -> str | bytes | None:
        props = self._props
        if not props:
            return None
        get = props.get
        v = get(DUPLICATE_ID)
        if v is None:
            v = get("_HQ_DUPL_ID")
            if v is None:
                v = get("_AMQ_DUPL_ID")
                if v is None:
                    return None
        return v if isinstance(v, (str, bytes)) else str(v)

    def __repr__(self) -> str:
        return (
            f"Message(id={self.id}, address={self.address!r}, body={len(self.body)} bytes, "
            f"properties={self._props!r}, annotations={self._ann!r}, trace_id={self.trace_id!r})"
        )

    # -- persistence -------------------------------------------------------------------
    def encode(self) -> bytes:
        """The journal record: a list of 12 (the 9 of the first format, then annotations,
        trace id, and the other standard fields or None).  Raises OverflowError, ValueError
        or TypeError for a value that cannot be stored."""
        return _pack(
            [
                self.id,
                self.address,
                self.body,
                self._props,
                self.durable,
                self.priority,
                self.timestamp,
                self.expiration,
                self.scheduled,
                self._ann or None,
                self.trace_id,
                self._std,
            ]
        )

    @staticmethod
    def decode(data: bytes) -> Message:
        """A journal record of either format (9: before typed messages; 12: now)."""
        t = msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext_hook)
        m = Message(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8])
        if len(t) == 9:  # the first format kept annotations among the properties
            props = t[3]
            moved = [k for k in props if k in ANNOTATION_NAMES] if props else None
            if moved:
                m._ann = {k: props.pop(k) for k in moved}
        else:
            if t[9]:
                m._ann = t[9]
            m.trace_id = t[10]
            std = t[11]
            if std:
                if not isinstance(std, list) or len(std) != len(FIELD_INDEX):
                    raise ValueError(f"standard fields {std!r}: expected {len(FIELD_INDEX)}")
                m._std = std
        return m


#: each standard field's place in a message's ``_std`` list (trace_id has a slot of its own),
#: for mappings that read every field of a message on the hot path
FIELD_INDEX = {name: i for i, name in enumerate(STANDARD_FIELDS[:-1])}


assert FIELD_INDEX["group_id"] == 7  # Message.group reads it by position


# -- msgpack: the types it cannot tell apart travel as ext types ----------------------------
EXT_INT32, EXT_FLOAT32, EXT_TIMESTAMP, EXT_UUID = 1, 2, 3, 4


def _default(obj: Any) -> Any:
    """Called by the packer only for values that are not exactly a msgpack type."""
    t = type(obj)
    if t is Int32:
        return msgpack.ExtType(EXT_INT32, struct.pack(">i", obj))
    if t is Float32:
        return msgpack.ExtType(EXT_FLOAT32, struct.pack(">f", obj))
    if t is Timestamp:
        return msgpack.ExtType(EXT_TIMESTAMP, struct.pack(">q", obj))
    if t is uuid.UUID:
        return msgpack.ExtType(EXT_UUID, obj.bytes)
    # other subclasses (an IntEnum, a str subclass, a tuple) as their base type
    if isinstance(obj, bool):
        return bool(obj)
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, str):
        return str.__str__(obj)
    if isinstance(obj, bytes):
        return bytes(obj)
    if isinstance(obj, (list, tuple)):
        return list(obj)
    if isinstance(obj, dict):
        return dict(obj)
    raise TypeError(f"{t.__name__} is not a message property type")


def _ext_hook(code: int, data: bytes) -> object:
    if code == EXT_INT32:
        return Int32(struct.unpack(">i", data)[0])
    if code == EXT_FLOAT32:
        return Float32(struct.unpack(">f", data)[0])
    if code == EXT_TIMESTAMP:
        return Timestamp(struct.unpack(">q", data)[0])
    if code == EXT_UUID:
        return uuid.UUID(bytes=data)
    return msgpack.ExtType(code, data)


_packer = msgpack.Packer(use_bin_type=True, strict_types=True, default=_default)
_pack = _packer.pack
