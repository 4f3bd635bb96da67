"""The application properties of an annotated message, with its annotations readable behind them.

Kept out of ``core/message.py`` (which uses it) because that module is compiled with mypyc,
and a compiled class cannot be a ``MutableMapping``.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

from waystation.core.property_types import PropertyValue

# the destination as the producer named it (e.g. a STOMP SEND's ``destination``), so a
# consumer can be shown the same string; private: not visible through ``properties``
DESTINATION = "_WS_DESTINATION"
# Private annotations: what only adapters read (how AMQP sections arrived, MQTT flags, the
# retained mark).  They travel with the message (store, bridges) but are never shown among the
# properties; an adapter names its own with this prefix.
PRIVATE_PREFIX = "_WS_P_"


def is_private(name: str) -> bool:
    return name == DESTINATION or name.startswith(PRIVATE_PREFIX)


class PropertiesView(MutableMapping[str, PropertyValue]):
    """Application properties with the annotations readable behind them (all but the private
    ones: ``_WS_DESTINATION`` and ``_WS_P_*``); writes and deletes go to the properties.  A live view: made per
    read of ``Message.properties`` on an annotated message, so it copies nothing."""

    __slots__ = ("_p", "_a")

    def __init__(self, props: dict[str, PropertyValue], ann: dict[str, PropertyValue]) -> None:
        self._p = props
        self._a = ann

    def __getitem__(self, key: str) -> PropertyValue:
        p = self._p
        if key in p:
            return p[key]
        if not is_private(key):
            return self._a[key]
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:  # one lookup, not try/except
        p = self._p
        if key in p:
            return p[key]
        if not is_private(key):
            return self._a.get(key, default)
        return default

    def __contains__(self, key: object) -> bool:
        return key in self._p or (isinstance(key, str) and not is_private(key) and key in self._a)

    def __setitem__(self, key: str, value: PropertyValue) -> None:
        self._p[key] = value

    def __delitem__(self, key: str) -> None:
        del self._p[key]  # an annotation cannot be deleted through the properties

    def __iter__(self) -> Iterator[str]:
        p = self._p
        yield from p
        for k in self._a:
            if k not in p and not is_private(k):
                yield k

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self)!r})"
