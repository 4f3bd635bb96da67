"""Compiled filters: parse once at subscribe/config time, evaluate per message for cheap.

The parser and evaluator are imported by the first compile: a node whose config, queues
and clients use no selector never loads them (its idle memory, issue 16).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING

from waystation.core.filter.errors import FilterError

if TYPE_CHECKING:
    from waystation.core.filter.evaluator import Eval
    from waystation.core.filter.nodes import Node
    from waystation.core.message import Message

MAX_FILTER_LENGTH = 8192  # characters; anything longer is refused, not parsed

_log = logging.getLogger(__name__)


class Filter:
    """A compiled selector.  Instances are shared (cached by text) and immutable."""

    __slots__ = ("text", "_node", "_eval", "_props_eval", "_failed")

    def __init__(self, text: str, node: Node) -> None:
        from waystation.core.filter.evaluator import compile_node
        from waystation.core.filter.headers import message_header

        self.text = text
        self._node = node
        self._eval: Eval = compile_node(node, message_header)
        self._props_eval: Eval | None = None  # built on first matches_properties()
        self._failed = False

    def matches(self, message: Message) -> bool:
        """True only when the selector is TRUE for ``message`` (FALSE and UNKNOWN reject)."""
        try:
            return self._eval(message.properties, message) is True
        except Exception:  # a bug here must reject one message, not kill a delivery loop
            self._report()
            return False

    def matches_properties(self, props: Mapping[str, object]) -> bool:
        """Evaluate against a plain mapping; header names such as ``JMSPriority`` are keys."""
        try:
            return self.evaluate(props) is True
        except Exception:
            self._report()
            return False

    def evaluate(self, props: Mapping[str, object]) -> bool | None:
        """The three-valued result (None = UNKNOWN) against a plain mapping; for diagnostics."""
        f = self._props_eval
        if f is None:
            from waystation.core.filter.evaluator import compile_node
            from waystation.core.filter.headers import no_header

            f = self._props_eval = compile_node(self._node, no_header)
        result: bool | None = f(props, None)
        return result

    def _report(self) -> None:
        if not self._failed:
            self._failed = True
            _log.exception("filter %r failed during evaluation; treating as no match", self.text)

    def __repr__(self) -> str:
        return f"Filter({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Filter) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def compile_filter(text: str | None) -> Filter | None:
    """Compile ``text``; None/empty/blank means "all messages" and gives None.

    Raises FilterError (a ValueError) for anything that is not a valid selector, so bad
    filters are refused when the queue, consumer or bridge is created.
    """
    if text is None:
        return None
    if len(text) > MAX_FILTER_LENGTH:
        raise FilterError(
            text,
            MAX_FILTER_LENGTH,
            "",
            f"filter longer than {MAX_FILTER_LENGTH} characters",
            "limit",
        )
    if not text.strip():
        return None
    return _compile_cached(text)


@lru_cache(maxsize=1024)
def _compile_cached(text: str) -> Filter:
    from waystation.core.filter.parser import parse

    try:
        node = parse(text)
    except RecursionError:  # defence in depth: the parser's own depth limit should fire first
        raise FilterError(text, 0, "", "expression nested too deeply", "limit") from None
    return Filter(text, node)
