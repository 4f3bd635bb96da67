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


def pytest_configure(config: pytest.Config) -> None:
    """Refuse to test a compiled module older than its source (scripts/test compiles in place).

    A ``WAYSTATION_COMPILE=1`` editable install leaves ``core/queue.*.so`` beside
    ``core/queue.py``, and Python imports the .so first: an edit made since would go untested.
    """
    stale = [
        str(so.relative_to(ROOT))
        for top in ("core", "wire", "gateway")
        for so in (ROOT / top).rglob("*.so")
        if (src := so.with_name(so.name.split(".")[0] + ".py")).exists()
        and src.stat().st_mtime > so.stat().st_mtime
    ]
    if stale:
        pytest.exit(
            f"compiled modules older than their .py files: {', '.join(stale)}; rerun "
            "scripts/test (compiles them again) or `pip install -e .` (pure Python)",
            returncode=4,
        )


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
