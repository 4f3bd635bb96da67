"""AMQP transactions (spec part 4): the coordinator link, declare and discharge.

A client attaches a sender to a ``coordinator`` target and sends ``declare`` (answered with
the ``declared`` state carrying a node-issued id) and ``discharge`` (commit, or roll back
with ``fail``; answered ``accepted`` once a commit is on disk).  Transfers and dispositions
carrying ``transactional-state`` with that id join the core transaction, each answered at
once with its ``transactional-state`` (spec 4.4.2-4.4.3): a client may wait for every
outcome before it discharges.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from proton import Condition, Delivery, Described, Link, symbol, ulong

from waystation.gateway.amqp import errors
from waystation.gateway.amqp.codec import DecodeError, decode_value, descriptor_code
from waystation.gateway.amqp.codec import Described as Desc
from waystation.gateway.amqp.links import refuse

if TYPE_CHECKING:
    from waystation.core.session import Session
    from waystation.gateway.amqp.session import AmqpSession

log = logging.getLogger("waystation.amqp")

DECLARE, DISCHARGE, DECLARED, TRANSACTIONAL_STATE = 0x31, 0x32, 0x33, 0x34
_STATE_CODES: dict[int, int] = {
    Delivery.ACCEPTED: 0x24,
    Delivery.REJECTED: 0x25,
    Delivery.RELEASED: 0x26,
}


class TransactionsMixin:
    """The connection's side of transactions: ids on the wire <-> core transaction ids."""

    session: Session | None
    peer: str

    def _init_transactions(self) -> None:
        self.failed_tx: dict[str, str] = {}  # a transaction a refused part dooms: why

    def txid_of(self, data: Any) -> str:
        """The core id of the transaction a ``transactional-state`` names."""
        if not data or not isinstance(data[0], (bytes, bytearray, memoryview)):
            raise DecodeError("transactional-state without a binary txn-id")
        txid = bytes(data[0]).decode("ascii", "replace")
        if self.session is None or txid not in self.session.transactions:
            from waystation.core.transaction import TransactionError

            raise TransactionError(f"unknown transaction {txid!r}")
        return txid

    def transactional_outcome(
        self, dlv: Delivery, txid: str, state: int, cond: Condition | None
    ) -> None:
        outcome: Any = Described(ulong(_STATE_CODES.get(state, 0x24)), [])
        if cond is not None:
            self.failed_tx[txid] = cond.description or cond.name
            outcome = Described(
                ulong(0x25), [Described(ulong(0x1D), [symbol(cond.name), cond.description])]
            )
        # proton types Disposition.data as List[int]; it is any AMQP list
        dlv.local.data = [txid.encode(), outcome]  # type: ignore[list-item]
        dlv.update(TRANSACTIONAL_STATE)

    def retired_in_transaction(
        self, dlv: Delivery, txid: str, outcome: Any, refused: BaseException | None
    ) -> None:
        """Answer a transactional disposition the client left unsettled (spec 4.4.3) with
        the state it now has in the transaction: the client's outcome, or ``rejected`` when
        the core refused it (the discharge will then roll back)."""
        if refused is not None:
            self.transactional_outcome(dlv, txid, Delivery.REJECTED, errors.condition(refused))
            return
        if outcome is None:
            outcome = Described(ulong(0x24), [])  # a transactional-state without an outcome
        dlv.local.data = [txid.encode(), outcome]  # type: ignore[list-item]
        dlv.update(TRANSACTIONAL_STATE)

    def fail_transaction(self, txid: str, e: BaseException) -> None:
        self.failed_tx[txid] = str(e)


class Coordinator:
    """The client's sender to the coordinator target."""

    __slots__ = ("amqp", "link", "closed")
    incoming = True  # proton: a receiver (transfers come in on it)

    def __init__(self, amqp: AmqpSession, link: Link) -> None:
        self.amqp = amqp
        self.link = link
        self.closed = False

    @classmethod
    def attach(cls, amqp: AmqpSession, link: Link) -> Coordinator | None:
        if link.remote_snd_settle_mode == Link.SND_SETTLED:
            refuse(
                link, Condition(errors.INVALID_FIELD, "a coordinator link cannot be pre-settled")
            )
            return None
        c = cls(amqp, link)
        link.target.copy(link.remote_target)
        link.source.copy(link.remote_source)
        amqp.links[link._impl] = c
        link.open()
        link.flow(100)
        return c

    def transfer(self, d: Any) -> None:
        dlv = Delivery.wrap(d)
        link = self.link
        if dlv.partial:
            return
        payload = link.recv(dlv.pending) or b""
        link.advance()
        if link.credit < 50:
            link.flow(100 - link.credit)
        session = self.amqp.session
        assert session is not None
        try:
            body = _control(payload)
            kind = descriptor_code(body.descriptor)
            if kind == DECLARE:
                txid = session.begin()
                dlv.local.data = [txid.encode()]
                dlv.update(DECLARED)
                dlv.settle()
                return
            if kind != DISCHARGE:
                raise DecodeError(f"unknown coordinator message {body.descriptor!r}")
            fields = body.value if isinstance(body.value, list) else []
            txid = self.amqp.txid_of(fields[:1])
            fail = bool(fields[1]) if len(fields) > 1 else False
            doomed = self.amqp.failed_tx.pop(txid, None)
            if fail or doomed is not None:
                session.rollback(txid)
                if doomed is not None and not fail:
                    self._reject(dlv, Condition(errors.TX_ROLLBACK, f"rolled back: {doomed}"))
                    return
                self._accept(dlv)
                return
            fut = session.commit(txid)
        except errors.CLIENT_ERRORS as e:
            self._reject(dlv, errors.condition(e))
            return
        if fut is None or fut.done():
            self._committed(dlv, fut)
        else:
            fut.add_done_callback(lambda f: self._committed(dlv, f))

    def _committed(self, dlv: Delivery, fut: asyncio.Future[None] | None) -> None:
        if self.amqp.closed or self.closed:
            return
        if fut is not None and (fut.cancelled() or fut.exception() is not None):
            exc = None if fut.cancelled() else fut.exception()
            self._reject(dlv, Condition(errors.INTERNAL, f"commit not stored: {exc}"))
        else:
            self._accept(dlv)
        self.amqp.want_flush()

    def _accept(self, dlv: Delivery) -> None:
        dlv.update(Delivery.ACCEPTED)
        dlv.settle()

    def _reject(self, dlv: Delivery, cond: Condition) -> None:
        dlv.local.condition = cond
        dlv.update(Delivery.REJECTED)
        dlv.settle()

    def disposition(self, d: Any) -> None:
        pass  # the coordinator only receives

    def released(self) -> None:
        self.closed = True


def _control(payload: bytes) -> Desc:
    """The declare or discharge in a coordinator message's amqp-value."""
    pos = 0
    while pos < len(payload):
        if payload[pos] != 0:
            raise DecodeError("coordinator message section is not described")
        code, p = decode_value(payload, pos + 1)
        v, pos = decode_value(payload, p)
        if code == 0x77:
            if not isinstance(v, Desc):
                raise DecodeError("coordinator message body is not declare or discharge")
            return v
    raise DecodeError("coordinator message has no amqp-value body")


__all__ = ["Coordinator", "TransactionsMixin"]
