"""What every browser test shares: launching Debian's chromium, kept away from the network,
and keeping screenshots as evidence."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ARTIFACTS = HERE / "artifacts"
EVIDENCE = HERE.parents[1] / "docs" / "evidence"

# Chromium's own background requests (updates, accounts) must not leave the machine: no
# host name resolves but loopback, and through the proxy they are sent direct (and fail
# there) instead of letting squid look them up.
LOOPBACK_ONLY = "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"
NOT_PROXIED = "*.com;*.net;*.org;*.dev;*.app;*.io"


def launch(playwright: Any, chromium: str, *args: str) -> Any:
    return playwright.chromium.launch(
        executable_path=chromium,
        args=["--no-sandbox", "--disable-gpu", LOOPBACK_ONLY, *args],
        timeout=30000,
    )


def screenshot(page: Any, shot: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / shot), full_page=True)


def keep_evidence(shot: str, name: str) -> None:
    """Copy a screenshot to docs/evidence (committed) when WAYSTATION_EVIDENCE=1; a normal run
    leaves the tracked copies alone and keeps its own in tests/browser/artifacts."""
    if os.environ.get("WAYSTATION_EVIDENCE") == "1":
        EVIDENCE.mkdir(parents=True, exist_ok=True)
        shutil.copy(ARTIFACTS / shot, EVIDENCE / name)
