"""Read a TOML config file, substitute ``${ENV}`` references, validate, report every problem.

In any string value, ``${NAME}`` is replaced by the environment variable NAME (an error if
unset) and ``${NAME:default}`` falls back to ``default``; ``$${`` writes a literal ``${``.
The TOML parser is imported with the first file: a node on its embedded defaults never
needs it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from waystation.config.errors import ConfigError, Loc, describe, from_validation_error
from waystation.config.schema import Config

if TYPE_CHECKING:
    import tomllib

_REFERENCE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")
_TOML_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")


def _substitute(
    value: Any, env: Mapping[str, str], loc: Loc, missing: list[tuple[Loc, str]]
) -> Any:
    if isinstance(value, dict):
        return {k: _substitute(v, env, loc + (k,), missing) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, env, loc + (i,), missing) for i, v in enumerate(value)]
    if not isinstance(value, str) or "$" not in value:
        return value

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name is None:
            return "${"
        if name in env:
            return env[name]
        if default is not None:
            return default
        missing.append(
            (
                loc,
                f"environment variable {name!r} is not set (write ${{{name}:default}} for a fallback)",
            )
        )
        return match.group(0)

    return _REFERENCE.sub(replace, value)


def _toml_error(exc: tomllib.TOMLDecodeError, source: str) -> ConfigError:
    message = str(exc)
    position = _TOML_POSITION.search(message)
    if position is None:
        return ConfigError([f"{source}: invalid TOML: {message}"], source)
    detail = _TOML_POSITION.sub(f"(column {position.group(2)})", message)
    return ConfigError([f"{source} line {position.group(1)}: invalid TOML: {detail}"], source)


def parse_config(
    text: str,
    source: str = "<string>",
    *,
    base_dir: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Validate TOML ``text``; relative paths resolve against ``base_dir`` (default: the CWD)."""
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _toml_error(exc, source) from None
    missing: list[tuple[Loc, str]] = []
    data = _substitute(data, os.environ if env is None else env, (), missing)
    if missing:
        raise ConfigError([describe(loc, msg, source) for loc, msg in missing], source)
    context = {"base_dir": Path(base_dir) if base_dir is not None else Path.cwd(), "source": source}
    try:
        return Config.model_validate(data, context=context)
    except ValidationError as exc:
        raise from_validation_error(exc, source, text, Config) from None


def load_config(path: str | Path | None, *, env: Mapping[str, str] | None = None) -> Config:
    """Load and validate the file at ``path``; ``None`` gives the embedded default."""
    if path is None:
        return default_config()
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{source}: cannot read: {exc.strerror or exc}"], source) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [f"{source}: not UTF-8 text: {exc.reason} at byte {exc.start}"], source
        ) from None
    return parse_config(text, source, base_dir=Path(path).resolve().parent, env=env)


def default_config() -> Config:
    """The embedded default: loopback listeners, ``./data`` under the working directory."""
    return Config.model_validate({}, context={"base_dir": Path.cwd(), "source": None})


__all__ = ["ConfigError", "default_config", "load_config", "parse_config"]
