"""A relay (client/relay.py) on its own event loop thread, for synchronous clients."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from waystation.client.relay import Relay, RelaySpec


async def _settle() -> None:
    """Let what the closed upstreams left running (a tunnel's DELETE) finish."""
    others = asyncio.all_tasks() - {asyncio.current_task()}
    if others:
        await asyncio.wait(others, timeout=10)


class RelayThread:
    """``Relay(RelaySpec.parse(...))`` served from a background loop; ``port`` is bound."""

    def __init__(self, to: str, **kw: Any) -> None:
        self.spec = RelaySpec.parse("127.0.0.1:0", to, **kw)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.relay = Relay(self.spec)
        self.port = 0

    def __enter__(self) -> RelayThread:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.relay.start(), self.loop).result(10)
        self.port = self.relay.bound_port()
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.relay.stop(), self.loop).result(15)
        asyncio.run_coroutine_threadsafe(_settle(), self.loop).result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    @property
    def stats(self) -> dict[str, int]:
        return dict(self.relay.stats)


__all__ = ["RelayThread"]
