import asyncio
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
for p in (
    ROOT,
    ROOT / "tests",
    ROOT / "tests" / "core",
    ROOT / "tests" / "gateway",
    ROOT / "tests" / "bridges",
):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


@pytest.fixture
def run():
    """Run a coroutine to completion on a fresh event loop."""

    def _run(coro, timeout: float = 60):
        return asyncio.run(asyncio.wait_for(coro, timeout))

    return _run


@pytest.fixture
def make_squid():
    """Real squids (tests/squidkit.py), by default denying CONNECT and WebSocket upgrades;
    each is stopped and its folder removed at teardown."""
    from squidkit import Squid

    made: list[Squid] = []

    def make(**options: object) -> Squid:
        made.append(Squid(**options))  # type: ignore[arg-type]
        return made[-1]

    yield make
    for s in made:
        s.close()
