"""Durations and sizes as operators write them in config files.

Durations: a string with a unit (``"500ms"``, ``"2s"``, ``"5m"``, ``"1h"``, ``"1d"``; a
decimal point and compound forms like ``"1m30s"`` are accepted) or a bare number, which
always means **seconds** (``2`` = 2 s, ``0.25`` = 250 ms).  Negative durations are refused.

Sizes: a bare integer is bytes; a string takes a binary (``KiB``, ``MiB``, ``GiB``, ``TiB``,
powers of 1024) or decimal (``KB``, ``MB``, ``GB``, ``TB``, powers of 1000) unit, or ``B``.
``-1`` (or ``"unlimited"``) means no limit, only where the caller allows it.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

_DURATION_UNITS_MS: dict[str, float] = {
    "ms": 1.0,
    "s": 1000.0,
    "m": 60_000.0,
    "h": 3_600_000.0,
    "d": 86_400_000.0,
}
_MAX_DURATION_MS = 10_000 * 86_400_000.0
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_DURATION_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?\s*(?:ms|s|m|h|d)\s*)+")

_SIZE_UNITS: dict[str, int] = {
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)?")

UNLIMITED = -1


def describe_value(value: object) -> str:
    """A value as an operator would recognise it from the file: ``true``, ``'x'``, ``a table``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return repr(value)


def parse_duration(value: object) -> timedelta:
    """``"500ms"``/``"2s"``/``"1m30s"``/``2`` (seconds) -> timedelta; raise ValueError otherwise."""
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise ValueError(f"a duration cannot be negative, got {value}")
        return value
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(
            f'expected a duration like "500ms", "2s", "5m" or a number of seconds, got {describe_value(value)}'
        )
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ValueError(
                f"expected a duration of 0 or more seconds, got {describe_value(value)}"
            )
        total_ms = value * 1000.0
    else:
        text = value.strip().lower()
        if not _DURATION_WHOLE.fullmatch(text):
            raise ValueError(
                f'expected a duration like "500ms", "2s", "5m", "1h" (units ms, s, m, h, d), got {value!r}'
            )
        total_ms = sum(float(n) * _DURATION_UNITS_MS[u] for n, u in _DURATION_PART.findall(text))
    if total_ms > _MAX_DURATION_MS:
        raise ValueError(f"duration {describe_value(value)} is too long (at most 10000 days)")
    return timedelta(milliseconds=total_ms)


def parse_size(value: object, *, allow_unlimited: bool = False) -> int:
    """``"64MiB"``/``"10MB"``/``4096`` -> bytes; ``-1``/``"unlimited"`` only if allowed."""
    if allow_unlimited and (value == UNLIMITED or value == "-1" or value == "unlimited"):
        return UNLIMITED
    hint = 'like "64MiB", "512KiB", "10MB" or a number of bytes'
    if allow_unlimited:
        hint += " (-1 for unlimited)"
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"expected a size {hint}, got {describe_value(value)}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(
                f"a size cannot be negative, got {value}"
                + ("; use -1 for unlimited" if allow_unlimited else "")
            )
        return value
    match = _SIZE.fullmatch(value.strip().lower())
    if not match or (match.group(2) or "b") not in _SIZE_UNITS:
        raise ValueError(f"expected a size {hint}, got {value!r}")
    number, unit = match.group(1), match.group(2) or "b"
    result = float(number) * _SIZE_UNITS[unit]
    if result != int(result):
        raise ValueError(f"size {value!r} is not a whole number of bytes")
    return int(result)


def duration(text: str) -> timedelta:
    """Shorthand for defaults written in code: ``duration("2s")``."""
    return parse_duration(text)


def size(text: str) -> int:
    """Shorthand for defaults written in code: ``size("64MiB")``."""
    return parse_size(text)


def to_ms(value: timedelta) -> int:
    """Whole milliseconds (rounded), the unit the engine works in."""
    return round(value.total_seconds() * 1000)


def format_duration(value: timedelta) -> str:
    """Shortest exact form: ``timedelta(seconds=90)`` -> ``"90s"``, 1500 ms -> ``"1500ms"``."""
    ms = to_ms(value)
    for unit, factor in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % factor == 0:
            return f"{ms // factor}{unit}"
    return f"{ms}ms"


def format_size(value: int) -> str:
    """Shortest exact binary form: 67108864 -> ``"64MiB"``; -1 -> ``"unlimited"``."""
    if value == UNLIMITED:
        return "unlimited"
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value and value % factor == 0:
            return f"{value // factor}{unit}"
    return str(value)


__all__ = [
    "UNLIMITED",
    "describe_value",
    "duration",
    "format_duration",
    "format_size",
    "parse_duration",
    "parse_size",
    "size",
    "to_ms",
]
