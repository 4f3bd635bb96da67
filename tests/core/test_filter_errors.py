"""Selector compilation: the API contract, error positions, limits and caching."""

from __future__ import annotations

import pickle
import sys
from types import FrameType

import pytest

from waystation.core.filter import (
    MAX_DEPTH,
    MAX_FILTER_LENGTH,
    MAX_LIKE_COST,
    MAX_LIKE_PATTERN_LENGTH,
    Filter,
    FilterError,
    compile_filter,
)
from waystation.core.filter.like import like_cost
from waystation.core.message import Message


@pytest.mark.parametrize("text", [None, "", " ", "\t\n  \r\f"])
def test_empty_means_all_messages(text: str | None) -> None:
    assert compile_filter(text) is None


def test_compiled_once_and_cached_by_text() -> None:
    a = compile_filter("cache_probe = 1")
    b = compile_filter("cache_probe = 1")
    assert isinstance(a, Filter) and a is b
    assert a.text == "cache_probe = 1"
    assert a == Filter("cache_probe = 1", a._node) and hash(a) == hash("cache_probe = 1")
    assert compile_filter("cache_probe = 2") is not a


def test_surrounding_whitespace_is_fine() -> None:
    f = compile_filter("  a = 1\n")
    assert f is not None and f.matches_properties({"a": 1})


def test_evaluate_reports_three_values() -> None:
    f = compile_filter("a > 1")
    assert f is not None
    assert f.evaluate({"a": 2}) is True
    assert f.evaluate({"a": 0}) is False
    assert f.evaluate({}) is None


def test_matches_never_raises_even_on_a_broken_message() -> None:
    f = compile_filter("HQSize > 1")
    assert f is not None

    class Unmeasurable(str):
        def __len__(self) -> int:
            raise TypeError("no length")

    broken = Message(1, "a", b"", {"p": Unmeasurable("x")})  # size() raises TypeError
    assert f.matches(broken) is False


# -- errors -------------------------------------------------------------------------------

ERRORS = [
    # text, position, token, words in the message
    ("color = 'red' AND", 17, "", "expected an expression"),
    ("a = ", 4, "", "expected an expression"),
    ("a AND", 5, "", "expected an expression"),
    ("AND a = 1", 0, "AND", "expected an expression"),
    ("a = 'abc", 4, "'abc", "unterminated string"),
    ("a = 'it''s", 4, "'it''s", "unterminated string"),
    ("a = 1 b", 6, "b", "expected an operator"),
    ("(a = 1", 6, "", "expected ')'"),
    ("a = 1)", 5, ")", "unbalanced ')'"),
    ("a = (1 + 2", 10, "", "expected ')'"),
    ("a # 1", 2, "#", "unexpected character"),
    ("a != 1", 2, "!", "use <>"),
    ('a = "x"', 4, '"', "single quotes"),
    ("a = b = c", 6, "=", "cannot be chained"),
    ("a < b BETWEEN 1 AND 2", 6, "BETWEEN", "cannot be chained"),
    ("x LIKE 'a' ESCAPE 'ab'", 18, "'ab'", "exactly one character"),
    ("x LIKE 'a' ESCAPE ''", 18, "''", "exactly one character"),
    ("x LIKE 'a!' ESCAPE '!'", 7, "'a!'", "end of the LIKE pattern"),
    ("x LIKE y", 7, "y", "string literal pattern"),
    ("x LIKE 'a' ESCAPE 5", 18, "5", "one-character string"),
    ("x IN ()", 6, ")", "string or numeric literals"),
    ("x IN ('a' 'b')", 10, "'b'", "expected ',' or ')'"),
    ("x IN ('a',)", 10, ")", "string or numeric literals"),
    ("x IN 'a'", 5, "'a'", "'(' after IN"),
    ("x IN (y)", 6, "y", "string or numeric literals"),
    ("x BETWEEN 1 OR 2", 12, "OR", "AND in BETWEEN"),
    ("x NOT 1", 6, "1", "BETWEEN, IN or LIKE after NOT"),
    ("x IS 1", 5, "1", "NULL after IS"),
    ("x IS NOT TRUE", 9, "TRUE", "NULL after IS"),
    ("x = NULL", 4, "NULL", "IS [NOT] NULL"),
    ("x = 12abc", 4, "12abc", "malformed number"),
    ("x = 1.2.3", 4, "1.2.", "malformed number"),
    ("x = 0x", 4, "0x", "malformed number"),
    ("x = 1e", 4, "1e", "malformed number"),
    ("x = 9223372036854775808", 4, "9223372036854775808", "out of range"),
    ("x = 0x10000000000000000", 4, "0x10000000000000000", "out of range"),
    ("x = " + "9" * 5000, 4, "9" * 5000, "out of range"),
    ("x = 1e999", 4, "1e999", "out of range"),
    ("5", 0, "5", "boolean expression"),
    ("'yes'", 0, "'yes'", "boolean expression"),
    ("a + 1", 0, "a", "boolean expression"),
    ("'a' + 1 = 2", 4, "+", "numeric operands"),
    ("a + TRUE = 2", 2, "+", "numeric operands"),
    ("-'a' = 1", 0, "-", "numeric operand"),
    ("5 AND a", 2, "AND", "boolean operands"),
    ("a OR 'x'", 2, "OR", "boolean operands"),
    ("NOT 5", 0, "NOT", "boolean operand"),
    ("a < 'x'", 2, "<", "compares numbers only"),
    ("TRUE > a", 5, ">", "compares numbers only"),
    ("'x' BETWEEN 1 AND 2", 4, "BETWEEN", "numbers only"),
    ("5 LIKE 'a'", 2, "LIKE", "string operand"),
    ("(a = 1) IN ('x')", 8, "IN", "string or numeric operand"),
    ("a = NOT b", 4, "NOT", "not allowed here"),
    ("a = IN", 4, "IN", "found keyword IN"),
]


@pytest.mark.parametrize(
    ("text", "position", "token", "words"), ERRORS, ids=[e[0][:40] for e in ERRORS]
)
def test_error_points_at_the_token(text: str, position: int, token: str, words: str) -> None:
    with pytest.raises(FilterError) as info:
        compile_filter(text)
    e = info.value
    assert (e.position, e.token) == (position, token), str(e)
    assert e.text == text
    assert words in str(e)
    assert f"at position {position}" in str(e)
    assert isinstance(e, ValueError)


def test_error_message_format() -> None:
    with pytest.raises(FilterError) as info:
        compile_filter("color = 'red' AND AND b = 1")
    assert str(info.value) == (
        "filter syntax error at position 18 near 'AND': expected an expression, found keyword AND"
    )


def test_error_survives_pickling() -> None:
    with pytest.raises(FilterError) as info:
        compile_filter("a = ")
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.text, copy.position, copy.token, str(copy)) == ("a = ", 4, "", str(info.value))


def test_long_tokens_are_shortened_in_the_message() -> None:
    with pytest.raises(FilterError) as info:
        compile_filter("a = '" + "x" * 500)
    assert len(str(info.value)) < 150
    assert info.value.token == "'" + "x" * 500


def _stack_depth() -> int:
    frame: FrameType | None = sys._getframe()
    n = 0
    while frame is not None:
        frame, n = frame.f_back, n + 1
    return n


# -- limits -------------------------------------------------------------------------------


def test_too_long_is_refused() -> None:
    text = "a = 1 OR " * 1000 + "a = 1"
    assert len(text) > MAX_FILTER_LENGTH
    with pytest.raises(FilterError, match="longer than 8192"):
        compile_filter(text)
    with pytest.raises(FilterError):
        compile_filter(" " * (MAX_FILTER_LENGTH + 1))


def test_long_flat_chains_are_fine() -> None:
    text = " OR ".join(f"a = {i}" for i in range(600))
    assert len(text) <= MAX_FILTER_LENGTH
    f = compile_filter(text)
    assert f is not None
    assert f.matches_properties({"a": 599}) and not f.matches_properties({"a": 600})
    g = compile_filter(" + ".join(["a"] * 2000) + " = 2000")
    assert g is not None and g.matches_properties({"a": 1})


def test_an_8_kb_like_pattern_is_refused_naming_the_limit() -> None:
    # issue 10: 30 subscriptions with this (legal until now) selector took 1.5-2 s per message
    text = "p LIKE '%" + "a_" * 4000 + "b%'"
    assert len(text) <= MAX_FILTER_LENGTH
    with pytest.raises(FilterError, match="MAX_LIKE_PATTERN_LENGTH") as e:
        compile_filter(text)
    assert e.value.kind == "limit" and e.value.position == text.index("'")
    at_limit = "p LIKE '" + "a" * (MAX_LIKE_PATTERN_LENGTH - 1) + "%'"
    f = compile_filter(at_limit)  # anchored at the start: costs nothing per character
    assert f is not None and f.matches_properties({"p": "a" * 300})


@pytest.mark.parametrize(
    ("pattern", "cost"),
    [
        ("abc", 0),
        ("a_c%", 0),
        ("%a_c", 0),
        ("%%", 0),
        ("%abc%", 4),
        ("a%b%c%d", 4),
        ("%_%", 9),
        ("%a_c%", 11),
        ("x%a_c%abcdef%y", 11),  # the widest part holding '_' counts
        ("%a!_c%", 4),  # an escaped '_' is a literal: a plain search
    ],
)
def test_like_cost(pattern: str, cost: int) -> None:
    assert like_cost(pattern, "!") == cost


def test_like_patterns_over_the_cost_limit_are_refused_naming_it() -> None:
    part = "a" * 11 + "_" + "a" * 12  # 8 + 24 = MAX_LIKE_COST
    assert like_cost(f"%{part}%") == MAX_LIKE_COST
    f = compile_filter(f"p LIKE '%{part}%'")
    assert f is not None and f.matches_properties({"p": "x" + "a" * 24 + "y"})
    with pytest.raises(FilterError, match=r"estimated cost 33, more than 32 \(MAX_LIKE_COST") as e:
        compile_filter(f"p LIKE '%a{part}%'")
    assert e.value.kind == "limit"
    scans = " OR ".join(["p LIKE '%abc%'"] * (MAX_LIKE_COST // 4))
    assert compile_filter(scans) is not None
    # the cost is the selector's: one more search anywhere in it is refused
    with pytest.raises(FilterError, match="MAX_LIKE_COST") as e:
        compile_filter(f"({scans}) AND q LIKE '%x%'")
    assert e.value.token == "'%x%'"


@pytest.mark.parametrize("depth", [10, 50, MAX_DEPTH - 2])
def test_reasonable_nesting_compiles(depth: int) -> None:
    f = compile_filter("(" * depth + "a = 1" + ")" * depth)
    assert f is not None and f.matches_properties({"a": 1})


@pytest.mark.parametrize(
    "text",
    [
        "(" * 150 + "a = 1" + ")" * 150,
        "(" * 4000 + "a = 1" + ")" * 4000,
        "(" * 8000,
        "NOT " * 2000 + "a",
        "- " * 4000 + "a = 1",
        "a = " + "-(" * 200 + "1" + ")" * 200,
        "a = 1 OR (" * 300 + "a = 1" + ")" * 300,
        "a = (1 + (" * 300 + "1" + "))" * 300,
    ],
)
def test_absurd_nesting_is_a_filter_error_not_recursion(text: str) -> None:
    # Run with a shallow stack budget so an unbounded recursion could not hide.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400 + _stack_depth())
    try:
        with pytest.raises(FilterError, match="too deeply|longer than"):
            compile_filter(text)
    finally:
        sys.setrecursionlimit(limit)


def test_deepest_allowed_filter_evaluates_on_a_shallow_stack() -> None:
    text = "NOT (" * 45 + "a = 1" + ")" * 45
    f = compile_filter(text)
    assert f is not None
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(300 + _stack_depth())
    try:
        assert f.matches_properties({"a": 1}) is False  # 45 NOTs: odd, so negated
        assert f.evaluate({"a": 2}) is True
    finally:
        sys.setrecursionlimit(limit)
