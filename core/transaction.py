"""Local transactions over sends and acknowledgements.

Sends are held until commit and then routed as one atomic journal batch together with the
acks; rollback drops the sends and gives the acked messages back to their queues.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from waystation.core.message import Message

if TYPE_CHECKING:
    from waystation.core.consumer import MessageRef


class TransactionError(Exception):
    pass


class Transaction:
    __slots__ = ("id", "sends", "acks", "nacks", "state", "bytes")

    def __init__(self, tx_id: str) -> None:
        self.id = tx_id
        self.sends: list[Message] = []
        self.acks: list[MessageRef] = []
        self.nacks: list[MessageRef] = []
        self.state = "active"
        self.bytes = 0  # size of the held sends, for the transaction size limit

    def _check(self) -> None:
        if self.state != "active":
            raise TransactionError(f"transaction {self.id!r} is {self.state}")

    def add_send(self, message: Message) -> None:
        self._check()
        self.sends.append(message)

    def add_ack(self, ref: MessageRef) -> None:
        self._check()
        self.acks.append(ref)

    def add_nack(self, ref: MessageRef) -> None:
        self._check()
        self.nacks.append(ref)
