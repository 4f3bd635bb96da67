"""Local transactions over sends and acknowledgements.

Sends are held until commit and then routed as one atomic journal batch together with the
acks; rollback drops the sends and gives the acked messages back to their queues.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.message import Message

if TYPE_CHECKING:
    from core.consumer import Consumer, MessageRef


class TransactionError(Exception):
    pass


class Transaction:
    __slots__ = ("id", "sends", "acks", "nacks", "state")

    def __init__(self, tx_id: str) -> None:
        self.id = tx_id
        self.sends: list[Message] = []
        self.acks: list[tuple[Consumer | None, MessageRef]] = []
        self.nacks: list[tuple[Consumer, MessageRef]] = []
        self.state = "active"

    def _check(self) -> None:
        if self.state != "active":
            raise TransactionError(f"transaction {self.id!r} is {self.state}")

    def add_send(self, message: Message) -> None:
        self._check()
        self.sends.append(message)

    def add_ack(self, consumer: Consumer | None, ref: MessageRef) -> None:
        self._check()
        self.acks.append((consumer, ref))

    def add_nack(self, consumer: Consumer, ref: MessageRef) -> None:
        self._check()
        self.nacks.append((consumer, ref))
