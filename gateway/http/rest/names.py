"""Which queue, topic and subscription names REST serves.

The one rule every protocol shares (:func:`waystation.core.names.name_problem`: the engine's
address syntax without wildcards, at most 255 characters, no white space, control characters
or ``/``, no ``sf.*`` store-and-forward queue), checked here so a bad name is a 400 before
anything else.  A ``node::queue`` name is served for sending only, as over STOMP: ``POST
/queues/site-b::orders/create`` stores the message and forwards it to node ``site-b``, and
discovery (``HEAD``/``GET``) lists just the create links.  Consuming from one, creating one,
or naming one under ``/topics`` is a 400 that says so, never a dead local queue of that name.
"""

from __future__ import annotations

from aiohttp import web

from waystation.core.address import NODE_SEPARATOR
from waystation.core.names import MAX_NAME
from waystation.core.names import name_problem as core_name_problem
from waystation.gateway.http.rest.errors import fail


def is_remote(name: str) -> bool:
    """``node::queue``: a store-and-forward address of another node."""
    return NODE_SEPARATOR in name


def name_problem(name: str, *, remote: bool = False) -> str | None:
    """Why ``name`` is not served over REST, or None when it is fine.  ``remote``: a send
    (or its discovery), where ``node::queue`` is allowed."""
    if is_remote(name) and not remote and len(name) <= MAX_NAME:
        return (
            f"{name!r} names another node ('{NODE_SEPARATOR}'): a store-and-forward address "
            f"can only be sent to (POST /queues/{name}/create), not consumed from or created"
        )
    return core_name_problem(name, remote=remote)


def check_name(name: str, what: str, *, remote: bool = False) -> str:
    """``name``, or 400 saying why it is refused."""
    why = name_problem(name, remote=remote)
    if why is not None:
        raise fail(web.HTTPBadRequest, f"invalid {what} name: {why}")
    return name


__all__ = ["MAX_NAME", "check_name", "is_remote", "name_problem"]
