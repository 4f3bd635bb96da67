"""Spark driver scripts run as processes of their own, so a test can kill one (with its JVM)
mid-batch and restart it from its checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def start_driver(script: Path, args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(log, "ab") as f:
        return subprocess.Popen(
            [sys.executable, str(script), *args],
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: the kill takes the JVM too
        )


def kill_group(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
