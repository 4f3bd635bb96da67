"""Pydantic plugins still load with config's stand-in for pydantic's plugin lookup.

config/pydantic_plugins.py keeps ``importlib.metadata`` out of a node that has no pydantic
plugin installed (tests/packaging/test_idle_imports.py); where a distribution declares one,
pydantic's own loader must take over and the plugin see our models, as before.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PLUGIN = """
seen = []

class Plugin:
    def new_schema_validator(self, schema, schema_type, path, kind, config, settings):
        seen.append(path.name)
        return None, None, None

plugin = Plugin()
"""

CHILD = """
import sys
before = "importlib.metadata" in sys.modules
import waystation.config
import probe_plugin
print("preloaded" if before else "metadata" if "importlib.metadata" in sys.modules else "none")
print(",".join(probe_plugin.seen))
"""


def _run(path: Path) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD)],
        cwd=path,
        env={"PYTHONPATH": str(path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.splitlines()


def _plugin_module(path: Path) -> None:
    (path / "probe_plugin.py").write_text(PLUGIN)


def test_a_declared_plugin_sees_the_config_models(tmp_path: Path) -> None:
    _plugin_module(tmp_path)
    dist = tmp_path / "probe_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: probe-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pydantic]\nprobe = probe_plugin:plugin\n")
    _, seen = _run(tmp_path)
    assert "Config" in seen.split(",")


def test_without_a_declared_plugin_metadata_is_not_loaded(tmp_path: Path) -> None:
    _plugin_module(tmp_path)  # importable, but no distribution declares it
    metadata, seen = _run(tmp_path)
    if metadata == "preloaded":
        pytest.skip("this interpreter loads importlib.metadata at start (a .pth file)")
    assert (metadata, seen) == ("none", "")
