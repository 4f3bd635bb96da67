"""A ``QueuedLink`` that lets only UTF-8 text through, because SockJS carries text.

SockJS sessions run STOMP with ``text_only``, so a message whose body is not UTF-8 goes to
the dead-letter address (reason ``body-not-text``) before it is written.  This link is the
guard behind that: should a non-text frame still arrive, it is dropped and the session is
failed with an ERROR frame naming it, on the next loop turn (never re-entering the session
from inside a delivery).  Binary bodies need STOMP over WebSocket (``/stomp``) or TCP.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from waystation.gateway.queued_link import QueuedLink

NOT_TEXT = "message body is not UTF-8 text; SockJS carries text only"
NOT_TEXT_HINT = "use STOMP over WebSocket (binary messages) or TCP for binary bodies"


def describe(frame: bytes) -> str:
    """``destination`` and ``message-id`` of a raw frame, for the error detail."""
    head = frame.split(b"\n\n", 1)[0].split(b"\n")
    wanted = {b"destination": "", b"message-id": ""}
    for line in head[1:]:
        name, _, value = line.partition(b":")
        if name in wanted and not wanted[name]:
            wanted[name] = value.decode(errors="replace")
    return f"{head[0].decode(errors='replace')} destination={wanted[b'destination']!r} " + (
        f"message-id={wanted[b'message-id']!r}"
    )


class TextLink(QueuedLink):
    def __init__(
        self, peer: str, on_not_text: Callable[[str, str], None], high: int = 1 << 20
    ) -> None:
        super().__init__(peer, high=high, low=high // 4)
        self._on_not_text = on_not_text
        self._failing = False

    def write(self, data: bytes) -> None:
        try:
            data.decode()
        except UnicodeDecodeError:
            if not self.closing and not self._failing:
                self._failing = True
                detail = f"{describe(data)}; {NOT_TEXT_HINT}"
                asyncio.get_running_loop().call_soon(self._on_not_text, NOT_TEXT, detail)
            return
        super().write(data)


__all__ = ["NOT_TEXT", "TextLink", "describe"]
