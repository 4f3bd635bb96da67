"""The built wheel installs one import name, ``waystation``, and nothing generic beside it,
with its hot modules compiled (mypyc) when a compiler is present and pure Python when not.

The wheel is built from a clean copy of the source tree, so a stale ``build/`` folder in the
checkout (which setuptools would pack as it is) cannot hide or add files.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_SKIP = shutil.ignore_patterns(
    ".git", "build", "dist", "*.egg-info", "__pycache__", "node_modules", ".hypothesis",
    ".*_cache", ".benchmarks", "tests", "bench",
)  # fmt: skip


def _build(tmp: Path, **env: str) -> tuple[zipfile.ZipFile, str]:
    """A wheel built from a clean copy of the tree, and what the build said on stderr."""
    src = tmp / "src"
    shutil.copytree(ROOT, src, ignore=_SKIP)
    out = tmp / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-v", "-w", str(out),
         "--disable-pip-version-check"],
        cwd=src, capture_output=True, text=True, timeout=600, env={**os.environ, **env},
    )  # fmt: skip
    assert build.returncode == 0, build.stdout + build.stderr
    (whl,) = out.glob("waystation-*.whl")
    return zipfile.ZipFile(whl), build.stdout + build.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    z, _ = _build(tmp_path_factory.mktemp("wheel"), WAYSTATION_COMPILE="1")
    with z:
        yield z


def _compiled_list() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        modules: list[str] = tomllib.load(f)["tool"]["waystation"]["mypyc"]["modules"]
    return modules


def test_hot_modules_are_compiled_beside_their_source(wheel: zipfile.ZipFile) -> None:
    """Built with WAYSTATION_COMPILE=1 (this machine has a compiler): the wheel ships each
    listed module compiled, its .py beside it, and mypyc's shared library."""
    names = wheel.namelist()
    assert any(n.startswith("waystation/compiled__mypyc.") and n.endswith(".so") for n in names)
    for module in _compiled_list():
        stem = "waystation/" + module.removesuffix(".py")
        assert f"{stem}.py" in names, module
        assert any(n.startswith(f"{stem}.") and n.endswith(".so") for n in names), module


def test_without_a_compiler_the_wheel_is_pure_python(tmp_path: Path) -> None:
    z, said = _build(tmp_path, WAYSTATION_COMPILE="auto", CC="no-such-compiler-here")
    with z:
        names = z.namelist()
    assert not [n for n in names if n.endswith(".so")]
    assert "waystation/core/queue.py" in names
    assert "no C compiler found, installing pure Python" in said


def test_only_the_waystation_namespace_at_the_top(wheel: zipfile.ZipFile) -> None:
    tops = {n.split("/", 1)[0] for n in wheel.namelist()}
    dist_info = {t for t in tops if t.startswith("waystation-") and t.endswith(".dist-info")}
    assert len(dist_info) == 1, tops
    assert tops == {"waystation", *dist_info}, f"unexpected top-level entries: {sorted(tops)}"
    names = set(wheel.namelist())
    for pkg in ("core", "wire", "gateway", "bridges", "client", "config", "pipeline"):
        assert f"waystation/{pkg}/__init__.py" in names, f"waystation.{pkg} missing from wheel"
    assert "waystation/__init__.py" in names
    top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
    assert wheel.read(top_level).decode().split() == ["waystation"]


def test_every_subpackage_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    """Each folder with an ``__init__.py`` in the repository ends up under ``waystation/``."""
    names = set(wheel.namelist())
    missing = []
    for pkg in ("core", "wire", "gateway", "bridges", "client", "config", "pipeline"):
        for init in (ROOT / pkg).rglob("__init__.py"):
            rel = init.relative_to(ROOT).as_posix()
            if f"waystation/{rel}" not in names:
                missing.append(rel)
    assert not missing, f"packages left out of the wheel: {missing}"


def test_example_configs_are_package_data(wheel: zipfile.ZipFile) -> None:
    examples = sorted(p.name for p in (ROOT / "config" / "examples").glob("*.toml"))
    assert examples, "config/examples/*.toml expected in the repository"
    names = set(wheel.namelist())
    missing = [e for e in examples if f"waystation/config/examples/{e}" not in names]
    assert not missing, f"example configs missing from the wheel: {missing}"


def test_console_assets_are_package_data(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    for asset in ("index.html", "console.js", "console.css"):
        assert f"waystation/gateway/http/console/static/{asset}" in names


def test_console_script(wheel: zipfile.ZipFile) -> None:
    ep = next(n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    parser = configparser.ConfigParser()
    parser.read_string(wheel.read(ep).decode())
    assert dict(parser["console_scripts"]) == {"waystation": "waystation.gateway.cli:main"}


def test_declared_dependencies(wheel: zipfile.ZipFile) -> None:
    """pyarrow is a main dependency: the event log writes Parquet."""
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    requires = [
        line.split(":", 1)[1].strip()
        for line in wheel.read(meta).decode().splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert any(r.replace(" ", "").startswith("pyarrow>=14") for r in requires), requires
