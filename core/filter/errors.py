"""The one exception a filter can raise: at compile time, never while evaluating."""

from __future__ import annotations

_TOKEN_SHOWN = 24  # long tokens (an unterminated string) are cut in the message


class FilterError(ValueError):
    """A filter that cannot be compiled, pointing at the offending token.

    ``position`` is a 0-based character offset into ``text``; ``token`` is the source text of
    the token found there ('' at the end of input), so a caller can underline it.
    """

    def __init__(
        self, text: str, position: int, token: str, reason: str, kind: str = "syntax"
    ) -> None:
        self.text = text
        self.position = position
        self.token = token
        self.reason = reason
        self.kind = kind
        shown = token if len(token) <= _TOKEN_SHOWN else token[:_TOKEN_SHOWN] + "..."
        where = f" near {shown!r}" if token else " at end of input" if position >= len(text) else ""
        super().__init__(f"filter {kind} error at position {position}{where}: {reason}")

    def __reduce__(self) -> tuple[type[FilterError], tuple[str, int, str, str, str]]:
        # Custom __init__ arguments: teach pickle how to rebuild us.
        return (FilterError, (self.text, self.position, self.token, self.reason, self.kind))
