"""Which queue, topic and subscription names REST serves.

The engine's own rules (``config.fields.address_name``, what the config file accepts: no
empty words, no wildcards) plus what a URL path segment and an operator can live with: no
white space or control characters, no ``/``, at most :data:`MAX_NAME` characters.  Two kinds
of engine queues are not REST's business and are refused by name: ``node::address`` (a
message to it would leave for another node, while a consumer would read a local queue of that
odd name) and the store-and-forward queues ``sf.<node>`` a bridge drains.
"""

from __future__ import annotations

from aiohttp import web

from waystation.config.defaults import SF_QUEUE_PREFIX
from waystation.config.fields import address_name
from waystation.core.address import NODE_SEPARATOR
from waystation.gateway.http.rest.errors import fail

MAX_NAME = 255


def name_problem(name: str) -> str | None:
    """Why ``name`` is not served over REST, or None when it is fine."""
    if NODE_SEPARATOR in name:
        return (
            f"{name!r} names another node ('{NODE_SEPARATOR}'): store-and-forward "
            "addresses are not served over REST"
        )
    if name.startswith(SF_QUEUE_PREFIX):
        return (
            f"{name!r}: names starting with {SF_QUEUE_PREFIX!r} are store-and-forward queues, "
            "not served over REST"
        )
    if len(name) > MAX_NAME:
        return f"name of {len(name)} characters is longer than {MAX_NAME}"
    if "/" in name or any(c.isspace() or not c.isprintable() for c in name):
        return f"{name!r} contains '/', white space or a control character"
    try:
        address_name(name)
    except ValueError as e:
        return str(e)
    return None


def check_name(name: str, what: str) -> str:
    """``name``, or 400 saying why it is refused."""
    why = name_problem(name)
    if why is not None:
        raise fail(web.HTTPBadRequest, f"invalid {what} name: {why}")
    return name


__all__ = ["MAX_NAME", "check_name", "name_problem"]
