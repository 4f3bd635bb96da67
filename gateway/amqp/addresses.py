"""AMQP terminus addresses and capabilities -> core addresses, routings and sources.

``/queue/x`` is the anycast queue ``x``, ``/topic/x`` the multicast address ``x`` (the
STOMP forms, so both protocols name one address alike); a plain name takes its routing from
the terminus capabilities ``queue`` / ``topic`` or, without them, from the engine (an
existing queue is anycast, a multicast address multicast).  ``site::orders`` passes through.
"""

from __future__ import annotations

from typing import Any

from proton import Data, Terminus

from waystation.core.queue import ANYCAST, MULTICAST
from waystation.gateway.amqp.errors import decoded

QUEUE_PREFIX = "/queue/"  # the STOMP forms, so both protocols name an address alike
TOPIC_PREFIX = "/topic/"

SELECTOR_FILTER = "apache.org:selector-filter:string"
SELECTOR_CODE = 0x0000468C00000004
NO_LOCAL_FILTER = "apache.org:no-local-filter:list"
NO_LOCAL_CODE = 0x0000468C00000003


def parse_address(name: str, capabilities: frozenset[str] = frozenset()) -> tuple[str, str | None]:
    """-> (core address, routing or None for the engine to decide)."""
    if name.startswith(QUEUE_PREFIX):
        return name[len(QUEUE_PREFIX) :], ANYCAST
    if name.startswith(TOPIC_PREFIX):
        return name[len(TOPIC_PREFIX) :], MULTICAST
    if "topic" in capabilities:
        return name, MULTICAST
    if "queue" in capabilities:
        return name, ANYCAST
    return name, None


def data_object(d: Data) -> Any:
    """The one value a proton ``Data`` holds (or None)."""
    d.rewind()
    if not d.next():
        return None
    return d.get_object()


def capabilities(d: Data) -> frozenset[str]:
    v = data_object(d)
    if v is None:
        return frozenset()
    if isinstance(v, str):
        return frozenset((str(v),))
    try:
        return frozenset(str(x) for x in v)
    except TypeError:
        return frozenset()


def filters(d: Data) -> tuple[str | None, bool, list[str]]:
    """The source's filter set -> (selector, no-local, names of filters not understood)."""
    v = data_object(d)
    selector: str | None = None
    no_local = False
    unknown: list[str] = []
    if not isinstance(v, dict):
        return None, False, []
    for key, f in v.items():
        desc = getattr(f, "descriptor", None)
        value = getattr(f, "value", None)
        if desc in (SELECTOR_FILTER, SELECTOR_CODE):
            if not isinstance(value, str):
                raise ValueError(f"selector filter {key!r} does not hold a string")
            selector = str(value)
        elif desc in (NO_LOCAL_FILTER, NO_LOCAL_CODE):
            no_local = True
        else:
            unknown.append(str(key))
    return selector, no_local, unknown


def source_fields(src: Terminus) -> tuple[frozenset[str], str | None, bool, str | None]:
    """A source terminus's (capabilities, selector, no-local, address), each read through
    :func:`~waystation.gateway.amqp.errors.decoded`: a DecodeError naming the field when
    the client's bytes are not UTF-8 (ASCII for symbols)."""
    caps = decoded(lambda: capabilities(src.capabilities), "attach: source capabilities")
    selector, no_local, _unknown = decoded(lambda: filters(src.filter), "attach: source filter")
    address = decoded(lambda: src.address, "attach: source address")
    return caps, selector, no_local, address


__all__ = ["capabilities", "data_object", "filters", "parse_address", "source_fields"]
