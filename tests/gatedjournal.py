"""A real FileJournal behind a gate: what a slow disk looks like to the engine.

Its synchronous writes (and flushes) are done by the journal as usual but reported done only
once the test sets ``gate``.  It wraps the journal instead of subclassing it, because the
compiled build (mypyc) refuses interpreted subclasses of its classes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from waystation.core.store.api import Op
from waystation.core.store.journal import FileJournal


class GatedJournal:
    # the engine's persistence then goes through write(), and so through the gate
    write_into = None

    def __init__(self, directory: Path) -> None:
        self.inner = FileJournal(directory)
        self.gate = asyncio.Event()
        self.held = 0  # sync writes acknowledged late
        self._tasks: set[asyncio.Task[None]] = set()

    def __getattr__(self, name: str) -> Any:  # open, close, stats ...: the journal's own
        return getattr(self.inner, name)

    def write(self, ops: Sequence[Op], sync: bool) -> asyncio.Future[None] | None:
        done = self.inner.write(ops, sync)
        if done is None:
            return None
        late: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.held += 1

        async def release() -> None:
            try:
                await done
            except Exception as e:
                late.set_exception(e)
                return
            await self.gate.wait()
            late.set_result(None)

        task = asyncio.get_running_loop().create_task(release())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return late

    async def flush(self) -> None:
        await self.inner.flush()
        await self.gate.wait()
