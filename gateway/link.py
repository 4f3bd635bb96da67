"""What a protocol session needs from whatever carries its bytes (TCP, WebSocket, tunnel)."""

from __future__ import annotations

from typing import Protocol


class Link(Protocol):
    peer: str

    def write(self, data: bytes) -> None:
        """Queue bytes for the peer (never blocks; the link batches and flushes)."""

    def close(self) -> None:
        """Flush what is queued, then close."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...
