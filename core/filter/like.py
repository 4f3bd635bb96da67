"""SQL LIKE matching without regex backtracking.

Selectors come from clients (a STOMP ``selector`` header), so a pattern such as
``'%a%a%a%a%b'`` must not be able to stall the broker the way a translated ``.*`` regex can.
The pattern is split on ``%`` into fixed-width segments; the first is anchored at the start,
the last at the end, and each middle one is found leftmost-first, which is optimal for ``%``.
Cost is O(len(value) * len(pattern)) at worst.  ``_`` is one character (one code point).

What bounds that cost, checked when a selector is compiled (:mod:`waystation.core.filter`):
a pattern has at most :data:`MAX_LIKE_PATTERN_LENGTH` characters, and a selector's patterns
together an estimated cost (:func:`like_cost`) of at most :data:`MAX_LIKE_COST`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

#: Characters of one LIKE pattern (as written, escapes included); longer ones are refused.
MAX_LIKE_PATTERN_LENGTH = 256
#: The most a selector's LIKE patterns may cost together, in :func:`like_cost` units (about
#: nanoseconds per character of the value).  32 keeps 30 subscriptions with the costliest
#: allowed selectors at about 10 ms per message on a 10 KB property value.
MAX_LIKE_COST = 32
#: A part between two ``%`` without ``_``: one ``str.find`` pass over the value.
SCAN_COST = 4
#: A part between two ``%`` holding ``_``: a regex tried at each position of the value, which
#: costs this plus the part's width per position.
WILDCARD_PART_COST = 8


class LikeError(ValueError):
    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(reason)
        self.offset = offset  # into the pattern string
        self.reason = reason


def _segments(pattern: str, escape: str | None) -> list[list[str | None]]:
    """Pattern -> segments split on unescaped '%'; each item is a literal char or None ('_')."""
    segments: list[list[str | None]] = [[]]
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == escape:
            if i + 1 >= n:
                raise LikeError(i, "ESCAPE character at the end of the LIKE pattern")
            segments[-1].append(pattern[i + 1])
            i += 2
            continue
        if c == "%":
            segments.append([])
        else:
            segments[-1].append(None if c == "_" else c)
        i += 1
    return segments


def _segment_re(items: list[str | None]) -> re.Pattern[str]:
    # Fixed width, no quantifiers: matching it is linear in its length.
    return re.compile("".join("." if c is None else re.escape(c) for c in items), re.DOTALL)


def like_cost(pattern: str, escape: str | None = None) -> int:
    """Estimated cost of matching ``pattern``, per character of the value (about ns): 0 for
    a pattern anchored at both ends (``'abc%'``, ``'%abc'``, ``'a_c'``: one comparison at
    one place), :data:`SCAN_COST` when it has a part between two ``%`` (``'%abc%'``: found by
    a linear search), :data:`WILDCARD_PART_COST` plus the width of the widest such part that
    holds a ``_`` (``'%a_c%'`` costs 11: tried at every position).  LikeError if invalid."""
    middle = [seg for seg in _segments(pattern, escape)[1:-1] if seg]
    if not middle:
        return 0
    widest = max((len(seg) for seg in middle if None in seg), default=0)
    return WILDCARD_PART_COST + widest if widest else SCAN_COST


def compile_like(pattern: str, escape: str | None = None) -> Callable[[str], bool]:
    """A predicate telling whether a whole string matches ``pattern``; LikeError if invalid."""
    if escape is not None and len(escape) != 1:
        raise LikeError(0, "ESCAPE must be exactly one character")
    segments = _segments(pattern, escape)
    if len(segments) == 1:
        only = segments[0]
        if None not in only:
            literal = "".join(c for c in only if c is not None)
            return literal.__eq__  # no wildcards at all: plain equality
        exact = _segment_re(only)
        return lambda s: exact.fullmatch(s) is not None
    if all(None not in seg for seg in segments):
        return _plain_matcher(["".join(c for c in seg if c is not None) for seg in segments])
    head, middle, tail = segments[0], segments[1:-1], segments[-1]
    head_re, tail_re = _segment_re(head), _segment_re(tail)
    middle_res = [_segment_re(seg) for seg in middle if seg]
    min_len = len(head) + len(tail) + sum(len(seg) for seg in middle)
    head_n, tail_n = len(head), len(tail)

    def match(s: str) -> bool:
        if len(s) < min_len or (head_n and head_re.match(s) is None):
            return False
        pos, end = head_n, len(s) - tail_n
        for seg in middle_res:
            m = seg.search(s, pos, end)
            if m is None:
                return False
            pos = m.end()
        return tail_n == 0 or tail_re.match(s, end) is not None

    return match


def _plain_matcher(parts: list[str]) -> Callable[[str], bool]:
    """No ``_`` anywhere: the same leftmost-first walk with plain string operations."""
    head, tail = parts[0], parts[-1]
    middle = [p for p in parts[1:-1] if p]
    min_len = sum(map(len, parts))

    def match(s: str) -> bool:
        if len(s) < min_len or not s.startswith(head) or not s.endswith(tail):
            return False
        pos, end = len(head), len(s) - len(tail)
        for part in middle:
            i = s.find(part, pos, end)
            if i < 0:
                return False
            pos = i + len(part)
        return True

    return match
