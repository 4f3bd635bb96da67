"""MQTT packets, reason codes, errors and topic rules, shared by the MQTT parser and encoder.

Packets are plain slotted dataclasses so that the adapter and the tests can build them in
one line and compare them with ``==``; v5 properties are a ``dict`` keyed by the spec's
names in snake_case (see :mod:`waystation.wire.mqtt_properties`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

__all__ = [
    "MQTT_31",
    "MQTT_311",
    "MQTT_5",
    "Auth",
    "ConnAck",
    "Connect",
    "Disconnect",
    "MalformedPacket",
    "MqttError",
    "Packet",
    "PingReq",
    "PingResp",
    "ProtocolError",
    "PubAck",
    "PubComp",
    "PubRec",
    "PubRel",
    "Publish",
    "ReasonCode",
    "SubAck",
    "Subscribe",
    "SubscriptionRequest",
    "UnsubAck",
    "Unsubscribe",
    "Will",
    "validate_topic_filter",
    "validate_topic_name",
]

MQTT_31 = 3  # protocol level of MQTT 3.1 ("MQIsdp"), read as 3.1.1
MQTT_311 = 4
MQTT_5 = 5

Properties = dict[str, Any]


class ReasonCode(IntEnum):
    """MQTT 5 reason codes (spec 2.4); several names share a value, as in the spec."""

    SUCCESS = 0x00
    NORMAL_DISCONNECTION = 0x00
    GRANTED_QOS_0 = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


class MqttError(Exception):
    """Base of the codec's errors: the connection must close; ``reason_code`` is what a v5
    DISCONNECT (or CONNACK, before the session is up) should carry."""

    def __init__(self, reason_code: int, message: str) -> None:
        super().__init__(message)
        self.reason_code = reason_code
        self.message = message
        self.packets: list[Packet] = []  # decoded before the error in the same feed

    def __repr__(self) -> str:
        return f"{type(self).__name__}(0x{self.reason_code:02X}, {self.message!r})"


class MalformedPacket(MqttError):
    """Bytes that cannot be parsed according to the spec."""


class ProtocolError(MqttError):
    """A packet that parses but is forbidden (or a value the spec calls a Protocol Error)."""


@dataclass(slots=True)
class Will:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Connect:
    client_id: str
    protocol_level: int = MQTT_311
    clean_start: bool = True
    keepalive: int = 60
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = field(default_factory=dict)
    protocol_name: str = "MQTT"


@dataclass(slots=True)
class ConnAck:
    reason_code: int = 0
    session_present: bool = False
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Publish:
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class PubAck:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class PubRec:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class PubRel:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class PubComp:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class SubscriptionRequest:
    filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(slots=True)
class Subscribe:
    packet_id: int
    subscriptions: list[SubscriptionRequest]
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class SubAck:
    packet_id: int
    reason_codes: list[int]
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Unsubscribe:
    packet_id: int
    filters: list[str]
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class UnsubAck:
    packet_id: int
    reason_codes: list[int] = field(default_factory=list)
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class PingReq:
    pass


@dataclass(slots=True)
class PingResp:
    pass


@dataclass(slots=True)
class Disconnect:
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Auth:
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)


Packet = (
    Connect | ConnAck | Publish | PubAck | PubRec | PubRel | PubComp | Subscribe | SubAck
    | Unsubscribe | UnsubAck | PingReq | PingResp | Disconnect | Auth
)  # fmt: skip


def _check_topic_text(text: str, what: str, code: int) -> None:
    if not text:
        raise ProtocolError(code, f"[MQTT-4.7.3-1] a {what} must be at least one character long")
    if "\x00" in text:
        raise ProtocolError(code, f"[MQTT-4.7.3-2] a {what} must not contain U+0000")
    if len(text) > 16383 and len(text.encode("utf-8", "surrogatepass")) > 65535:
        raise ProtocolError(code, f"[MQTT-4.7.3-3] a {what} is longer than 65535 bytes")


def validate_topic_name(name: str) -> None:
    """Raise ProtocolError(0x90) unless ``name`` may be published to (no wildcards)."""
    _check_topic_text(name, "topic name", 0x90)
    if "+" in name or "#" in name:
        raise ProtocolError(
            0x90, f"[MQTT-3.3.2-2] topic name {name[:200]!r} contains a wildcard (+ or #)"
        )


def validate_topic_filter(filter: str) -> None:
    """Raise ProtocolError(0x8F) unless ``filter`` is a valid (possibly shared) filter."""
    _check_topic_text(filter, "topic filter", 0x8F)
    f = filter
    if f.startswith("$share/"):
        parts = f.split("/", 2)
        group = parts[1]
        if not group:
            raise ProtocolError(0x8F, f"[MQTT-4.8.2-1] empty share name in {f[:200]!r}")
        if "+" in group or "#" in group:
            raise ProtocolError(0x8F, f"[MQTT-4.8.2-2] share name {group[:200]!r} has + or #")
        if len(parts) < 3 or not parts[2]:
            raise ProtocolError(
                0x8F, f"[MQTT-4.8.2-2] no topic filter after share name in {f[:200]!r}"
            )
        f = parts[2]
    if "+" not in f and "#" not in f:
        return
    levels = f.split("/")
    last = len(levels) - 1
    for n, level in enumerate(levels):
        if "+" in level and level != "+":
            raise ProtocolError(
                0x8F, f"[MQTT-4.7.1-2] '+' not alone in its level in {filter[:200]!r}"
            )
        if "#" in level and (level != "#" or n != last):
            raise ProtocolError(
                0x8F, f"[MQTT-4.7.1-1] '#' not alone in the last level of {filter[:200]!r}"
            )
