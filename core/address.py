"""Address names and wildcard patterns.

Words are separated by ``.``; ``*`` matches exactly one word, ``#`` zero or more.  The same
patterns serve bindings, address settings and security, so matching and the specificity order
(used to merge settings from the most specific pattern down) live here together.
"""

from __future__ import annotations

from functools import lru_cache

NODE_SEPARATOR = "::"


class InvalidAddress(ValueError):
    pass


def is_wildcard(pattern: str) -> bool:
    return "*" in pattern.split(".") or "#" in pattern.split(".")


def validate_name(name: str, *, allow_wildcards: bool = True) -> str:
    if not name:
        raise InvalidAddress("address name is empty")
    if any(c in name for c in "\x00\n\r"):
        raise InvalidAddress(f"address name {name!r} contains a control character")
    words = name.split(".")
    if "" in words and name != ".":
        raise InvalidAddress(f"address name {name!r} has an empty word (leading, trailing or '..')")
    for w in words:
        if ("*" in w or "#" in w) and w not in ("*", "#"):
            raise InvalidAddress(
                f"in {name!r}: wildcard characters must stand alone as a word, got {w!r}"
            )
        if not allow_wildcards and w in ("*", "#"):
            raise InvalidAddress(f"{name!r} contains a wildcard where a concrete address is needed")
    return name


def matches(pattern: str, address: str) -> bool:
    """True when ``address`` (concrete) matches ``pattern`` (possibly with wildcards)."""
    if pattern == address or pattern == "#":
        return True
    if "*" not in pattern and "#" not in pattern:
        return False
    return _match_words(tuple(pattern.split(".")), tuple(address.split(".")))


@lru_cache(maxsize=65536)
def _match_words(p: tuple[str, ...], a: tuple[str, ...]) -> bool:
    if not p:
        return not a
    head = p[0]
    if head == "#":
        # zero or more words
        return any(_match_words(p[1:], a[i:]) for i in range(len(a) + 1))
    if not a:
        return False
    if head == "*" or head == a[0]:
        return _match_words(p[1:], a[1:])
    return False


def specificity(pattern: str) -> tuple[int, int, int, int]:
    """Sort key: larger is more specific.

    Exact names beat any wildcard; patterns with only ``*`` beat patterns with ``#``; then
    the later the first wildcard and the more literal words, the more specific; ties are
    broken by length so the order is total and deterministic.
    """
    words = pattern.split(".")
    has_hash = "#" in words
    has_star = "*" in words
    rank = 2 if not (has_hash or has_star) else (1 if not has_hash else 0)
    first_wild = next((i for i, w in enumerate(words) if w in ("*", "#")), len(words))
    literal = sum(1 for w in words if w not in ("*", "#"))
    return (rank, first_wild, literal, len(pattern))


def split_remote(address: str) -> tuple[str | None, str]:
    """``site-b::orders`` -> ("site-b", "orders"); a plain address -> (None, address)."""
    node, sep, rest = address.partition(NODE_SEPARATOR)
    if not sep:
        return None, address
    return node, rest
