"""Waystation: core/filter — the selector language (JMS 1.1 message selectors, SQL-92 subset).

Filters decide which messages enter a queue, cross a bridge, take a divert or reach a
consumer.  ``compile_filter`` parses a selector once (cached by text) into closures; a
``Filter`` then answers ``matches(message)`` with SQL three-valued logic: only TRUE matches,
FALSE and UNKNOWN (a missing property, a type mismatch, division by zero) reject.  Bad text
raises ``FilterError`` at compile time; evaluation never raises.

Choices beyond the JMS text, so callers are not surprised:

* Header identifiers (``JMSPriority``/``HQPriority``/``AMQPriority``/``WSPriority``,
  ``*Timestamp``, ``*Expiration``, ``HQDurable``, ``JMSDeliveryMode``, ``HQSize``,
  ``JMSMessageID``, ``WSAddress``) read message fields and take precedence over a property of
  the same name.  ``matches_properties`` has no message, so there they are plain keys.
* Keywords are case-insensitive, identifiers case-sensitive; identifiers are Java-style
  (letters, digits, ``_``, ``$``), so a property named ``content-type`` cannot be referenced.
* Integer literals have 64-bit range (so -2**63 itself cannot be written); hex ``0x1F`` is
  accepted; ``010`` is decimal ten.  Integer arithmetic is unbounded Python ``int``; ``/`` on
  two integers truncates toward zero like Java; any division by zero is UNKNOWN.
* Strings and booleans compare only with ``=`` and ``<>``; ``<`` on strings is UNKNOWN at run
  time, and a type error that is certain from literals (``'a' + 1``, ``5 AND x``) is refused.
* ``IN`` lists may hold numbers as well as strings (an extension); ``x IN (a, b)`` is exactly
  ``x = a OR x = b``.  ``NOT BETWEEN`` is ``NOT (BETWEEN)`` (differs only for NaN).
* ``LIKE`` matching is linear-time (no regex backtracking) since selectors come from clients.
* Limits, each reported as a FilterError of kind ``limit`` naming it, so a selector's cost
  is bounded when it is compiled (a client's subscription), not found out per message:

  - ``MAX_FILTER_LENGTH`` (8192): characters of a selector;
  - ``MAX_DEPTH`` (100): nesting depth;
  - ``MAX_LIKE_PATTERN_LENGTH`` (256): characters of one LIKE pattern;
  - ``MAX_LIKE_COST`` (32): the estimated cost of a selector's LIKE patterns together, in
    about nanoseconds per character of the value (``like.like_cost``).  A pattern anchored
    at both ends (``'abc%'``, ``'%abc'``, ``'a_c'``) costs 0; one with a part between two
    ``%`` costs 4 (``'%abc%'``: a linear search), or 8 plus that part's width when it holds
    a ``_`` (``'%a_c%'`` costs 11: tried at every position).  So a selector may hold eight
    ``'%abc%'`` patterns, or one ``'%a_c%'`` and five.  Worst case allowed: about 10 ms
    per message for 30 subscriptions on a 10 KB property value; the rest of a selector
    costs per node, not per character of a value.
"""

from typing import TYPE_CHECKING

from waystation.core.filter.errors import FilterError
from waystation.core.filter.selector import MAX_FILTER_LENGTH, Filter, compile_filter

if TYPE_CHECKING:
    from waystation.core.filter.like import MAX_LIKE_COST, MAX_LIKE_PATTERN_LENGTH
    from waystation.core.filter.parser import MAX_DEPTH


def __getattr__(name: str) -> object:
    """The parser's limits, loaded with the parser (only when asked for: see selector.py)."""
    if name in ("MAX_LIKE_COST", "MAX_LIKE_PATTERN_LENGTH"):
        from waystation.core.filter import like

        return getattr(like, name)
    if name == "MAX_DEPTH":
        from waystation.core.filter import parser

        return parser.MAX_DEPTH
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MAX_DEPTH",
    "MAX_FILTER_LENGTH",
    "MAX_LIKE_COST",
    "MAX_LIKE_PATTERN_LENGTH",
    "Filter",
    "FilterError",
    "compile_filter",
]
