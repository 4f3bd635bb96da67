"""A ``Link`` whose bytes wait in a buffer until the transport takes them.

WebSocket, the HTTP tunnel and SockJS cannot write synchronously: a writer task (or the
next downstream poll) takes everything written since it last looked, so the frames of one
loop turn travel together.  Past ``high`` buffered bytes the session is told to pause its
consumers; below ``low`` it resumes, so a slow reader holds messages in their queues, not
in this buffer.  ``reading`` is clear while the session holds its input back (a send to a
BLOCK-policy address that is full); closing sets it, so a transport waiting on it wakes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

SLICE = 64 * 1024  # input bytes given to a session per loop turn


class FlowTarget(Protocol):
    def pause_writing(self) -> None: ...

    def resume_writing(self) -> None: ...


class InputTarget(Protocol):
    def data_received(self, data: bytes) -> None: ...


class QueuedLink:
    def __init__(self, peer: str, high: int = 1 << 20, low: int = 1 << 18) -> None:
        self.peer = peer
        self.high = high
        self.low = low
        self.target: FlowTarget | None = None
        self.closing = False  # the session asked to close once what is queued is taken
        self.reading = asyncio.Event()
        self.reading.set()
        self._chunks: list[bytes] = []
        self._size = 0
        self._ready = asyncio.Event()
        self._paused = False

    # -- Link (the session's side) --------------------------------------------------------
    def write(self, data: bytes) -> None:
        if self.closing:
            return
        self._chunks.append(data)
        self._size += len(data)
        self._ready.set()
        if not self._paused and self._size > self.high and self.target is not None:
            self._paused = True
            self.target.pause_writing()

    def close(self) -> None:
        self.closing = True
        self._ready.set()
        self.reading.set()  # whoever waits to feed more input must wake and see the close

    def pause_reading(self) -> None:
        self.reading.clear()

    def resume_reading(self) -> None:
        self.reading.set()

    # -- the transport's side ------------------------------------------------------------
    @property
    def pending(self) -> int:
        return self._size

    def take(self, limit: int | None = None) -> bytes:
        """Everything written so far (or about ``limit`` bytes of it, whole writes only)."""
        chunks = self._chunks
        if limit is None or self._size <= limit:
            self._chunks = []
            self._size = 0
        else:
            n = taken = 0
            while n < len(chunks) and (n == 0 or taken + len(chunks[n]) <= limit):
                taken += len(chunks[n])
                n += 1
            chunks, self._chunks = chunks[:n], chunks[n:]
            self._size -= taken
        if not self._chunks and not self.closing:
            self._ready.clear()
        if self._paused and self._size < self.low and self.target is not None:
            self._paused = False
            self.target.resume_writing()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def wait(self, timeout: float | None = None) -> bool:
        """Until bytes are queued or the link is closing; False on timeout."""
        if self._chunks or self.closing:
            return True
        try:
            await asyncio.wait_for(self._ready.wait(), timeout)
        except TimeoutError:
            return False
        return True


async def feed(
    target: InputTarget,
    link: QueuedLink,
    data: bytes,
    resumed: Callable[[], Awaitable[bool]],
) -> bool:
    """Give ``data`` to ``target`` in SLICE pieces, one per loop turn, so a large message of
    tiny frames cannot stall every other connection; before each piece, while the session
    holds its input back, await ``resumed`` (False: stop).  False when feeding stopped
    early, because of ``resumed`` or because the link is closing."""
    view = memoryview(data)
    for start in range(0, len(data), SLICE):
        if start:
            await asyncio.sleep(0)
        if not link.reading.is_set() and not await resumed():
            return False
        if link.closing:
            return False
        target.data_received(data if len(data) <= SLICE else bytes(view[start : start + SLICE]))
    return True


__all__ = ["SLICE", "FlowTarget", "InputTarget", "QueuedLink", "feed"]
