"""Tokenizer for the selector language (JMS 1.1 / SQL-92 lexical rules).

Hand-written rather than one big regex so every error can name its exact position and so no
pattern can backtrack badly on hostile input: strings are scanned with ``str.find``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import Enum

from waystation.core.filter.errors import FilterError

KEYWORDS = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "NULL", "TRUE", "FALSE", "ESCAPE"}
)
MAX_LONG = 2**63 - 1  # exact literals have Java long range

_DIGITS = frozenset("0123456789")  # ASCII only: str.isdigit() also accepts '²' and friends

_OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "(", ")", ",")
_NUMBER = re.compile(
    r"0[xX][0-9a-fA-F]+"
    r"|(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    r"|[0-9]+(?:[eE][+-]?[0-9]+)?"
)
_IDENT = re.compile(r"[\w$]+")
_HINTS = {
    "!": "unexpected character '!' (use <> for 'not equal' and NOT for negation)",
    '"': "unexpected character '\"' (string literals use single quotes)",
}


class T(Enum):
    """Token kinds."""

    IDENT = "identifier"
    KEYWORD = "keyword"
    STRING = "string"
    NUMBER = "number"
    OP = "operator"
    EOF = "end of input"


@dataclass(frozen=True, slots=True)
class Token:
    kind: T
    value: str | int | float  # keyword upper-cased; string unescaped; number converted
    pos: int
    text: str  # the source lexeme, for error messages

    def is_(self, kind: T, value: object) -> bool:
        return self.kind is kind and self.value == value


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens ending with an EOF token; raise FilterError on bad input."""
    out: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c == "'":
            i = _string(text, i, out)
        elif c in _DIGITS or (c == "." and i + 1 < n and text[i + 1] in _DIGITS):
            i = _number(text, i, out)
        elif c.isalpha() or c in "_$":
            m = _IDENT.match(text, i)
            assert m is not None  # c itself matches [\w$]
            word = m.group()
            upper = word.upper()
            if upper in KEYWORDS:
                out.append(Token(T.KEYWORD, upper, i, word))
            else:
                out.append(Token(T.IDENT, word, i, word))
            i = m.end()
        else:
            for op in _OPERATORS:
                if text.startswith(op, i):
                    out.append(Token(T.OP, op, i, op))
                    i += len(op)
                    break
            else:
                reason = _HINTS.get(c, f"unexpected character {c!r}")
                raise FilterError(text, i, c, reason)
    out.append(Token(T.EOF, "", n, ""))
    return out


def _string(text: str, start: int, out: list[Token]) -> int:
    """Scan a quoted literal; ``''`` inside is one quote.  Returns the index after it."""
    parts: list[str] = []
    i = start + 1
    while True:
        j = text.find("'", i)
        if j < 0:
            raise FilterError(text, start, text[start:], "unterminated string literal")
        parts.append(text[i:j])
        if text.startswith("'", j + 1):
            parts.append("'")
            i = j + 2
        else:
            out.append(Token(T.STRING, "".join(parts), start, text[start : j + 1]))
            return j + 1


def _number(text: str, start: int, out: list[Token]) -> int:
    m = _NUMBER.match(text, start)
    assert m is not None  # caller saw a digit or '.digit'
    lexeme, end = m.group(), m.end()
    tail = _IDENT.match(text, end)
    if tail or text.startswith(".", end):
        bad_end = tail.end() if tail else end + 1
        raise FilterError(text, start, text[start:bad_end], "malformed number")
    value: int | float
    if lexeme[:2] in ("0x", "0X"):
        digits = lexeme[2:].lstrip("0")
        value = int(digits, 16) if len(digits) <= 16 else MAX_LONG + 1
    elif any(c in lexeme for c in ".eE"):
        value = float(lexeme)
        if not math.isfinite(value):
            raise FilterError(text, start, lexeme, "number out of range")
    else:
        digits = lexeme.lstrip("0")
        # len check first: int() refuses very long digit strings (and they are out of range).
        value = int(digits or "0") if len(digits) <= 19 else MAX_LONG + 1
    if isinstance(value, int) and value > MAX_LONG:
        raise FilterError(text, start, lexeme, "integer literal out of range (64-bit)")
    out.append(Token(T.NUMBER, value, start, lexeme))
    return end
