"""The one rule between MQTT topics and core addresses, so STOMP ``/topic/a.b`` and MQTT
``a/b`` are the same address.

* Levels become words: ``a/b/c`` <-> ``a.b.c``; in filters ``+`` <-> ``*`` and ``#`` <-> ``#``.
* A level the core's name rule would refuse is escaped, reversibly, inside its word:
  ``%`` -> ``%25``, ``.`` -> ``%2E``, a ``*`` or ``#`` inside a topic level -> ``%2A`` /
  ``%23``, white space and control characters -> ``%XX`` per UTF-8 byte, and an empty level
  (``/a``, ``a//b``, ``a/``) -> the word ``%`` alone.  A first level ``sf`` (the node's
  store-and-forward prefix) is written ``%73f``.  Everything else (letters, digits, ``$``,
  ``-``, ``:``, non-ASCII letters...) is kept as is, so ordinary topics read the same on
  both sides.  Decoding turns every ``%XX`` back and leaves a ``%`` not followed by two hex
  digits as it is (an address another protocol named).
* ``$share/<group>/<filter>`` is a shared subscription: see :func:`parse_filter`.
* A filter starting with a wildcard must not match topics starting with ``$``
  [MQTT-4.7.2-1]; the core's ``#`` would, so :func:`dollar_blind` tells the session which
  subscriptions to guard.

The cache keeps the hot path (one PUBLISH, one delivery) at a dict lookup.
"""

from __future__ import annotations

import re

from waystation.core.names import MAX_NAME, name_problem

_SAFE = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_$:;,!@&=~'\"()[]{}<>|^`?"
)
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_HEX = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


class TopicError(ValueError):
    """A topic or filter with no core address (too long once escaped)."""


def _escape_char(c: str) -> str:
    if c == "%" or c == "." or c == "*" or c == "#" or c == "/" or c.isspace():
        return "".join(f"%{b:02X}" for b in c.encode())
    if not c.isprintable():
        return "".join(f"%{b:02X}" for b in c.encode())
    return c


def escape_level(level: str) -> str:
    """One MQTT level (not a wildcard) as one core word."""
    if not level:
        return "%"
    if all(c in _SAFE for c in level):
        return level
    return "".join(c if c in _SAFE else _escape_char(c) for c in level)


def _unescape_hex(m: re.Match[str]) -> str:
    raw = bytes(int(h, 16) for h in m.group(0)[1:].split("%"))
    return raw.decode("utf-8", "replace")


def unescape_word(word: str) -> str:
    if word == "%":
        return ""
    if "%" not in word:
        return word
    return _HEX.sub(_unescape_hex, word)


_to_address: dict[str, str] = {}
_to_topic: dict[str, str] = {}
_CACHE = 50_000


def topic_to_address(topic: str) -> str:
    """A topic name (no wildcards, already validated) as a core address."""
    a = _to_address.get(topic)
    if a is not None:
        return a
    levels = topic.split("/")
    words = [escape_level(w) for w in levels]
    if words[0] == "sf":
        words[0] = "%73f"
    a = ".".join(words)
    _check(a, topic, wildcards=False)
    if len(_to_address) < _CACHE:
        _to_address[topic] = a
    return a


def filter_to_pattern(topic_filter: str) -> str:
    """A topic filter (validated, no ``$share`` prefix) as a core address pattern."""
    words = []
    for level in topic_filter.split("/"):
        if level == "+":
            words.append("*")
        elif level == "#":
            words.append("#")
        else:
            words.append(escape_level(level))
    if words[0] == "sf":
        words[0] = "%73f"
    p = ".".join(words)
    _check(p, topic_filter, wildcards=True)
    return p


def address_to_topic(address: str) -> str:
    """A core address as the topic a subscriber is shown."""
    t = _to_topic.get(address)
    if t is not None:
        return t
    if "%" not in address:
        t = address.replace(".", "/")
    else:
        t = "/".join(unescape_word(w) for w in address.split("."))
    if len(_to_topic) < _CACHE:
        _to_topic[address] = t
    return t


def _check(name: str, given: str, *, wildcards: bool) -> None:
    if len(name) > MAX_NAME:
        raise TopicError(
            f"topic {given[:80]!r} is {len(name)} characters as an address; the limit is {MAX_NAME}"
        )
    why = name_problem(name, wildcards=wildcards)
    if why is not None:  # the escaping should make this impossible: say so if not
        raise TopicError(f"topic {given[:80]!r} has no address: {why}")


def parse_filter(topic_filter: str) -> tuple[str | None, str]:
    """``$share/<group>/<filter>`` -> (group, filter); anything else -> (None, filter)."""
    if topic_filter.startswith("$share/"):
        _, group, rest = topic_filter.split("/", 2)
        return group, rest
    return None, topic_filter


def dollar_blind(topic_filter: str) -> bool:
    """Whether the filter must not see ``$`` topics: it starts with a wildcard
    [MQTT-4.7.2-1]."""
    return topic_filter[:1] in ("+", "#")


__all__ = [
    "TopicError",
    "address_to_topic",
    "dollar_blind",
    "escape_level",
    "filter_to_pattern",
    "parse_filter",
    "topic_to_address",
    "unescape_word",
]
