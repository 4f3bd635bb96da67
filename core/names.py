"""The one rule for names a client may use, whatever its protocol.

The engine's own address syntax (``core.address.validate_name``: dot-separated words, ``*`` and
``#`` only as whole words) plus what every adapter, URL and operator can live with: at most
:data:`MAX_NAME` characters, no white space, control characters or ``/``.  Two kinds of engine
queues are the node's own and never a client's: the store-and-forward queues ``sf.<node>`` a
bridge drains, and ``node::queue`` names, which only a send may use (to leave for another node).
"""

from __future__ import annotations

from waystation.core.address import NODE_SEPARATOR, InvalidAddress, validate_name

MAX_NAME = 255
SF_PREFIX = "sf."


def name_problem(name: str, *, remote: bool = False, wildcards: bool = False) -> str | None:
    """Why a client may not use ``name``, or None.  ``remote``: a send, where ``node::queue``
    is allowed; ``wildcards``: a subscription, where ``*`` and ``#`` words are allowed."""
    if len(name) > MAX_NAME:
        return f"name of {len(name)} characters is longer than {MAX_NAME}"
    if any(c.isspace() or not c.isprintable() for c in name) or "/" in name:
        return f"{name!r} contains '/', white space or a control character"
    local = name
    if NODE_SEPARATOR in name:
        node, _, local = name.partition(NODE_SEPARATOR)
        if not remote:
            return (
                f"{name!r} names another node ('{NODE_SEPARATOR}'): only a send may use a "
                "store-and-forward address"
            )
        if not node or not local or NODE_SEPARATOR in local:
            return f"{name!r}: expected one 'node{NODE_SEPARATOR}queue'"
    if local.startswith(SF_PREFIX):
        return (
            f"{name!r}: names starting with {SF_PREFIX!r} are the node's store-and-forward queues"
        )
    try:
        validate_name(local, allow_wildcards=wildcards)
    except InvalidAddress as e:
        return str(e)
    return None


__all__ = ["MAX_NAME", "SF_PREFIX", "name_problem"]
