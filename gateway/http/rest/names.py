"""Which queue, topic and subscription names REST serves.

The one rule every protocol shares (:func:`waystation.core.names.name_problem`: the engine's
address syntax without wildcards, at most 255 characters, no white space, control characters
or ``/``, no ``sf.*`` store-and-forward queue), checked here so a bad name is a 400 before
anything else.  REST is stricter in one way: it serves no ``node::address`` at all, not even
for a send (a message to it would leave for another node, while a consumer would read a local
queue of that odd name).
"""

from __future__ import annotations

from aiohttp import web

from waystation.core.address import NODE_SEPARATOR
from waystation.core.names import MAX_NAME
from waystation.core.names import name_problem as core_name_problem
from waystation.gateway.http.rest.errors import fail


def name_problem(name: str) -> str | None:
    """Why ``name`` is not served over REST, or None when it is fine."""
    if NODE_SEPARATOR in name and len(name) <= MAX_NAME:
        return (
            f"{name!r} names another node ('{NODE_SEPARATOR}'): store-and-forward "
            "addresses are not served over REST"
        )
    return core_name_problem(name)


def check_name(name: str, what: str) -> str:
    """``name``, or 400 saying why it is refused."""
    why = name_problem(name)
    if why is not None:
        raise fail(web.HTTPBadRequest, f"invalid {what} name: {why}")
    return name


__all__ = ["MAX_NAME", "check_name", "name_problem"]
