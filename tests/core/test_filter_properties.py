"""Property-based checks of the selector language against an independent reference.

Random expression trees are rendered to selector text twice (fully parenthesized, and with
the fewest parentheses precedence allows) and evaluated by a small SQL three-valued-logic
interpreter written here from the spec, sharing no code with core.filter.
"""

from __future__ import annotations

import enum
import math
import operator
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from waystation.core.filter import FilterError, compile_filter
from waystation.core.message import Message

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = ["a", "b", "s", "flag", "gone"]
Tree = tuple[Any, ...]

# -- trees --------------------------------------------------------------------------------

ident = st.sampled_from(NAMES).map(lambda n: ("id", n))
int_lit = st.integers(-20, 20).map(lambda v: ("lit", v))
float_lit = st.floats(-100, 100, allow_nan=False, allow_infinity=False).map(lambda v: ("lit", v))
str_lit = st.text("ab'%_.*\\ ", max_size=4).map(lambda v: ("lit", v))
bool_lit = st.booleans().map(lambda v: ("lit", v))

num: st.SearchStrategy[Tree] = st.recursive(
    st.one_of(ident, int_lit, float_lit),
    lambda ch: st.one_of(
        st.tuples(st.just("arith"), st.sampled_from("+-*/"), ch, ch),
        st.tuples(st.sampled_from(["neg", "pos"]), ch),
    ),
    max_leaves=4,
)
like_piece = st.one_of(
    st.sampled_from("ab.*'[\\!").map(lambda c: ("lit", c)),
    st.just(("one",)),
    st.just(("any",)),
)
escaped_wildcard = st.sampled_from("%_").map(lambda c: ("lit", c))


@st.composite
def like_node(draw: st.DrawFn) -> Tree:
    operand = draw(st.one_of(ident, str_lit))
    escape = draw(st.sampled_from([None, "\\", "!"]))
    piece = like_piece if escape is None else st.one_of(like_piece, escaped_wildcard)
    pieces = draw(st.lists(piece, max_size=5))
    if escape is None:  # without ESCAPE these two chars cannot be literal; drop them
        pieces = [p for p in pieces if p not in (("lit", "\\"), ("lit", "!"))]
    return ("like", operand, tuple(pieces), escape, draw(st.booleans()))


def _boolean(inner: st.SearchStrategy[Tree]) -> st.SearchStrategy[Tree]:
    value = st.one_of(num, str_lit, bool_lit, inner)
    return st.one_of(
        st.tuples(st.just("cmp"), st.sampled_from(["<", "<=", ">", ">="]), num, num),
        st.tuples(st.just("cmp"), st.sampled_from(["=", "<>"]), value, value),
        st.tuples(st.just("between"), num, num, num, st.booleans()),
        st.tuples(
            st.just("in"),
            st.one_of(ident, num, str_lit),
            st.lists(st.one_of(str_lit, int_lit, float_lit), min_size=1, max_size=3).map(tuple),
            st.booleans(),
        ),
        like_node(),
        st.tuples(st.just("isnull"), st.one_of(num, inner), st.booleans()),
        st.tuples(st.just("not"), inner),
        st.tuples(st.sampled_from(["and", "or"]), st.lists(inner, min_size=2, max_size=3)),
    )


boolean: st.SearchStrategy[Tree] = st.recursive(
    st.one_of(st.sampled_from(NAMES).map(lambda n: ("pred", n)), bool_lit),
    _boolean,
    max_leaves=6,
)

prop_value = st.one_of(
    st.none(),
    st.integers(-20, 20),
    st.floats(-100, 100) | st.sampled_from([math.nan, math.inf, -math.inf, -0.0]),
    st.text("ab'%_.*\\", max_size=4),
    st.booleans(),
)
props_st = st.dictionaries(st.sampled_from(NAMES), prop_value, max_size=len(NAMES))

# -- rendering ----------------------------------------------------------------------------

PREC = {"or": 1, "and": 2, "not": 3, "arith+": 5, "arith*": 6, "neg": 7, "atom": 8}
CMP = 4


def lit_text(v: object) -> str:
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


def like_text(pieces: tuple[Tree, ...], escape: str | None) -> str:
    out = []
    for p in pieces:
        if p[0] == "one":
            out.append("_")
        elif p[0] == "any":
            out.append("%")
        elif p[1] in ("%", "_") or p[1] == escape:
            assert escape is not None
            out.append(escape + p[1])
        else:
            out.append(p[1])
    return lit_text("".join(out))


def render(t: Tree, minimal: bool) -> tuple[str, int]:
    """Selector text and its precedence; ``minimal`` drops every optional parenthesis."""

    def sub(child: Tree, need: int) -> str:
        text, prec = render(child, minimal)
        return text if (minimal and prec >= need) or prec == PREC["atom"] else f"({text})"

    tag = t[0]
    if tag in ("id", "pred"):
        return t[1], PREC["atom"]
    if tag == "lit":
        text = lit_text(t[1])
        return text, PREC["neg"] if text.startswith("-") else PREC["atom"]
    if tag == "arith":
        p = PREC["arith+"] if t[1] in "+-" else PREC["arith*"]
        return f"{sub(t[2], p)} {t[1]} {sub(t[3], p + 1)}", p
    if tag in ("neg", "pos"):
        return ("- " if tag == "neg" else "+ ") + sub(t[1], PREC["neg"]), PREC["neg"]
    if tag == "cmp":
        return f"{sub(t[2], CMP + 1)} {t[1]} {sub(t[3], CMP + 1)}", CMP
    if tag == "between":
        neg = "NOT " if t[4] else ""
        lo, hi = sub(t[2], CMP + 1), sub(t[3], CMP + 1)
        return f"{sub(t[1], CMP + 1)} {neg}BETWEEN {lo} AND {hi}", CMP
    if tag == "in":
        items = ", ".join(lit_text(v[1]) for v in t[2])
        return f"{sub(t[1], CMP + 1)} {'NOT ' if t[3] else ''}IN ({items})", CMP
    if tag == "like":
        esc = "" if t[3] is None else f" ESCAPE {lit_text(t[3])}"
        neg = "NOT " if t[4] else ""
        return f"{sub(t[1], CMP + 1)} {neg}LIKE {like_text(t[2], t[3])}{esc}", CMP
    if tag == "isnull":
        return f"{sub(t[1], CMP + 1)} IS {'NOT ' if t[2] else ''}NULL", CMP
    if tag == "not":
        return f"NOT {sub(t[1], PREC['not'])}", PREC["not"]
    p = PREC[tag]  # and / or
    return f" {tag.upper()} ".join(sub(c, p + 1) for c in t[1]), p


# -- reference evaluator (SQL three-valued logic, straight from the spec) -----------------


def kind(v: object) -> str | None:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "num"
    return "str" if isinstance(v, str) else None


def and3(a: Any, b: Any) -> Any:
    return False if a is False or b is False else (True if a is True and b is True else None)


def or3(a: Any, b: Any) -> Any:
    return True if a is True or b is True else (False if a is False and b is False else None)


def not3(a: Any) -> Any:
    return None if a is None else not a


def cmp(op: str, a: Any, b: Any) -> Any:
    fns: dict[str, Any] = {"=": operator.eq, "<>": operator.ne, "<": operator.lt}
    fns.update({"<=": operator.le, ">": operator.gt, ">=": operator.ge})
    if kind(a) is None or kind(a) != kind(b) or (op not in ("=", "<>") and kind(a) != "num"):
        return None
    return fns[op](a, b)


def like_ref(s: str, pieces: tuple[Tree, ...]) -> bool:
    # reach[j]: the first j pieces can match the prefix consumed so far
    reach = [True] + [False] * len(pieces)
    for j, p in enumerate(pieces):
        if p[0] == "any":
            reach[j + 1] = reach[j + 1] or reach[j]
    for ch in s:
        nxt = [False] * (len(pieces) + 1)
        for j, p in enumerate(pieces):
            if reach[j] and (p[0] == "one" or (p[0] == "lit" and p[1] == ch)):
                nxt[j + 1] = True
            if p[0] == "any" and (reach[j + 1] or nxt[j]):
                nxt[j + 1] = True
        reach = nxt
    return reach[-1]


def ref(t: Tree, props: dict[str, object]) -> Any:
    tag = t[0]
    if tag == "id":
        return props.get(t[1])
    if tag == "pred":  # a plain identifier; only boolean contexts read it as a truth value
        return props.get(t[1])
    if tag == "lit":
        return t[1]
    if tag == "arith":
        a, b = ref(t[2], props), ref(t[3], props)
        if kind(a) != "num" or kind(b) != "num":
            return None
        if t[1] == "/":
            if b == 0:
                return None
            if isinstance(a, int) and isinstance(b, int):
                return int(Fraction(a, b))  # truncates toward zero
            return a / b
        return {"+": operator.add, "-": operator.sub, "*": operator.mul}[t[1]](a, b)
    if tag in ("neg", "pos"):
        v = ref(t[1], props)
        return None if kind(v) != "num" else (-v if tag == "neg" else v)
    if tag == "cmp":
        return cmp(t[1], ref(t[2], props), ref(t[3], props))
    if tag == "between":
        x = ref(t[1], props)
        r: Any = and3(cmp("<=", ref(t[2], props), x), cmp("<=", x, ref(t[3], props)))
        return not3(r) if t[4] else r
    if tag == "in":
        x = ref(t[1], props)
        r = False
        for v in t[2]:
            r = or3(r, cmp("=", x, v[1]))
        return not3(r) if t[3] else r
    if tag == "like":
        x = ref(t[1], props)
        r = like_ref(x, t[2]) if isinstance(x, str) else None
        return not3(r) if t[4] else r
    if tag == "isnull":
        return (ref(t[1], props) is None) != t[2]
    if tag == "not":
        return not3(truth(t[1], props))
    result = truth(t[1][0], props)
    for child in t[1][1:]:
        result = (and3 if tag == "and" else or3)(result, truth(child, props))
    return result


def truth(t: Tree, props: dict[str, object]) -> Any:
    """A boolean context (NOT/AND/OR operand, whole selector): non-booleans are UNKNOWN."""
    v = ref(t, props)
    return v if isinstance(v, bool) else None


# -- properties ---------------------------------------------------------------------------


@SETTINGS
@given(boolean, props_st)
def test_compiled_filter_agrees_with_reference(tree: Tree, props: dict[str, object]) -> None:
    expected = truth(tree, props)
    for minimal in (False, True):
        text = render(tree, minimal)[0]
        f = compile_filter(text)
        assert f is not None
        got = f.evaluate(props)
        assert got is expected or got == expected, (text, props, got, expected)
        message = Message(1, "addr", properties=dict(props))  # type: ignore[arg-type]
        assert f.matches(message) is (expected is True), text


class Level(enum.IntEnum):
    LOW = 1


class Name(str):
    pass


wild_value = st.one_of(
    prop_value,
    st.integers(),
    st.sampled_from([10**400, -(10**400), 2**63, b"x", b"", [1], {"a": 1}, (), object()]),
    st.sampled_from([Level.LOW, Name("ab"), Name("")]),
    st.floats(),
)


@SETTINGS
@given(boolean, st.dictionaries(st.sampled_from(NAMES), wild_value))
def test_evaluation_never_raises(tree: Tree, props: dict[str, object]) -> None:
    f = compile_filter(render(tree, True)[0])
    assert f is not None
    assert f.evaluate(props) in (True, False, None)


TOKENS = [
    "a",
    "b",
    "flag",
    "=",
    "<>",
    "<",
    "<=",
    ">",
    ">=",
    "(",
    ")",
    ",",
    "+",
    "-",
    "*",
    "/",
    "AND",
    "or",
    "Not",
    "BETWEEN",
    "IN",
    "LIKE",
    "ESCAPE",
    "IS",
    "NULL",
    "TRUE",
    "false",
    "'x'",
    "'%'",
    "''",
    "'",
    "1",
    "2.5",
    "0x1F",
    ".5",
    "1e3",
    "7.",
    "9999999999999999999999",
    "!",
    '"',
    "#",
    "HQPriority",
]


@SETTINGS
@given(
    st.one_of(st.text(max_size=80), st.lists(st.sampled_from(TOKENS), max_size=14).map(" ".join))
)
def test_arbitrary_text_compiles_or_raises_filter_error(text: str) -> None:
    try:
        f = compile_filter(text)
    except FilterError as e:
        assert 0 <= e.position <= len(text)
        assert text[e.position : e.position + len(e.token)] == e.token
        assert str(e).startswith("filter ")
        return
    if f is not None:
        assert f.evaluate({"a": 1, "b": "x", "flag": True}) in (True, False, None)
