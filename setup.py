"""Package layout, and the optional mypyc build of the hot modules (metadata: pyproject.toml).

The repository keeps the product's top-level folders (core/, gateway/, ...); installed, each
one is a subpackage of the single ``waystation`` namespace, so nothing generic such as
``core`` or ``config`` lands at the top of site-packages.

The modules listed in ``[tool.waystation.mypyc]`` (pyproject.toml) can be compiled with mypyc:
the node then needs about half the CPU per message. Compiling takes over a minute, so it is
asked for; the .py files are always installed too. ``WAYSTATION_COMPILE`` picks:

- unset or ``0``: pure Python; an editable install also removes the in-place builds an earlier
  compiling editable install left, so an edited .py file is never shadowed by a stale one;
- ``1``: compile, editable installs too (in place, beside the .py files: rerun the install
  after editing a compiled module), and fail instead of falling back;
- ``auto``: compile when a C compiler and mypyc are there and the build succeeds, else pure.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tomllib
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

TOP_LEVEL = ("core", "wire", "gateway", "bridges", "client", "config", "pipeline")
GROUP = "waystation.compiled"  # mypyc's shared library: waystation/compiled__mypyc.*.so
BUILD = Path("build") / "mypyc"

packages = ["waystation"] + [
    f"waystation.{name}" for name in find_packages(include=[f"{t}*" for t in TOP_LEVEL])
]
package_dir = {"waystation": "waystation", **{f"waystation.{t}": t for t in TOP_LEVEL}}


def _log(text: str) -> None:
    print(f"waystation setup: {text}", file=sys.stderr)


def _modules() -> list[str]:
    """The repository paths to compile, e.g. ``wire/stomp.py``."""
    with open("pyproject.toml", "rb") as f:
        return list(tomllib.load(f).get("tool", {}).get("waystation", {}).get("mypyc", {})
                    .get("modules", []))  # fmt: skip


def _compiled_files() -> list[Path]:
    """Compiled modules an in-place build left beside their .py files (any, listed or not)."""
    found = [
        p
        for t in TOP_LEVEL
        for p in Path(t).rglob("*")
        if p.suffix in (".so", ".pyd") and p.with_name(p.name.split(".")[0] + ".py").exists()
    ]
    return found + list(Path("waystation").glob(f"{GROUP.rsplit('.', 1)[1]}__mypyc.*"))


def _has_compiler() -> bool:
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shutil.which(cc.split()[0]) is not None


def _mypyc_extensions(modules: list[str]) -> list[Extension]:
    """mypyc's extensions for ``modules``, type-checked as ``waystation.<folder>...``.

    mypy names a module after the folders with an ``__init__.py`` above it, so it gets a copy
    of the tree laid out as installed (``build/mypyc/src/waystation/wire/stomp.py``).
    """
    from mypyc.build import mypycify

    src = BUILD / "src"
    shutil.rmtree(src, ignore_errors=True)
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", "*.c")
    (src / "waystation").mkdir(parents=True)
    shutil.copy2("waystation/__init__.py", src / "waystation" / "__init__.py")
    for t in TOP_LEVEL:
        shutil.copytree(t, src / "waystation" / t, ignore=skip)
    config = BUILD / "mypy.ini"
    # Only the listed modules must type-check here: the build environment lacks the runtime
    # dependencies (pydantic ...), so errors in the modules they import are not the build's.
    config.write_text(
        "[mypy]\nignore_missing_imports = True\nfollow_imports = silent\nstrict_bytes = True\n"
    )
    options = ["--config-file", str(config), "--cache-dir", str(BUILD / "cache")]
    paths = [str(src / "waystation" / m) for m in modules]
    return mypycify(options + paths, group_name=GROUP, target_dir=str(BUILD / "c"))


class OptionalBuildExt(build_ext):
    """Builds the compiled modules, or (WAYSTATION_COMPILE=auto) none of them on error."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, a compiler error, a linker error ...
            if STRICT:
                raise
            _log(f"compiling failed, installing pure Python ({type(exc).__name__}: {exc!s:.300})")
            for path in self.get_outputs():  # all or nothing: a shim needs the shared library
                Path(path).unlink(missing_ok=True)
            self.extensions: list[Extension] = []


MODE = os.environ.get("WAYSTATION_COMPILE", "").strip()
STRICT = MODE == "1"
COMPILE = STRICT or MODE == "auto"
ARGS = set(sys.argv[1:])
EDITABLE = bool({"editable_wheel", "develop"} & ARGS or {"--inplace", "-i"} & ARGS)  # in the tree
BUILDING = bool({"bdist_wheel", "build", "build_ext", "install"} & ARGS)
ext_modules: list[Extension] = []
modules = _modules()
if EDITABLE and not COMPILE:
    for stale in _compiled_files():
        _log(f"editable install stays pure Python: removing {stale}")
        stale.unlink()
elif modules and COMPILE and (EDITABLE or BUILDING):
    if not STRICT and not _has_compiler():
        _log("no C compiler found, installing pure Python")
    else:
        try:
            ext_modules = _mypyc_extensions(modules)
        except (Exception, SystemExit) as exc:  # mypy missing, or mypyc rejects the code
            if STRICT:
                raise
            _log(f"mypyc unavailable, installing pure Python ({type(exc).__name__}: {exc!s:.300})")

setup(
    packages=packages,
    package_dir=package_dir,
    ext_modules=ext_modules,
    cmdclass={"build_ext": OptionalBuildExt},
)
