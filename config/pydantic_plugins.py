"""Pydantic's plugin lookup without ``importlib.metadata`` when no plugin is installed.

Why: on its first model, pydantic imports ``pydantic.plugin._loader`` to find plugins, and
that module imports ``importlib.metadata``, which brings ``email``, ``zipfile``, ``csv``,
``tempfile``, ``shutil``, ``bz2`` and ``lzma``: 2.2 MB of an idle node's resident memory
(issue 16 budgets 40 MB in all), for a lookup that finds nothing where no installed
distribution declares a ``pydantic`` entry point.  :func:`install` puts a stand-in for that
module in ``sys.modules`` whose ``get_plugins`` looks for such a declaration with a plain
directory scan of ``sys.path``; if it finds one, or cannot tell (a zip on the path), it
hands over to pydantic's own loader, so installed plugins still load as before.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterable
from typing import Any

LOADER = "pydantic.plugin._loader"
_GROUP = "[pydantic]"


def _declared_anywhere() -> bool:
    """Whether any distribution on ``sys.path`` may declare a ``pydantic`` entry point."""
    for entry in sys.path:
        path = entry or "."
        if not os.path.isdir(path):
            if os.path.exists(path):  # a zip or egg file: only importlib.metadata can tell
                return True
            continue
        try:
            names = os.listdir(path)
        except OSError:
            continue
        for name in names:
            if name.endswith((".dist-info", ".egg-info")):
                meta = os.path.join(path, name)
            elif name.endswith(".egg"):  # an old-style egg folder
                meta = os.path.join(path, name, "EGG-INFO")
            else:
                continue
            try:
                with open(os.path.join(meta, "entry_points.txt"), encoding="utf-8") as f:
                    if any(line.strip() == _GROUP for line in f):
                        return True
            except (OSError, UnicodeDecodeError):
                continue
    return False


def _real_loader() -> Any:
    """Pydantic's own loader module, imported in place of the stand-in."""
    import importlib

    if isinstance(sys.modules.get(LOADER), _Standin):
        del sys.modules[LOADER]
    return importlib.import_module(LOADER)


class _Standin(types.ModuleType):
    """``pydantic.plugin._loader`` until a plugin may exist; then pydantic's own."""

    _none: bool | None = None  # no distribution declares a plugin (None: not looked yet)

    def get_plugins(self, *args: Any, **kwargs: Any) -> Iterable[Any]:
        if os.getenv("PYDANTIC_DISABLE_PLUGINS") in ("__all__", "1", "true"):
            return ()
        if self._none is None:
            self._none = not _declared_anywhere()
        if self._none:
            return ()
        return _real_loader().get_plugins(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        """Anything else a later pydantic may take from its loader: the real one's."""
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(_real_loader(), name)


def install() -> None:
    """Use the stand-in unless pydantic's loader is already imported (then nothing to save)."""
    if LOADER not in sys.modules:
        sys.modules[LOADER] = _Standin(LOADER, __doc__)


__all__ = ["LOADER", "install"]
