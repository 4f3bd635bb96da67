"""The parsed form of a selector: a small immutable tree the evaluator compiles.

``kind`` is the static type a node is known to have.  Identifiers are ``ANY`` (a property may
hold anything), so most type errors can only be UNKNOWN at run time; the parser uses kinds to
refuse the ones that are certain (``'a' + 1``, ``5 AND x``, a bare number as a selector).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import ClassVar, TypeAlias


class Kind(Enum):
    BOOL = "boolean"
    NUM = "numeric"
    STR = "string"
    ANY = "any"


LiteralValue: TypeAlias = bool | int | float | str


@dataclass(frozen=True, slots=True)
class Literal:
    value: LiteralValue

    @property
    def kind(self) -> Kind:
        if isinstance(self.value, bool):
            return Kind.BOOL
        return Kind.STR if isinstance(self.value, str) else Kind.NUM


@dataclass(frozen=True, slots=True)
class Ident:
    name: str
    kind: ClassVar[Kind] = Kind.ANY


@dataclass(frozen=True, slots=True)
class Unary:
    """``-x`` or ``+x``; both are UNKNOWN unless x is numeric."""

    op: str
    operand: Node
    kind: ClassVar[Kind] = Kind.NUM


@dataclass(frozen=True, slots=True)
class Arith:
    """A left-associative chain at one precedence level: ``first (op operand)*``."""

    first: Node
    rest: tuple[tuple[str, Node], ...]
    kind: ClassVar[Kind] = Kind.NUM


@dataclass(frozen=True, slots=True)
class Compare:
    op: str  # = <> < <= > >=
    left: Node
    right: Node
    kind: ClassVar[Kind] = Kind.BOOL


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node
    kind: ClassVar[Kind] = Kind.BOOL


@dataclass(frozen=True, slots=True)
class And:
    operands: tuple[Node, ...]  # flattened: a long chain stays one shallow node
    kind: ClassVar[Kind] = Kind.BOOL


@dataclass(frozen=True, slots=True)
class Or:
    operands: tuple[Node, ...]
    kind: ClassVar[Kind] = Kind.BOOL


@dataclass(frozen=True, slots=True)
class Between:
    operand: Node
    low: Node
    high: Node
    negated: bool
    kind: ClassVar[Kind] = Kind.BOOL


@dataclass(frozen=True, slots=True)
class In:
    operand: Node
    values: tuple[str | int | float, ...]
    negated: bool
    kind: ClassVar[Kind] = Kind.BOOL


@dataclass(frozen=True, slots=True)
class Like:
    operand: Node
    pattern: str
    escape: str | None
    negated: bool
    kind: ClassVar[Kind] = Kind.BOOL


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Node
    negated: bool
    kind: ClassVar[Kind] = Kind.BOOL


Node: TypeAlias = (
    Literal | Ident | Unary | Arith | Compare | Not | And | Or | Between | In | Like | IsNull
)
