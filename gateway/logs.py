"""The node's logging, from the ``[logging]`` table: a text or JSON line per record on
stderr, a level, and levels per logger.

JSON output is one object per line (``time``, ``level``, ``logger``, ``message``, then any
``extra=`` fields the call passed, and ``exception`` with the traceback) so that a log
shipper needs no parsing rules.  :func:`configure` runs at start and again on each reload;
it replaces only the handler it installed itself and resets the levels it set before, so a
reload that drops a per-logger level takes effect and a test harness's handlers stay.
Command-line overrides (``--log-level``, ``--log-format``) given at start win over the file,
on reload as well.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from waystation.config.schema import Config

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# what every LogRecord carries; anything else on a record came from ``extra=``
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = record.stack_info
        import json  # here: a node logging text need not load it

        return json.dumps(out, default=str, ensure_ascii=False)


class _Handler(logging.StreamHandler):
    """The handler this module installs (and later replaces)."""


class _State:
    level_override: str | None = None
    format_override: str | None = None
    named: set[str] = set()  # loggers given a level by the last configure()


def configure(
    cfg: Config,
    level: str | None = None,
    fmt: str | None = None,
    stream: IO[str] | None = None,
) -> None:
    """Apply ``cfg.logging`` (and ``node.log_level``); ``level``/``fmt`` are the command
    line's overrides, remembered for later calls without them (a reload)."""
    if level is not None:
        _State.level_override = level
    if fmt is not None:
        _State.format_override = fmt
    lc = cfg.logging
    root_level = _State.level_override or lc.level or cfg.node.log_level
    form = _State.format_override or lc.format
    root = logging.getLogger()
    old = [h for h in root.handlers if isinstance(h, _Handler) or _is_basic(h)]
    handler = _Handler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if form == "json" else logging.Formatter(TEXT_FORMAT))
    for h in old:
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(_level(root_level))
    for name in _State.named - lc.levels.keys():
        logging.getLogger(name).setLevel(logging.NOTSET)
    for name, lvl in lc.levels.items():
        logging.getLogger(name).setLevel(_level(lvl))
    _State.named = set(lc.levels)


def _is_basic(h: logging.Handler) -> bool:
    """The stderr handler ``logging.basicConfig`` adds (replaced, or lines come out twice)."""
    return type(h) is logging.StreamHandler and h.stream in (sys.stderr, sys.__stderr__)


def _level(name: str) -> int:
    value = logging.getLevelName(name.upper())
    return value if isinstance(value, int) else logging.INFO


def describe(cfg: Config) -> str:
    """The logging in effect, in words (a reload's list of changes)."""
    lc = cfg.logging
    levels = ", ".join(f"{k}={v}" for k, v in sorted(lc.levels.items()))
    root = _State.level_override or lc.level or cfg.node.log_level
    return f"logging: {_State.format_override or lc.format}, {root}" + (
        f" ({levels})" if levels else ""
    )


__all__ = ["TEXT_FORMAT", "JsonFormatter", "configure", "describe"]
