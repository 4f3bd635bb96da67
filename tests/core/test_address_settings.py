"""Wildcard patterns and address settings merged from the most specific pattern."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from waystation.core.address import (
    InvalidAddress,
    matches,
    specificity,
    split_remote,
    validate_name,
)
from waystation.core.settings import AddressSettings, FullPolicy, SettingsRepository

CASES = [
    ("news.europe.#", "news.europe", True),
    ("news.europe.#", "news.europe.sport", True),
    ("news.europe.#", "news.europe.politics.regional", True),
    ("news.europe.#", "news.usa", False),
    ("news.europe.#", "entertainment", False),
    ("news.*", "news.europe", True),
    ("news.*", "news.europe.sport", False),
    ("news.*", "news", False),
    ("news.*.sport", "news.usa.sport", True),
    ("news.*.sport", "news.europe.politics", False),
    ("a.#.z", "a.z", True),
    ("a.#.z", "a.b.c.z", True),
    ("a.#.z", "a.b.c", False),
    ("#.sport", "sport", True),
    ("#.sport", "a.b.sport", True),
    ("#", "anything.at.all", True),
    ("a.b", "a.b", True),
    ("a+b", "a+b", True),  # regex metacharacters are literal
    ("a.(b)", "a.x", False),
]


@pytest.mark.parametrize("pattern,address,expected", CASES)
def test_wildcard_matching(pattern, address, expected):
    assert matches(pattern, address) is expected


words = st.sampled_from(["a", "b", "c"])


@settings(max_examples=300)
@given(
    st.lists(st.one_of(words, st.just("*"), st.just("#")), min_size=1, max_size=5),
    st.lists(words, min_size=1, max_size=6),
)
def test_matching_agrees_with_a_regex_reference(pattern_words, address_words):
    pattern, address = ".".join(pattern_words), ".".join(address_words)
    # independent reference: every word carries its trailing dot, so '#' is "(word.)*"
    rx = "".join(
        {"*": r"[^.]+\.", "#": r"(?:[^.]+\.)*"}.get(w, re.escape(w) + r"\.") for w in pattern_words
    )
    assert matches(pattern, address) is (re.fullmatch(rx, address + ".") is not None)


def test_specificity_order():
    ordered = sorted(
        ["#", "orders.#", "orders.*", "orders.eu", "orders.*.x", "*.eu"],
        key=specificity,
        reverse=True,
    )
    assert ordered[0] == "orders.eu"
    assert ordered.index("orders.*") < ordered.index("orders.#") < ordered.index("#")
    assert ordered.index("orders.*.x") < ordered.index("orders.#")


def test_invalid_names_are_refused():
    for bad in ("", "a..b", ".a", "a.", "a.b*", "x\ny"):
        with pytest.raises(InvalidAddress):
            validate_name(bad)
    with pytest.raises(InvalidAddress, match="concrete"):
        validate_name("a.#", allow_wildcards=False)


def test_split_remote():
    assert split_remote("site-b::orders") == ("site-b", "orders")
    assert split_remote("orders") == (None, "orders")


def test_settings_merge_field_by_field_from_most_specific():
    repo = SettingsRepository(
        {
            "#": AddressSettings(
                dead_letter_address="DLQ", max_delivery_attempts=10, redelivery_delay_ms=5
            ),
            "orders.#": AddressSettings(max_delivery_attempts=5, full_policy=FullPolicy.BLOCK),
            "orders.eu": AddressSettings(redelivery_delay_ms=100),
        }
    )
    eu = repo.resolve("orders.eu")
    assert (
        eu.dead_letter_address,
        eu.max_delivery_attempts,
        eu.redelivery_delay_ms,
        eu.full_policy,
    ) == (
        "DLQ",
        5,
        100,
        FullPolicy.BLOCK,
    )
    us = repo.resolve("orders.us")
    assert (us.max_delivery_attempts, us.redelivery_delay_ms) == (5, 5)
    other = repo.resolve("billing")
    assert (other.max_delivery_attempts, other.full_policy, other.default_consumer_window) == (
        10,
        FullPolicy.PAGE,
        1000,
    )
    repo.set("billing", AddressSettings(max_delivery_attempts=1))
    assert repo.resolve("billing").max_delivery_attempts == 1  # the cache is refreshed


def test_memory_is_bounded_by_default():
    """With no settings at all a backlog pages to disk past 64 MiB per address."""
    r = SettingsRepository().resolve("any.address")
    assert r.max_size_bytes == 64 * 1024 * 1024 and r.full_policy is FullPolicy.PAGE
    assert not SettingsRepository().has_size_limits()  # PAGE needs no per-send checks
    strict = SettingsRepository({"a.#": AddressSettings(full_policy=FullPolicy.BLOCK)})
    assert strict.has_size_limits()  # inherits the default limit with a blocking policy


def test_the_node_default_duplicate_cache_size_applies_where_no_pattern_sets_one(run):
    """``[node] id_cache_size`` reaches the engine as ``duplicate_cache_size``: the default
    for every address, and a pattern's own value still wins."""
    from enginekit import make_engine

    from waystation.core.settings import AddressSettings

    async def go():
        eng = await make_engine(
            None,
            {"orders.#": AddressSettings(duplicate_cache_size=7)},
            duplicate_cache_size=2,
        )
        assert eng.post.dup_cache("news").size == 2
        assert eng.post.dup_cache("orders.eu").size == 7
        await eng.stop()

    run(go())
