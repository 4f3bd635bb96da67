"""How the admin API shows a message: JSON of its fields, properties and annotations."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from waystation.core.message import (
    DEAD_LETTER_DETAIL,
    DEAD_LETTER_REASON,
    ORIGINAL_ADDRESS,
    ORIGINAL_QUEUE,
    STANDARD_FIELDS,
    Message,
)

BODY_PREVIEW = 4096  # bytes of a body shown; the rest is cut


def jsonable(v: object) -> Any:
    """A property value in JSON: bytes as base64 text, UUIDs and others as strings."""
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, bytes | bytearray | memoryview):
        return {"base64": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, uuid.UUID):
        return str(v)
    return str(v)


def message_json(m: Message) -> dict[str, object]:
    body = m.body[:BODY_PREVIEW]
    try:
        text: str | None = body.decode()
    except UnicodeDecodeError:
        text = None
    fields = {f: jsonable(getattr(m, f, None)) for f in STANDARD_FIELDS}
    ann = m.annotations if m._ann else {}
    return {
        "id": m.id,
        "id_text": str(m.id),  # ids pass 2**53: a JavaScript number would round them
        "address": m.address,
        "durable": m.durable,
        "priority": m.priority,
        "timestamp": m.timestamp,
        "expiration": m.expiration,
        "scheduled": m.scheduled,
        "size": len(m.body),
        "fields": {k: v for k, v in fields.items() if v is not None},
        "properties": {k: jsonable(v) for k, v in m.application_properties.items()},
        "annotations": {k: jsonable(v) for k, v in ann.items()},
        "original_address": jsonable(m.annotation(ORIGINAL_ADDRESS)),
        "original_queue": jsonable(m.annotation(ORIGINAL_QUEUE)),
        "dead_letter_reason": jsonable(m.annotation(DEAD_LETTER_REASON)),
        "dead_letter_detail": jsonable(m.annotation(DEAD_LETTER_DETAIL)),
        "body": text,
        "body_base64": None if text is not None else base64.b64encode(body).decode(),
        "truncated": len(m.body) > BODY_PREVIEW,
    }


__all__ = ["jsonable", "message_json"]
