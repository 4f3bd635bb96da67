"""Precedence-climbing parser: tokens -> nodes, with the static type checks that are certain.

Precedence, loosest first: OR, AND, NOT, comparison (= <> < <= > >= [NOT] BETWEEN/IN/LIKE,
IS [NOT] NULL), binary + -, * /, unary + -.  Comparisons do not chain (``a = b = c`` is an
error; parenthesize).  Every recursive step counts towards ``MAX_DEPTH`` so hostile nesting
is a FilterError, never a RecursionError, and the compiled tree stays shallow enough to
evaluate with plain recursion.  AND/OR and arithmetic chains are flattened, so a long
``a = 1 OR a = 2 OR ...`` costs no depth.
"""

from __future__ import annotations

from waystation.core.filter.errors import FilterError
from waystation.core.filter.lexer import T, Token, tokenize
from waystation.core.filter.like import (
    MAX_LIKE_COST,
    MAX_LIKE_PATTERN_LENGTH,
    SCAN_COST,
    WILDCARD_PART_COST,
    LikeError,
    compile_like,
    like_cost,
)
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

MAX_DEPTH = 100

_OR, _AND, _NOT, _CMP, _ADD, _MUL, _UNARY = 1, 2, 3, 4, 5, 6, 7
_COMPARISONS = frozenset({"=", "<>", "<", "<=", ">", ">="})
_INFIX = {"OR": _OR, "AND": _AND, "+": _ADD, "-": _ADD, "*": _MUL, "/": _MUL}
_INFIX.update({op: _CMP for op in _COMPARISONS})
_INFIX.update({kw: _CMP for kw in ("NOT", "BETWEEN", "IN", "LIKE", "IS")})
_LEVEL_OPS = {_ADD: ("+", "-"), _MUL: ("*", "/")}
_NUMERIC_OK = (Kind.NUM, Kind.ANY)
_BOOL_OK = (Kind.BOOL, Kind.ANY)


def parse(text: str) -> Node:
    """Parse a selector; raise FilterError pointing at the first offending token."""
    return _Parser(text).parse()


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.depth = 0
        self.like_cost = 0  # the sum of like_cost() over the LIKE patterns so far

    # -- token helpers ---------------------------------------------------------------------
    def peek(self) -> Token:
        return self.tokens[self.i]

    def advance(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind is not T.EOF:
            self.i += 1
        return tok

    def error(self, tok: Token, reason: str, kind: str = "syntax") -> FilterError:
        return FilterError(self.text, tok.pos, tok.text, reason, kind)

    def expect(self, kind: T, value: object, what: str) -> Token:
        tok = self.advance()
        if not tok.is_(kind, value):
            raise self.error(tok, f"expected {what}")
        return tok

    def check(self, node: Node, allowed: tuple[Kind, ...], tok: Token, what: str) -> None:
        if node.kind not in allowed:
            raise self.error(tok, f"{what}, not a {node.kind.value} expression", "type")

    def enter(self, tok: Token) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(tok, f"expression nested too deeply (limit {MAX_DEPTH})", "limit")

    # -- grammar ---------------------------------------------------------------------------
    def parse(self) -> Node:
        first = self.peek()
        node = self.expr(0)
        tok = self.peek()
        if tok.kind is not T.EOF:
            if tok.is_(T.OP, ")"):
                raise self.error(tok, "unbalanced ')'")
            if _infix_level(tok) == _CMP:
                raise self.error(tok, "comparisons cannot be chained; use parentheses")
            raise self.error(tok, "expected an operator, AND, OR or the end of the filter")
        self.check(node, _BOOL_OK, first, "a filter must be a boolean expression")
        return node

    def expr(self, min_level: int) -> Node:
        self.enter(self.peek())
        left = self.prefix(min_level)
        compared = False
        while True:
            tok = self.peek()
            level = _infix_level(tok)
            if level is None or level < min_level:
                break
            if level == _CMP:
                if compared:
                    raise self.error(tok, "comparisons cannot be chained; use parentheses")
                left = self.predicate(left)
                compared = True
            elif level in (_OR, _AND):
                left = self.logical(left, level)
            else:
                left = self.arithmetic(left, level)
        self.depth -= 1
        return left

    def logical(self, first: Node, level: int) -> Node:
        keyword = "OR" if level == _OR else "AND"
        operands = [first]
        while self.peek().is_(T.KEYWORD, keyword):
            tok = self.advance()
            operands.append(self.expr(level + 1))
            for node in (operands[0], operands[-1]):
                self.check(node, _BOOL_OK, tok, f"{keyword} needs boolean operands")
        return Or(tuple(operands)) if level == _OR else And(tuple(operands))

    def arithmetic(self, first: Node, level: int) -> Node:
        rest: list[tuple[str, Node]] = []
        while (tok := self.peek()).kind is T.OP and tok.value in _LEVEL_OPS[level]:
            self.advance()
            right = self.expr(level + 1)
            for node in (first, right):
                self.check(node, _NUMERIC_OK, tok, f"'{tok.value}' needs numeric operands")
            rest.append((str(tok.value), right))
        return Arith(first, tuple(rest))

    def prefix(self, min_level: int) -> Node:
        tok = self.advance()
        if tok.is_(T.KEYWORD, "NOT"):
            if min_level > _NOT:
                raise self.error(tok, "NOT is not allowed here; use parentheses")
            operand = self.expr(_NOT)  # expr() counts the depth
            self.check(operand, _BOOL_OK, tok, "NOT needs a boolean operand")
            return Not(operand)
        if tok.kind is T.OP and tok.value in ("+", "-"):
            self.enter(tok)
            operand = self.prefix(_UNARY)
            self.depth -= 1
            self.check(operand, _NUMERIC_OK, tok, f"unary '{tok.value}' needs a numeric operand")
            if isinstance(operand, Literal) and isinstance(operand.value, (int, float)):
                # Fold signs into numeric literals: '-5' is a constant, not an operation.
                return Literal(-operand.value if tok.value == "-" else operand.value)
            return Unary(str(tok.value), operand)
        if tok.is_(T.OP, "("):
            node = self.expr(0)
            self.expect(T.OP, ")", "')'")
            return node
        if tok.kind in (T.STRING, T.NUMBER):
            return Literal(tok.value)
        if tok.kind is T.IDENT:
            return Ident(str(tok.value))
        if tok.is_(T.KEYWORD, "TRUE") or tok.is_(T.KEYWORD, "FALSE"):
            return Literal(tok.value == "TRUE")
        if tok.is_(T.KEYWORD, "NULL"):
            raise self.error(tok, "NULL is only allowed in IS [NOT] NULL")
        if tok.kind is T.EOF:
            raise self.error(tok, "unexpected end of filter, expected an expression")
        if tok.kind is T.KEYWORD:
            raise self.error(tok, f"expected an expression, found keyword {tok.value}")
        raise self.error(tok, "expected an expression")

    def predicate(self, left: Node) -> Node:
        tok = self.advance()
        if tok.kind is T.OP:  # one of _COMPARISONS
            op = str(tok.value)
            right = self.expr(_ADD)
            if op not in ("=", "<>"):
                for node in (left, right):
                    self.check(node, _NUMERIC_OK, tok, f"'{op}' compares numbers only")
            return Compare(op, left, right)
        if tok.value == "IS":
            negated = self.peek().is_(T.KEYWORD, "NOT")
            if negated:
                self.advance()
            self.expect(T.KEYWORD, "NULL", "NULL after IS [NOT]")
            return IsNull(left, negated)
        negated = tok.value == "NOT"
        if negated:
            tok = self.advance()
            if not (tok.kind is T.KEYWORD and tok.value in ("BETWEEN", "IN", "LIKE")):
                raise self.error(tok, "expected BETWEEN, IN or LIKE after NOT")
        if tok.value == "BETWEEN":
            low = self.expr(_ADD)
            self.expect(T.KEYWORD, "AND", "AND in BETWEEN ... AND ...")
            high = self.expr(_ADD)
            for node in (left, low, high):
                self.check(node, _NUMERIC_OK, tok, "BETWEEN compares numbers only")
            return Between(left, low, high, negated)
        if tok.value == "IN":
            if left.kind is Kind.BOOL:
                raise self.error(tok, "IN needs a string or numeric operand", "type")
            return In(left, self.in_list(), negated)
        # LIKE
        self.check(left, (Kind.STR, Kind.ANY), tok, "LIKE needs a string operand")
        pattern_tok = self.advance()
        if pattern_tok.kind is not T.STRING:
            raise self.error(pattern_tok, "LIKE needs a string literal pattern")
        escape_tok: Token | None = None
        if self.peek().is_(T.KEYWORD, "ESCAPE"):
            self.advance()
            escape_tok = self.advance()
            if escape_tok.kind is not T.STRING:
                raise self.error(escape_tok, "ESCAPE needs a one-character string literal")
        pattern = str(pattern_tok.value)
        escape = None if escape_tok is None else str(escape_tok.value)
        if len(pattern) > MAX_LIKE_PATTERN_LENGTH:
            raise self.error(
                pattern_tok,
                f"LIKE pattern longer than {MAX_LIKE_PATTERN_LENGTH} characters "
                f"(MAX_LIKE_PATTERN_LENGTH)",
                "limit",
            )
        try:
            compile_like(pattern, escape)
            self.like_cost += like_cost(pattern, escape)
        except LikeError as e:
            bad = escape_tok if escape_tok is not None and len(str(escape)) != 1 else pattern_tok
            raise self.error(bad, e.reason) from None
        if self.like_cost > MAX_LIKE_COST:
            raise self.error(
                pattern_tok,
                f"LIKE patterns too costly to evaluate: estimated cost {self.like_cost}, "
                f"more than {MAX_LIKE_COST} (MAX_LIKE_COST; a part between two '%' costs "
                f"{SCAN_COST}, or {WILDCARD_PART_COST} plus its width if it holds a '_')",
                "limit",
            )
        return Like(left, pattern, escape, negated)

    def in_list(self) -> tuple[str | int | float, ...]:
        self.expect(T.OP, "(", "'(' after IN")
        values: list[str | int | float] = []
        while True:
            tok = self.advance()
            sign = 1
            if tok.kind is T.OP and tok.value in ("+", "-"):
                sign = -1 if tok.value == "-" else 1
                tok = self.advance()
                if tok.kind is not T.NUMBER:
                    raise self.error(tok, "expected a number after the sign in the IN list")
            if tok.kind is T.STRING:
                values.append(str(tok.value))
            elif tok.kind is T.NUMBER and not isinstance(tok.value, str):
                values.append(sign * tok.value)
            else:
                raise self.error(tok, "IN lists hold string or numeric literals")
            sep = self.advance()
            if sep.is_(T.OP, ")"):
                return tuple(values)
            if not sep.is_(T.OP, ","):
                raise self.error(sep, "expected ',' or ')' in the IN list")


def _infix_level(tok: Token) -> int | None:
    if tok.kind in (T.OP, T.KEYWORD):
        return _INFIX.get(str(tok.value))
    return None
