"""Best-effort map from TOML key paths to line numbers, so errors can say where to look.

tomllib keeps no positions, so this scans the text for table headers (``[a.b]``,
``[[a]]``, counting array-of-tables entries) and ``key = value`` lines.  Keys inside inline
tables and multi-line values are not tracked; callers fall back to the nearest parent.
"""

from __future__ import annotations

import re

Path = tuple[str | int, ...]

_KEY_PART = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_DOTTED = rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*"
_ARRAY_HEADER = re.compile(rf"\s*\[\[\s*({_DOTTED})\s*\]\]")
_TABLE_HEADER = re.compile(rf"\s*\[\s*({_DOTTED})\s*\]")
_KEY_LINE = re.compile(rf"\s*({_DOTTED})\s*=")
_PART = re.compile(_KEY_PART)


def _split_key(dotted: str) -> list[str]:
    parts = []
    for raw in _PART.findall(dotted):
        if raw.startswith('"'):
            parts.append(raw[1:-1].replace('\\"', '"').replace("\\\\", "\\"))
        elif raw.startswith("'"):
            parts.append(raw[1:-1])
        else:
            parts.append(raw)
    return parts


def key_lines(text: str) -> dict[Path, int]:
    """``{("diverts", 0, "filter"): 12, ...}`` with 1-based line numbers (first occurrence)."""
    lines: dict[Path, int] = {}
    arrays: dict[Path, int] = {}  # array-of-tables path -> index of its latest entry
    table: Path = ()
    in_multiline: str | None = None

    def resolve(keys: list[str], *, new_entry: bool) -> Path:
        path: Path = ()
        for i, key in enumerate(keys):
            path += (key,)
            last = i == len(keys) - 1
            if last and new_entry:
                arrays[path] = arrays.get(path, -1) + 1
                path += (arrays[path],)
            elif path in arrays:
                path += (arrays[path],)
        return path

    for number, line in enumerate(text.splitlines(), start=1):
        if in_multiline:
            if line.count(in_multiline) % 2 == 1:
                in_multiline = None
            continue
        if match := _ARRAY_HEADER.match(line):
            table = resolve(_split_key(match.group(1)), new_entry=True)
            lines.setdefault(table, number)
        elif match := _TABLE_HEADER.match(line):
            table = resolve(_split_key(match.group(1)), new_entry=False)
            lines.setdefault(table, number)
        elif match := _KEY_LINE.match(line):
            lines.setdefault(table + tuple(_split_key(match.group(1))), number)
            for quote in ('"""', "'''"):
                if line.count(quote) % 2 == 1:
                    in_multiline = quote
    return lines
