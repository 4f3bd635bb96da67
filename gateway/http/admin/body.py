"""An admin request's JSON body: one object, at most 1 MiB, or a 4xx saying what is wrong."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from waystation.gateway.http.admin import guard
from waystation.gateway.http.context import read_body

MAX_BODY = 1 << 20


async def read_json(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    raw = await read_body(request, MAX_BODY)
    if raw is None:
        raise guard.error(web.HTTPRequestEntityTooLarge, "request body over 1 MiB")
    try:
        data = json.loads(raw or b"{}")
    except ValueError as e:
        raise guard.error(web.HTTPBadRequest, f"invalid JSON: {e}") from None
    if not isinstance(data, dict):
        raise guard.error(web.HTTPBadRequest, "expected a JSON object")
    return data


__all__ = ["MAX_BODY", "read_json"]
