"""Config errors written for operators: file, TOML key path, what is wrong (and the line)."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from waystation.config.locate import key_lines
from waystation.config.units import describe_value

Loc = tuple[str | int, ...]


class ConfigError(Exception):
    """A config that cannot be used; ``str(e)`` is the full report, one problem per line."""

    def __init__(self, problems: Sequence[str], source: str | None = None) -> None:
        self.problems: list[str] = list(problems)
        self.source = source
        super().__init__("\n".join(self.problems))


class Problems(ValueError):
    """Raised by model validators to report several problems, each at a path below the model."""

    def __init__(self, problems: Iterable[tuple[Loc, str]]) -> None:
        self.items: list[tuple[Loc, str]] = list(problems)
        super().__init__("; ".join(msg for _, msg in self.items))


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def format_key(key: str) -> str:
    """A TOML key as written in a file: bare when possible, else a quoted string."""
    if _BARE_KEY.fullmatch(key):
        return key
    escaped = key.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def format_loc(loc: Loc) -> str:
    """``("diverts", 0, "filter")`` -> ``[[diverts]][0].filter``; dict keys quoted as in TOML."""
    out = ""
    for i, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif i == 0 and len(loc) > 1 and isinstance(loc[1], int):
            out = f"[[{format_key(part)}]]"
        else:
            out += ("." if out else "") + format_key(part)
    return out


_TYPE_MESSAGES = {
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "string_type": "expected a string",
    "list_type": "expected an array",
    "dict_type": "expected a table",
    "model_type": "expected a table",
    "model_attributes_type": "expected a table",
}
_BOUNDS = {
    "greater_than": ("gt", "greater than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}


def _message(err: Any) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "extra_forbidden":
        return f"unknown key {err['loc'][-1]!r}"
    if kind == "missing":
        return f"missing required key {err['loc'][-1]!r}"
    if kind == "list_type" and isinstance(value, dict) and len(err["loc"]) == 1:
        return (
            f"expected an array of tables, got a table (write [[{err['loc'][0]}]] for each entry)"
        )
    if kind in _TYPE_MESSAGES:
        return f"{_TYPE_MESSAGES[kind]}, got {describe_value(value)}"
    if kind in _BOUNDS:
        key, words = _BOUNDS[kind]
        return f"must be {words} {ctx.get(key)}, got {describe_value(value)}"
    if kind == "too_short":
        return "must not be empty" if ctx.get("min_length") == 1 else err["msg"]
    if kind in ("value_error", "assertion_error"):
        return str(ctx.get("error", err["msg"]))
    return f"{err['msg'][:1].lower()}{err['msg'][1:]}, got {describe_value(value)}"


def _model_at(root: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model class validating the table at ``loc`` (through lists, dicts and Optional)."""
    current: Any = root
    for part in loc:
        if isinstance(current, type) and issubclass(current, BaseModel) and isinstance(part, str):
            field = current.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
        elif typing.get_origin(current) in (list, dict):
            current = typing.get_args(current)[-1]
        else:
            return None
        while typing.get_origin(current) in (typing.Union, types.UnionType, typing.Annotated):
            args = [a for a in typing.get_args(current) if a is not type(None)]
            current = args[0]
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _suggest(root: type[BaseModel] | None, loc: Loc, key: object) -> str:
    model = _model_at(root, loc) if root is not None else None
    if model is None or not isinstance(key, str):
        return ""
    import difflib  # only for a wrong key: not loaded with a valid config

    close = difflib.get_close_matches(key, list(model.model_fields), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _expand(
    errors: Iterable[Any], root: type[BaseModel] | None = None
) -> list[tuple[Loc, Loc, str]]:
    """Pydantic errors -> (key path, path to find the line, message).

    ``Problems`` fan out into their own paths; a ``[key]`` marker means the key is bad.
    """
    out: list[tuple[Loc, Loc, str]] = []
    for err in errors:
        loc: Loc = tuple(err["loc"])
        error = (err.get("ctx") or {}).get("error")
        if isinstance(error, Problems):
            out.extend((loc + sub, loc + sub, msg) for sub, msg in error.items)
            continue
        message, line_loc = _message(err), loc
        if loc and loc[-1] == "[key]":
            loc = line_loc = loc[:-1]
            message = f"invalid key: {message}"
        elif err["type"] == "extra_forbidden":
            loc = loc[:-1]
            message += _suggest(root, loc, line_loc[-1])
        elif err["type"] == "missing":
            loc = line_loc = loc[:-1]
        out.append((loc, line_loc, message))
    return out


def describe(
    loc: Loc,
    message: str,
    source: str,
    lines: dict[Loc, int] | None = None,
    line_loc: Loc | None = None,
) -> str:
    """``site.toml: [[diverts]][0].filter: <message> (line 12)``."""
    where = f"{format_loc(loc)}: " if loc else ""
    line, probe = None, loc if line_loc is None else line_loc
    if lines:
        for n in range(len(probe), 0, -1):
            line = lines.get(probe[:n])
            if line is not None:
                break
    suffix = f" (line {line})" if line is not None else ""
    return f"{source}: {where}{message}{suffix}"


def from_validation_error(
    exc: ValidationError, source: str, text: str | None = None, root: type[BaseModel] | None = None
) -> ConfigError:
    """Every error in ``exc`` as one operator-readable line (``text`` gives line numbers)."""
    lines = key_lines(text) if text is not None else None
    seen: set[str] = set()
    problems = []
    for loc, line_loc, message in _expand(exc.errors(), root):
        line = describe(loc, message, source, lines, line_loc)
        if line not in seen:
            seen.add(line)
            problems.append(line)
    return ConfigError(problems, source)


__all__ = [
    "ConfigError",
    "Loc",
    "Problems",
    "describe",
    "format_key",
    "format_loc",
    "from_validation_error",
]
