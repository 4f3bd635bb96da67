"""STOMP destination names <-> engine addresses.

``/queue/x`` is the anycast queue ``x``; ``/topic/x`` the multicast address ``x``; anything
else is an address used as it is (``/temp-queue/...`` and ``/exchange`` names are not special).
A store-and-forward name ``site-b::orders`` works with or without the ``/queue/`` prefix.
"""

from __future__ import annotations

from waystation.core.queue import ANYCAST, MULTICAST

QUEUE_PREFIX = "/queue/"
TOPIC_PREFIX = "/topic/"


def parse_destination(dest: str) -> tuple[str, str | None]:
    """-> (address, routing or None when the destination did not say)."""
    if dest.startswith(QUEUE_PREFIX):
        return dest[len(QUEUE_PREFIX) :], ANYCAST
    if dest.startswith(TOPIC_PREFIX):
        return dest[len(TOPIC_PREFIX) :], MULTICAST
    return dest, None


def format_destination(address: str, routing: str | None) -> str:
    if routing == ANYCAST:
        return QUEUE_PREFIX + address
    if routing == MULTICAST:
        return TOPIC_PREFIX + address
    return address
