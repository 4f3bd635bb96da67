"""Run-time typing and operators for filter values: SQL three-valued logic in Python terms.

UNKNOWN (and NULL) is ``None``.  Only like types compare (numbers with numbers, strings with
strings, booleans with booleans); anything else, including ``bytes`` or a missing property,
makes the comparison UNKNOWN rather than raising.  Exact builtin types take the fast path;
subclasses (an ``IntEnum``, a ``str`` subclass) are classified by ``isinstance``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

NUM, STR, BOOL = 1, 2, 3
_KINDS: dict[type, int] = {int: NUM, float: NUM, str: STR, bool: BOOL}

Op = Callable[[Any, Any], Any]


def kind_of(v: object) -> int | None:
    """NUM, STR or BOOL; None for NULL and for types a selector cannot compare."""
    k = _KINDS.get(type(v))
    if k is None and v is not None:
        if isinstance(v, bool):
            return BOOL
        if isinstance(v, (int, float)):
            return NUM
        if isinstance(v, str):
            return STR
    return k


def compare(fn: Op, equality: bool, a: object, b: object) -> bool | None:
    """``fn(a, b)`` when the types allow it: like kinds, and ordering only for numbers."""
    ka = kind_of(a)
    if ka is None or ka != kind_of(b) or (ka != NUM and not equality):
        return None
    return bool(fn(a, b))


def add(a: Any, b: Any) -> Any:
    try:
        return a + b
    except OverflowError:  # an int too large to become a float
        return None


def sub(a: Any, b: Any) -> Any:
    try:
        return a - b
    except OverflowError:
        return None


def mul(a: Any, b: Any) -> Any:
    try:
        return a * b
    except OverflowError:
        return None


def div(a: Any, b: Any) -> Any:
    """Java semantics for integers (truncate toward zero); any division by zero is UNKNOWN."""
    if b == 0:
        return None
    if isinstance(a, int) and isinstance(b, int):
        q = a // b
        if q < 0 and q * b != a:
            q += 1
        return q
    try:
        return a / b
    except OverflowError:
        return None


ARITHMETIC: dict[str, Op] = {"+": add, "-": sub, "*": mul, "/": div}


def and3(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return True if a is True and b is True else None


def not3(a: bool | None) -> bool | None:
    return None if a is None else not a
