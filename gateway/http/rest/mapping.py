"""HTTP headers <-> message properties, and the body as raw bytes with its Content-Type.

Into a message (a POST):

- every end-to-end request header becomes the property ``http_`` + its lower-cased name with
  ``-`` turned into ``$`` (HornetQ's convention, so selectors can say
  ``http_x$order = '42'``); transport and hop-by-hop headers (Host, Content-Length,
  Connection, Authorization, Accept-Wait, User-Agent, Accept*, X-Forwarded-*, ...) are not
  copied;
- ``Content-Type`` is ALSO the message's ``content_type`` standard field (which a STOMP
  consumer gets as ``content-type:``, with the exact body bytes): see
  :func:`fields_from_properties`; every property is a string;
- a header value that is not UTF-8 (aiohttp hands its bytes over as surrogates) is refused
  with 400 naming the header: the store keeps text as UTF-8;
- ``ws-types`` types headers as in STOMP (``ws-types: count=int,urgent=bool``): each header
  it names becomes the property of that bare name (no ``http_``), of that type; a value that
  does not parse as its type is refused with 400.

Out of a message (a pull answer or a push request):

- ``Content-Type`` is the ``content_type`` field (or, for messages stored before it was a
  field, the ``content-type`` property, or ``http_content$type``), else
  ``application/octet-stream``; the body is the stored bytes, unchanged;
- the other standard fields are headers named as in STOMP (``correlation-id``, ``reply-to``,
  ``user-id``, ``subject``, ``amqp-message-id``, ``JMSXGroupID``,
  ``JMSXGroupSeq``) and the trace id is ``ws-trace-id``; typed values are sent as text;
- a property ``http_a$b`` is the header ``a-b`` (what was posted comes back as posted);
- any other property (a STOMP header, an engine annotation such as ``_WS_DLQ_REASON``) is a
  header of the same name when that name is a valid HTTP token and not one the server sets
  itself (framing, ``Location``, ``Link``, the ``msg-*`` links...); values with line breaks are
  left out; ``ws-types`` names each of them with its type (strings too), so a POST of the same
  headers recreates the same properties;
- ``msg-delivery-count`` says which delivery attempt this is (2 and up: redelivered).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from aiohttp import web

from waystation.core.message import (
    STRING,
    Message,
    PropertyValue,
    parse_typed,
    property_text,
    type_name,
    typed_text,
)
from waystation.gateway.http import context
from waystation.gateway.http.rest.errors import fail
from waystation.gateway.stomp.mapping import TYPES_HEADER, format_types, parse_types

CONTENT_TYPE = "content-type"
HTTP_PREFIX = "http_"
DEFAULT_TYPE = "application/octet-stream"
DELIVERY_COUNT = "msg-delivery-count"

# request headers that describe the transport, not the message
_NOT_COPIED = frozenset(
    (
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-authorization",
        "proxy-authenticate",
        "proxy-connection",
        "authorization",
        "accept-wait",
        "user-agent",
        "accept",
        "accept-encoding",
        "accept-language",
        "accept-charset",
        "expect",
        "cookie",
        "via",
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-forwarded-port",
        "content-encoding",
        "cache-control",
        "pragma",
        "origin",
        "referer",
        "date",
        "if-match",
        "if-none-match",
        "if-modified-since",
        "if-unmodified-since",
    )
)
# response headers the server sets itself: never taken from a property
_RESERVED = frozenset(
    (
        "content-type",
        "content-length",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "date",
        "server",
        "location",
        "link",
        "retry-after",
        "www-authenticate",
        "set-cookie",
        "host",
        "authorization",
        "expect",
        DELIVERY_COUNT,
    )
)
# standard fields as response headers, named as in STOMP (the trace id is added after them)
_FIELD_HEADERS = (
    ("amqp-message-id", "message_id"),
    ("correlation-id", "correlation_id"),
    ("reply-to", "reply_to"),
    ("user-id", "user_id"),
    ("subject", "subject"),
    ("JMSXGroupID", "group_id"),
    ("JMSXGroupSeq", "group_sequence"),
)
TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


def properties_from_request(headers: Iterable[tuple[str, str]]) -> dict[str, PropertyValue]:
    """Message properties for the headers of a POST (see the module doc)."""
    headers = list(headers)
    typed = _typed_properties(headers)
    props: dict[str, PropertyValue] = {}
    for name, value in headers:
        low = name.lower()
        if low in _NOT_COPIED or low.startswith("sec-") or low == TYPES_HEADER:
            continue
        if low in typed:
            key, type_ = typed[low]
            try:
                props[key] = parse_typed(type_, value)
            except ValueError as e:
                raise fail(web.HTTPBadRequest, f"header {name!r}: {e}") from None
            continue
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise fail(
                    web.HTTPBadRequest, f"header {name!r}: the value is not valid UTF-8"
                ) from None
        key = HTTP_PREFIX + low.replace("-", "$")
        old = props.get(key)  # a repeated header: its values joined, as HTTP allows
        props[key] = value if old is None else f"{property_text(old)}, {value}"
        if low == CONTENT_TYPE:
            props[CONTENT_TYPE] = props[key]
    return props


def _typed_properties(headers: list[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    """The headers ``ws-types`` names, by lower-cased name: (property name, type)."""
    out: dict[str, tuple[str, str]] = {}
    for name, value in headers:
        if name.lower() == TYPES_HEADER:
            try:
                pairs = parse_types(value)
            except ValueError as e:
                raise fail(web.HTTPBadRequest, str(e)) from None
            out.update((n.lower(), (n, t)) for n, t in pairs)
    return out


def fields_from_properties(msg: Message) -> None:
    """Move what :func:`properties_from_request` stored as ``content-type`` into the
    ``content_type`` field (``http_content$type`` stays, a string property as posted)."""
    v = msg.application_properties.pop(CONTENT_TYPE, None)
    if isinstance(v, str):
        msg.content_type = v


def content_type(
    props: Mapping[str, PropertyValue], default: str = DEFAULT_TYPE, field: str | None = None
) -> str:
    v: PropertyValue = field if field is not None else props.get(CONTENT_TYPE)
    if v is None:
        v = props.get(HTTP_PREFIX + "content$type")
    text = property_text(v) if v is not None else ""
    return text if text and clean_value(text) else default


def clean_value(value: str) -> bool:
    """Whether ``value`` can be a header value (no line break, no NUL)."""
    return not any(c in value for c in "\r\n\x00")


def message_headers(msg: Message, *, default_type: str = DEFAULT_TYPE) -> dict[str, str]:
    """HTTP headers describing ``msg`` (Content-Type first, then its properties)."""
    props = msg.properties
    headers = {"Content-Type": content_type(props, default_type, msg.content_type)}
    types: list[tuple[str, str]] = []
    for k, v in props.items():
        if v is None:
            continue
        name = k[len(HTTP_PREFIX) :].replace("$", "-") if k.startswith(HTTP_PREFIX) else k
        if (
            not name
            or name.lower() in _RESERVED
            or name.startswith("msg-")
            or not TOKEN.match(name)
        ):
            continue
        t = type_name(v)
        text = typed_text(v) if t != STRING else property_text(v)
        if clean_value(text):
            headers[name] = text
            if name is k:  # not posted over REST: typed, so a POST recreates it
                types.append((name, t))
    if types:
        headers[TYPES_HEADER] = format_types(types)
    if msg.has_fields():  # one test skips them all for a message that has none
        for name, field in _FIELD_HEADERS:
            value = getattr(msg, field)
            if value is not None:
                text = property_text(value)
                if clean_value(text):
                    headers[name] = text
    if msg.trace_id is not None and clean_value(msg.trace_id):
        headers["ws-trace-id"] = msg.trace_id
    return headers


async def read_body(request: web.Request, limit: int) -> bytes:
    """The request body, or 413 when it is larger than ``limit`` bytes."""
    body = await context.read_body(request, limit)
    if body is None:
        raise fail(
            web.HTTPRequestEntityTooLarge, f"body is larger than max_body_size ({limit} bytes)"
        )
    return body


# -- query and form parameters --------------------------------------------------------------
def parse_bool(name: str, value: str | None, default: bool) -> bool:
    if value is None:
        return default
    v = value.strip().lower()
    if v in ("true", "1", "yes", "on"):
        return True
    if v in ("false", "0", "no", "off"):
        return False
    raise fail(web.HTTPBadRequest, f"invalid {name} {value!r}: expected true or false")


def parse_int(
    name: str, value: str | None, lo: int | None = None, hi: int | None = None
) -> int | None:
    if value is None:
        return None
    try:
        n = int(value.strip())
    except ValueError:
        raise fail(web.HTTPBadRequest, f"invalid {name} {value!r}: expected an integer") from None
    if (lo is not None and n < lo) or (hi is not None and n > hi):
        span = f"{lo if lo is not None else ''}..{hi if hi is not None else ''}"
        raise fail(web.HTTPBadRequest, f"invalid {name} {n}: expected {span}")
    return n


def parse_seconds(name: str, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        s = float(value.strip())
    except ValueError:
        raise fail(web.HTTPBadRequest, f"invalid {name} {value!r}: expected seconds") from None
    if not s >= 0 or s == float("inf"):
        raise fail(web.HTTPBadRequest, f"invalid {name} {value!r}: expected seconds >= 0")
    return s


__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_TYPE",
    "DELIVERY_COUNT",
    "TOKEN",
    "clean_value",
    "content_type",
    "fields_from_properties",
    "message_headers",
    "parse_bool",
    "parse_int",
    "parse_seconds",
    "properties_from_request",
    "read_body",
]
