"""Compile a parsed selector into nested closures, once, so evaluation is a few calls.

Every compiled function takes ``(props, message)``: ordinary identifiers read ``props`` (the
message's property dict, or a plain mapping), header identifiers read the message through a
getter chosen at compile time.  Truth functions return True, False or None (UNKNOWN) and
never raise.  The common shape ``prop <op> literal`` gets a dedicated closure with the type
test inlined; everything else goes through the generic helpers in ``values``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from waystation.core.filter.like import compile_like
from waystation.core.filter.nodes import (
    And,
    Arith,
    Between,
    Compare,
    Ident,
    In,
    IsNull,
    Kind,
    Like,
    Literal,
    Node,
    Not,
    Or,
    Unary,
)
from waystation.core.filter.values import ARITHMETIC, NUM, STR, and3, compare, kind_of, not3

Props = Mapping[str, object]
Eval = Callable[[Props, Any], Any]
HeaderLookup = Callable[[str], Callable[[Any], object] | None]

_CMP_FN: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def compile_node(node: Node, headers: HeaderLookup) -> Eval:
    """The truth function of a (type-checked) selector tree."""
    return _Compiler(headers).truth(node)


class _Compiler:
    def __init__(self, headers: HeaderLookup) -> None:
        self.headers = headers

    def truth(self, node: Node) -> Eval:
        if node.kind is Kind.BOOL:
            return self.value(node)  # already True/False/None
        assert isinstance(node, Ident), node  # the parser admits nothing else here
        getter = self.headers(node.name)
        if getter is not None:

            def header_truth(p: Props, m: Any) -> Any:
                v = getter(m)
                return v if v is True or v is False else None

            return header_truth
        name = node.name

        def prop_truth(p: Props, m: Any) -> Any:
            v = p.get(name)
            return v if v is True or v is False else None

        return prop_truth

    def value(self, node: Node) -> Eval:
        match node:
            case Literal(value=const):
                return lambda p, m: const
            case Ident(name=name):
                getter = self.headers(name)
                if getter is not None:
                    return lambda p, m: getter(m)
                return lambda p, m: p.get(name)
            case Unary():
                return _unary(node.op, self.value(node.operand))
            case Arith():
                rest = [(ARITHMETIC[op], self.value(n)) for op, n in node.rest]
                return _arith(self.value(node.first), rest)
            case Compare():
                return self.compare(node)
            case Not():
                return _not(self.truth(node.operand))
            case And() | Or():
                return _logical(isinstance(node, And), [self.truth(n) for n in node.operands])
            case Between():
                return self.between(node)
            case In():
                return _in(self.value(node.operand), node.values, node.negated)
            case Like():
                matcher = compile_like(node.pattern, node.escape)
                return _like(self.value(node.operand), matcher, node.negated)
            case IsNull():
                return _is_null(self.value(node.operand), node.negated)
        raise AssertionError(f"unknown node {node!r}")

    def property_name(self, node: Node) -> str | None:
        if isinstance(node, Ident) and self.headers(node.name) is None:
            return node.name
        return None

    def compare(self, node: Compare) -> Eval:
        op, left, right = node.op, node.left, node.right
        if isinstance(left, Literal) and self.property_name(right) is not None:
            op, left, right = _FLIPPED[op], right, left
        name = self.property_name(left)
        if name is not None and isinstance(right, Literal):
            return _prop_vs_const(op, name, right.value)
        fn, equality = _CMP_FN[op], op in ("=", "<>")
        lf, rf = self.value(left), self.value(right)
        return lambda p, m: compare(fn, equality, lf(p, m), rf(p, m))

    def between(self, node: Between) -> Eval:
        f, negated = self.value(node.operand), node.negated
        low, high = node.low, node.high
        if isinstance(low, Literal) and isinstance(high, Literal):
            lo, hi = low.value, high.value  # numeric: the parser checked

            def between_const(p: Props, m: Any) -> Any:
                a = f(p, m)
                t = type(a)
                if t is int or t is float or kind_of(a) == NUM:
                    return (lo <= a <= hi) is not negated
                return None

            return between_const
        flo, fhi = self.value(low), self.value(high)

        def between(p: Props, m: Any) -> Any:
            a = f(p, m)
            if kind_of(a) != NUM:
                return None
            lo_v, hi_v = flo(p, m), fhi(p, m)
            r = and3(
                lo_v <= a if kind_of(lo_v) == NUM else None,
                a <= hi_v if kind_of(hi_v) == NUM else None,
            )
            return not3(r) if negated else r

        return between


def _prop_vs_const(op: str, name: str, const: object) -> Eval:
    fn, equality = _CMP_FN[op], op in ("=", "<>")
    kind = kind_of(const)

    def slow(v: object) -> Any:
        return None if v is None else compare(fn, equality, v, const)

    if kind == NUM:

        def prop_vs_number(p: Props, m: Any) -> Any:
            v = p.get(name)
            t = type(v)
            if t is int or t is float:
                return fn(v, const)
            return slow(v)

        return prop_vs_number
    exact = str if kind == STR else bool

    def prop_vs_other(p: Props, m: Any) -> Any:
        v = p.get(name)
        if type(v) is exact:
            return fn(v, const)
        return slow(v)

    return prop_vs_other


def _unary(op: str, f: Eval) -> Eval:
    negate = op == "-"

    def unary(p: Props, m: Any) -> Any:
        v = f(p, m)
        if kind_of(v) != NUM:
            return None
        return -v if negate else v

    return unary


def _arith(first: Eval, rest: list[tuple[Callable[[Any, Any], Any], Eval]]) -> Eval:
    def arith(p: Props, m: Any) -> Any:
        a = first(p, m)
        if kind_of(a) != NUM:
            return None
        for op, f in rest:
            b = f(p, m)
            if kind_of(b) != NUM:
                return None
            a = op(a, b)
            if a is None:
                return None
        return a

    return arith


def _not(f: Eval) -> Eval:
    def not_(p: Props, m: Any) -> Any:
        r = f(p, m)
        return None if r is None else not r

    return not_


def _logical(is_and: bool, fs: list[Eval]) -> Eval:
    """n-ary AND / OR; ``decisive`` is the value that settles the result at once."""
    decisive = not is_and
    if len(fs) == 2:
        f1, f2 = fs

        def logical2(p: Props, m: Any) -> Any:
            a = f1(p, m)
            if a is decisive:
                return decisive
            b = f2(p, m)
            if b is decisive:
                return decisive
            return None if a is None or b is None else not decisive

        return logical2

    def logical(p: Props, m: Any) -> Any:
        unknown = False
        for f in fs:
            r = f(p, m)
            if r is decisive:
                return decisive
            if r is None:
                unknown = True
        return None if unknown else not decisive

    return logical


def _in(f: Eval, values: tuple[str | int | float, ...], negated: bool) -> Eval:
    """``x IN (v1, v2)`` is ``x = v1 OR x = v2`` in three-valued logic, done with sets."""
    strings = frozenset(v for v in values if isinstance(v, str))
    numbers = frozenset(v for v in values if not isinstance(v, str))
    miss_str = None if numbers else False  # a string matched nothing: UNKNOWN if numbers too
    miss_num = None if strings else False

    def in_(p: Props, m: Any) -> Any:
        v = f(p, m)
        k = kind_of(v)
        if k == STR:
            r = True if v in strings else miss_str
        elif k == NUM:
            r = True if v in numbers else miss_num
        else:
            return None
        return None if r is None else r is not negated

    return in_


def _like(f: Eval, matcher: Callable[[str], bool], negated: bool) -> Eval:
    def like(p: Props, m: Any) -> Any:
        v = f(p, m)
        if type(v) is str or kind_of(v) == STR:
            return matcher(v) is not negated
        return None

    return like


def _is_null(f: Eval, negated: bool) -> Eval:
    return lambda p, m: (f(p, m) is None) is not negated
