"""Selector language: table-driven cases per operator, literals, NULL logic, keywords.

Siblings: test_filter_headers.py (header identifiers), test_filter_errors.py (API, error
positions, limits), test_filter_properties.py (hypothesis against a reference evaluator).
"""

from __future__ import annotations

import pytest

from waystation.core.filter import compile_filter

PROPS: dict[str, object] = {
    "color": "red",
    "animal": "aardvark",
    "i": 3,
    "neg": -7,
    "x": 2.5,
    "zero": 0,
    "t": True,
    "f": False,
    "s3": "3",  # STOMP delivers every header as a string
    "path": "10%",
    "dotty": "a.b*c",
    "blob": b"raw",
    "Color": "blue",
}


def check(text: str, props: dict[str, object] | None = None) -> bool:
    f = compile_filter(text)
    assert f is not None
    return f.matches_properties(PROPS if props is None else props)


def truth(text: str, props: dict[str, object] | None = None) -> bool | None:
    """TRUE / FALSE / UNKNOWN as seen from outside: X matches, NOT (X) matches, or neither."""
    if check(text, props):
        return True
    if check(f"NOT ({text})", props):
        return False
    return None


def case(*rows: tuple[str, bool]) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(("text", "expected"), rows, ids=[r[0] for r in rows])


# -- comparisons --------------------------------------------------------------------------


@case(
    ("color = 'red'", True),
    ("color = 'RED'", False),
    ("color <> 'red'", False),
    ("color <> 'blue'", True),
    ("'red' = color", True),
    ("i = 3", True),
    ("i = 3.0", True),  # numeric promotion
    ("x = 2.5", True),
    ("i < 4", True),
    ("i <= 3", True),
    ("i > 3", False),
    ("i >= 3", True),
    ("4 > i", True),
    ("2 >= i", False),
    ("x > i", False),
    ("x < i", True),
    ("i <> 4", True),
    ("neg < -6", True),
    ("s3 = 3", False),  # string vs number: no conversion
    ("s3 = '3'", True),
    ("t = TRUE", True),
    ("t <> FALSE", True),
    ("f = FALSE", True),
    ("t = f", False),
    ("t = 1", False),  # boolean vs number
    ("color = 1", False),
    ("color < animal", False),  # strings only compare with = and <>
    ("blob = 'raw'", False),  # bytes never compare
    ("0x1F = 31", True),
    ("010 = 10", True),
    ("7E3 = 7000", True),
    ("-57.9E2 = -5790", True),
    ("7. = 7", True),
    (".5 = 0.5", True),
    ("1e-2 < 0.011", True),
    ("'it''s' = 'it''s'", True),
    ("'a''b' <> 'ab'", True),
)
def test_comparison(text: str, expected: bool) -> None:
    assert check(text) is expected


def test_quote_escaping_reaches_the_value() -> None:
    assert check("q = 'it''s'", {"q": "it's"})
    assert not check("q = 'its'", {"q": "it's"})


# -- arithmetic ---------------------------------------------------------------------------


@case(
    ("2 + 3 * 4 = 14", True),
    ("(2 + 3) * 4 = 20", True),
    ("2 * 3 + 4 = 10", True),
    ("10 - 4 - 3 = 3", True),  # left associative
    ("64 / 4 / 2 = 8", True),
    ("-i * 2 = -6", True),
    ("- -i = 3", True),
    ("+i = 3", True),
    ("-(i + 1) = -4", True),
    ("i * x = 7.5", True),
    ("7 / 2 = 3", True),  # integer division truncates...
    ("-7 / 2 = -3", True),  # ...toward zero, like Java
    ("neg / 2 = -3", True),
    ("7.0 / 2 = 3.5", True),
    ("i + 0.5 = 3.5", True),
    ("i - 3 = zero", True),
    ("i + 1 > 3 AND i * 2 < 7", True),
)
def test_arithmetic(text: str, expected: bool) -> None:
    assert check(text) is expected


@pytest.mark.parametrize(
    "text",
    [
        "i / 0 = 0",
        "i / zero > 0",
        "x / 0.0 > 0",
        "missing + 1 = 1",
        "color + 1 = 1",
        "-color = 1",
        "t + 1 = 2",
        "s3 * 1 = 3",
    ],
)
def test_arithmetic_unknown(text: str) -> None:
    assert truth(text) is None


def test_huge_integer_mixed_with_float_is_unknown_not_overflow() -> None:
    assert truth("big + 1.5 > 0", {"big": 10**400}) is None
    assert truth("big * 2 > 0", {"big": 10**400}) is True


# -- logic and NULL -----------------------------------------------------------------------

T, F, U = "t", "f", "missing"  # a TRUE, a FALSE and an UNKNOWN (absent) boolean operand
VALUE = {T: True, F: False, U: None}

# fmt: off
AND_TABLE = [
    (T, T, True), (T, F, False), (T, U, None),
    (F, T, False), (F, F, False), (F, U, False),
    (U, T, None), (U, F, False), (U, U, None),
]
OR_TABLE = [
    (T, T, True), (T, F, True), (T, U, True),
    (F, T, True), (F, F, False), (F, U, None),
    (U, T, True), (U, F, None), (U, U, None),
]
# fmt: on


@pytest.mark.parametrize(("a", "b", "expected"), AND_TABLE)
def test_and_truth_table(a: str, b: str, expected: bool | None) -> None:
    assert truth(f"{a} AND {b}") is expected


@pytest.mark.parametrize(("a", "b", "expected"), OR_TABLE)
def test_or_truth_table(a: str, b: str, expected: bool | None) -> None:
    assert truth(f"{a} OR {b}") is expected


@pytest.mark.parametrize(("a", "expected"), [(T, False), (F, True), (U, None)])
def test_not_truth_table(a: str, expected: bool | None) -> None:
    assert truth(f"NOT {a}") is expected
    assert truth(f"NOT NOT {a}") is VALUE[a]


@pytest.mark.parametrize(("a", "b", "expected"), AND_TABLE)
def test_and_truth_table_with_comparisons(a: str, b: str, expected: bool | None) -> None:
    # Same table, with each operand a comparison rather than a boolean property.
    operand = {T: "i = 3", F: "i = 4", U: "nope = 1"}
    assert truth(f"{operand[a]} AND {operand[b]}") is expected


def test_long_chains_are_n_ary() -> None:
    assert truth("t AND t AND t AND missing") is None
    assert truth("t AND t AND f AND missing") is False
    assert truth("f OR f OR missing OR t") is True
    assert truth("f OR f OR missing") is None


@case(
    ("missing IS NULL", True),
    ("missing IS NOT NULL", False),
    ("color IS NULL", False),
    ("color IS NOT NULL", True),
    ("blob IS NOT NULL", True),
    ("(missing + 1) IS NULL", True),
    ("i / 0 IS NULL", True),
    ("(nope = 1) IS NULL", True),
    ("none_valued IS NULL", True),
)
def test_is_null(text: str, expected: bool) -> None:
    assert check(text, {**PROPS, "none_valued": None}) is expected


@pytest.mark.parametrize(
    "text",
    [
        "missing = 1",
        "NOT (missing = 1)",
        "missing <> 1",
        "missing = missing",
        "1 = missing",
        "missing",
        "NOT missing",
        "color",
        "i",
    ],
)
def test_null_and_non_boolean_predicates_reject(text: str) -> None:
    assert not check(text)


def test_boolean_property_is_a_predicate() -> None:
    assert check("t AND i > 1")
    assert not check("f AND i > 1")
    assert check("NOT f")


# -- BETWEEN, IN, LIKE --------------------------------------------------------------------


@case(
    ("i BETWEEN 1 AND 5", True),
    ("i BETWEEN 3 AND 3", True),
    ("i BETWEEN 4 AND 9", False),
    ("i NOT BETWEEN 4 AND 9", True),
    ("i NOT BETWEEN 1 AND 5", False),
    ("x BETWEEN 2 AND 3", True),
    ("i BETWEEN 2.9 AND 3.1", True),
    ("i BETWEEN x AND i + 1", True),
    ("i + 1 BETWEEN 4 AND 4", True),
    ("i BETWEEN 5 AND 1", False),
    ("i BETWEEN 1 AND 5 AND color = 'red'", True),
)
def test_between(text: str, expected: bool) -> None:
    assert check(text) is expected


def test_between_null_and_mismatch() -> None:
    assert truth("missing BETWEEN 1 AND 2") is None
    assert truth("missing NOT BETWEEN 1 AND 2") is None
    assert truth("s3 BETWEEN 1 AND 5") is None
    # lo <= a AND a <= hi, with a NULL bound: FALSE AND UNKNOWN is FALSE.
    assert truth("i BETWEEN missing AND 2") is False
    assert truth("i BETWEEN missing AND 5") is None


@case(
    ("color IN ('red', 'blue')", True),
    ("color IN ('blue')", False),
    ("color NOT IN ('blue', 'green')", True),
    ("color NOT IN ('red')", False),
    ("color in ('red')", True),
    ("i IN (1, 2, 3)", True),  # numeric lists are an extension
    ("i IN (3.0)", True),
    ("i IN (-3, 4)", False),
    ("neg IN (-7)", True),
    ("x NOT IN (1, 2)", True),
)
def test_in(text: str, expected: bool) -> None:
    assert check(text) is expected


def test_in_null_and_mismatch() -> None:
    assert truth("missing IN ('a', 'b')") is None
    assert truth("missing NOT IN ('a', 'b')") is None
    assert truth("t IN ('a')") is None
    # x IN (a, b) is x = a OR x = b, and comparing unlike types is UNKNOWN.
    assert truth("i IN ('3')") is None
    assert truth("s3 IN (3)") is None
    assert truth("s3 IN (4, 'x')") is None
    assert truth("s3 IN (3, '3')") is True
    assert truth("s3 IN ('4', 'x')") is False
    assert truth("i IN (4, 5)") is False


@case(
    ("animal LIKE 'aard%'", True),
    ("animal LIKE '%vark'", True),
    ("animal LIKE '%dva%'", True),
    ("animal LIKE 'aardvark'", True),
    ("animal LIKE 'aard'", False),  # whole value, not a substring
    ("animal LIKE 'a_rdvark'", True),
    ("animal LIKE 'a_dvark'", False),
    ("animal LIKE '________'", True),
    ("animal LIKE '_______'", False),
    ("animal LIKE '%'", True),
    ("animal LIKE 'a%a%k'", True),
    ("animal LIKE 'a%a%a%k'", True),
    ("animal LIKE 'a%v%v%k'", False),
    ("animal NOT LIKE 'b%'", True),
    ("animal NOT LIKE '%k'", False),
    ("path LIKE '10\\%' ESCAPE '\\'", True),
    ("path LIKE '1_\\%' ESCAPE '\\'", True),
    ("path LIKE '10!%' ESCAPE '!'", True),
    ("path LIKE '100!%' ESCAPE '!'", False),
    ("path LIKE '10%'", True),
    ("color LIKE 'r!ed' ESCAPE '!'", True),  # escape before an ordinary char: literal
    ("dotty LIKE 'a.b*c'", True),  # regex metacharacters are literal
    ("dotty LIKE 'a_b*c'", True),
    ("dotty LIKE 'aXb*c'", False),
    ("dotty LIKE 'a.b.c'", False),
    ("dotty LIKE '%*%'", True),
    ("dotty LIKE '[a].b*c'", False),
    ("dotty LIKE 'a.b\\*c' ESCAPE '\\'", True),
)
def test_like(text: str, expected: bool) -> None:
    assert check(text) is expected


@pytest.mark.parametrize(
    ("value", "pattern", "expected"),
    [
        ("", "%", True),
        ("", "_", False),
        ("", "", True),
        ("a", "", False),
        ("line1\nline2", "line1_line2", True),
        ("line1\nline2", "%\n%", True),
        ("(a+)+$", "(a+)+$", True),
        ("a^b", "a^_", True),
        ("x|y", "x|y", True),
        ("abcabc", "%abc", True),
        ("abab", "%ab%ab", True),
        ("aab", "%ab", True),
        ("ab", "a%b%", True),
        ("ab", "%a%b%c", False),
    ],
)
def test_like_edge_values(value: str, pattern: str, expected: bool) -> None:
    escaped = pattern.replace("'", "''")
    assert check(f"v LIKE '{escaped}'", {"v": value}) is expected


def test_like_on_null_and_non_string_is_unknown() -> None:
    assert truth("missing LIKE 'a%'") is None
    assert truth("missing NOT LIKE 'a%'") is None
    assert truth("i LIKE '3'") is None


def test_like_does_not_backtrack_catastrophically() -> None:
    f = compile_filter("v LIKE '%a%a%a%a%a%a%a%a%a%a%b'")
    assert f is not None
    assert not f.matches_properties({"v": "a" * 5000})  # instant; a naive regex would hang
    g = compile_filter("v LIKE '%a_%a_%a_%a_%a_%a_%a_%b'")  # the '_' (regex segment) path
    assert g is not None
    assert not g.matches_properties({"v": "a" * 5000})
    assert g.matches_properties({"v": "a" * 5000 + "b"})


# -- keywords and identifiers -------------------------------------------------------------


@case(
    ("color = 'red' and i = 3", True),
    ("color = 'red' And i = 3", True),
    ("color = 'red' aNd i = 3", True),
    ("f or t", True),
    ("not f", True),
    ("i between 1 and 5", True),
    ("missing is null", True),
    ("missing Is Not Null", False),
    ("t = true", True),
    ("path like '10!%' escape '!'", True),
    ("Color = 'blue'", True),  # identifiers are case-sensitive
    ("color = 'blue'", False),
    ("COLOR IS NULL", True),
    ("$odd_1 = 1", True),
    ("_x = 2", True),
)
def test_keywords_case_insensitive_identifiers_not(text: str, expected: bool) -> None:
    assert check(text, {**PROPS, "$odd_1": 1, "_x": 2}) is expected


def test_unicode_identifier() -> None:
    assert check("größe = 'XL'", {"größe": "XL"})
