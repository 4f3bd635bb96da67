"""This node's half of a link another node dialled in and asked to carry traffic back.

A node behind a proxy or NAT connects (claiming its name with ``ws-node``) and subscribes
with ``ws-link``; the core hands this object to the node's "accept" bridge
(``Session.serve_link``), which drives it like any bridge link: each message of
``sf.<that node>`` leaves as a MESSAGE whose ``ack`` the other side returns in an ACK once
it stored the message (``on_confirmed``), or in a NACK naming the dead-letter reason
(``on_refused``).  The frames carry the same headers as a bridge's SEND, so the other side
rebuilds the same message.  When the bridge closes the link, the connection ends (with an
ERROR saying why); when the connection ends, ``closed`` resolves and the bridge waits for
the next one.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from waystation.bridges.link import LinkOptions, MessageTooLarge
from waystation.core.message import Message
from waystation.gateway.stomp.mapping import (
    REASON_HEADER,
    forward_destination,
    send_headers,
)
from waystation.wire.stomp import Limits, encode_message

if TYPE_CHECKING:
    from waystation.gateway.stomp.session import StompSession

ACK_PREFIX = "ws-link-"  # ack ids of this link's MESSAGEs, apart from the session's own
PAUSED = 1 << 40  # write_buffer_size while the transport asked us to stop writing
READER = LinkOptions().limits  # what the dialling side's StompLink parses


def check_fits(frame: bytes, limits: Limits = READER) -> None:
    """Raise MessageTooLarge unless the other side's parser reads ``frame`` (else it ends
    the link on it, and the bridge resends it first on every new link)."""
    head_end = frame.find(b"\n\n")
    headers = frame.count(b"\n", 0, head_end)
    if headers > limits.max_headers:
        raise MessageTooLarge(f"{headers} headers: more than max_headers ({limits.max_headers})")
    if head_end > limits.max_header_length:  # one line may be too long
        longest = max(map(len, frame[:head_end].split(b"\n")))
        if longest > limits.max_header_length:
            raise MessageTooLarge(
                f"a header line of {longest} bytes: over max_header_length "
                f"({limits.max_header_length})"
            )
    body = len(frame) - head_end - 3
    if body > limits.max_body_size or len(frame) > limits.max_frame_size:
        raise MessageTooLarge(
            f"a body of {body} bytes: over max_body_size ({limits.max_body_size})"
        )


def _ignore(*_: object) -> None:
    return None


class ServedLink:
    refusal_ends_link = False  # a NACK refuses one message; the link goes on

    def __init__(self, stomp: StompSession, subscription: str) -> None:
        self._stomp = stomp
        self.subscription = subscription
        self.target = f"{stomp.link.peer} (dialled in)"
        self.closed: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.on_confirmed = _ignore
        self.on_refused = _ignore
        self._writable = asyncio.Event()
        self._writable.set()

    @property
    def encoding(self) -> str:
        return f"served-stomp{self._stomp.version}"

    def encode(
        self,
        msg: Message,
        confirm_id: str,
        forwarding_address: str | None,
        duplicate_id: str | None,
    ) -> bytes:
        headers = dict(
            send_headers(msg, forward_destination(msg, forwarding_address), None, duplicate_id)
        )
        destination = headers.pop("destination")
        frame = encode_message(
            destination,
            confirm_id,
            self.subscription,
            msg.body,
            headers,
            ACK_PREFIX + confirm_id,
            self._stomp.version,
            content_length=True,
        )
        check_fits(frame)
        return frame

    def forward(self, confirm_id: str, payload: bytes) -> None:
        if not self.closed.done():
            self._stomp.write(payload)

    # -- the other side's answers (the session routes ACK/NACK with our prefix here) -----
    @staticmethod
    def owns(ack_id: str) -> bool:
        return ack_id.startswith(ACK_PREFIX)

    def acked(self, ack_id: str) -> None:
        self.on_confirmed(ack_id[len(ACK_PREFIX) :])

    def nacked(self, ack_id: str, headers: dict[str, str]) -> None:
        text = headers.get("message") or "refused by the remote node"
        self.on_refused(ack_id[len(ACK_PREFIX) :], text, headers.get(REASON_HEADER) or None)

    # -- flow control: the session passes its transport's pause/resume on -----------------
    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def write_buffer_size(self) -> int:
        return 0 if self._writable.is_set() else PAUSED

    async def drain(self) -> None:
        await self._writable.wait()

    # -- closing ------------------------------------------------------------------------
    def close(self, reason: str = "closed") -> None:
        """The bridge ends the link: the connection ends with it."""
        if self.ended(reason):
            # answers the SUBSCRIBE's receipt: the other side ends the link on it, instead
            # of taking an ERROR that names no receipt for a refusal of a message it sent
            self._stomp.fail("link closed", reason, self.subscription)

    def ended(self, reason: str) -> bool:
        """The connection is gone (or going): resolve ``closed``; False if it already was."""
        self._writable.set()
        if self.closed.done():
            return False
        self.closed.set_result(reason)
        return True

    async def wait_closed(self, grace: float = 1.0) -> None:
        return None


__all__ = ["ServedLink"]
