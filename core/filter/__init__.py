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
* Limits: 8192 characters and nesting depth 100, both reported as FilterError.
"""

from waystation.core.filter.errors import FilterError
from waystation.core.filter.parser import MAX_DEPTH
from waystation.core.filter.selector import MAX_FILTER_LENGTH, Filter, compile_filter

__all__ = ["MAX_DEPTH", "MAX_FILTER_LENGTH", "Filter", "FilterError", "compile_filter"]
