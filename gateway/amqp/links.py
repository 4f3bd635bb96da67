"""The two kinds of AMQP link a client attaches, each on the core session.

:class:`Producer`: the client's sender (messages in).  Credit is issued in windows and
withheld while a target address is blocked; an unsettled transfer is answered ``accepted``
only when the core's send future resolves (the message is on disk), ``rejected`` with a
condition when the core refuses it.

:class:`Subscriber`: the client's receiver (messages out).  The core consumer runs in CREDIT
mode with the link's credit (PRESETTLED mode, also counting credit, for a pre-settled link);
drain is passed through and echoed once the core says it is drained; the client's outcomes
become core settlements.  A browsing receiver (``distribution-mode = copy``) is browser.py's.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from proton import Condition, Delivery, Link, Terminus

from waystation.core.consumer import Consumer, ConsumerError
from waystation.core.consumer import Delivery as CoreDelivery
from waystation.core.message import DESTINATION
from waystation.core.queue import MULTICAST
from waystation.core.reasons import REJECTED
from waystation.core.session import CreditMode, Outcome, Source
from waystation.gateway.amqp import errors, pn
from waystation.gateway.amqp.addresses import capabilities, parse_address, source_fields
from waystation.gateway.amqp.codec import DecodeError, descriptor_code
from waystation.gateway.amqp.mapping import encode_message, message_from_transfer

if TYPE_CHECKING:
    from waystation.gateway.amqp.session import AmqpSession

log = logging.getLogger("waystation.amqp")

TRANSACTIONAL_STATE = 0x34
_OUTCOMES = {
    0x24: Outcome.ACCEPTED,
    0x25: Outcome.REJECTED,
    0x26: Outcome.RELEASED,
    0x27: Outcome.MODIFIED,
}
# the per-transfer calls, bound once (module globals, not pn.* attribute lookups)
_pending, _partial, _recv, _advance = pn.pending, pn.partial, pn.recv_or_none, pn.advance
_remote_settled, _remote_state, _settle, _incref = (
    pn.remote_settled,
    pn.remote_state,
    pn.settle,
    pn.incref,
)
_new_delivery, _from_buffer, _link_send, _ACCEPTED = (
    pn.new_delivery,
    pn.from_buffer,
    pn.link_send,
    pn.ACCEPTED,
)
# proton's disposition states -> core outcomes
_STATES: dict[int, Outcome] = {
    Delivery.ACCEPTED: Outcome.ACCEPTED,
    Delivery.RELEASED: Outcome.RELEASED,
    Delivery.MODIFIED: Outcome.MODIFIED,
    Delivery.REJECTED: Outcome.REJECTED,
}


def refuse(link: Link, cond: Condition) -> None:
    """Answer an attach we cannot honour: attach (no terminus), then detach with why."""
    link.condition = cond
    link.open()
    link.close()


class Producer:
    """A link on which the client sends (proton: our Receiver)."""

    __slots__ = (
        "amqp",
        "link",
        "ptr",
        "address",
        "routing",
        "sent_as",
        "gates",
        "window",
        "left",
        "closed",
        "waiting",
        "hooked",
        "ids",
        "limit",
    )
    incoming = True  # proton: a receiver (transfers come in on it)

    def __init__(self, amqp: AmqpSession, link: Link, address: str | None, routing: str | None):
        self.amqp = amqp
        self.link = link
        self.ptr = link._impl  # the raw pn_link_t (see pn.py)
        self.address = address  # None: the anonymous relay (each message's ``to``)
        self.routing = routing
        self.sent_as: str | None = None  # the target as the client named it, when it differs
        self.gates = 0  # blocked addresses this link waits for: no new credit meanwhile
        self.window = amqp.options.credit_window
        # the link's credit as of the last transfer handled: proton is asked for the real
        # figure only when this says a top-up is due (the client cannot use credit without
        # a transfer: drain is never asked of it)
        self.left = self.window
        self.closed = False
        # unsettled transfers whose store write is pending, oldest first, in groups that
        # share one future and txid (one journal batch): [future, txid, deliveries].  One
        # callback per group, not per message: hooked on the oldest pending future, it
        # answers every group whose future is done by then.
        self.waiting: deque[tuple[asyncio.Future[None], str | None, list[Any]]] = deque()
        self.hooked = False
        self.ids = amqp.engine.ids  # the core's message id generator
        self.limit = amqp.options.max_message_size

    @classmethod
    def attach(cls, amqp: AmqpSession, link: Link) -> Producer | None:
        target = link.remote_target
        session = amqp.session
        assert session is not None
        if target.dynamic:
            refuse(link, Condition(errors.NOT_IMPLEMENTED, "dynamic targets are not supported"))
            return None
        address: str | None = None
        routing: str | None = None
        try:
            name = errors.decoded(lambda: target.address, "attach: target address")
            caps = errors.decoded(
                lambda: capabilities(target.capabilities), "attach: target capabilities"
            )
        except DecodeError as e:
            refuse(link, errors.condition(e))
            return None
        if name:
            address, routing = parse_address(name, caps)
            try:
                session.check_send(address, routing)
                _exists_or_creatable(amqp, address, routing)
            except errors.CLIENT_ERRORS as e:
                refuse(link, errors.condition(e))
                return None
        p = cls(amqp, link, address, routing)
        if name and name != address:
            p.sent_as = name
        link.target.copy(target)
        link.source.copy(link.remote_source)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = Link.RCV_FIRST
        link.max_message_size = amqp.options.max_message_size
        amqp.links[p.ptr] = p
        link.open()
        link.flow(p.window)
        return p

    # -- transfers (raw proton pointers: the per-message path, see pn.py) ------------------
    def transfer(self, d: Any) -> None:
        ptr = self.ptr
        size = _pending(d)
        if size > self.limit:  # in one frame or several: the link is detached
            self.detach(Condition(errors.MESSAGE_SIZE, f"message larger than {self.limit} bytes"))
            return
        if _partial(d):
            return
        payload = _recv(ptr, size)
        _advance(ptr)
        self.left -= 1
        if payload is None or not size:
            if pn.aborted(d):  # by the client (proton: pending 1, the read refused)
                pn.settle(d)
                self._credit()
                return
            payload = payload or b""
        settled = _remote_settled(d)
        txid: str | None = None
        fut: asyncio.Future[None] | None = None
        try:
            if _remote_state(d) == TRANSACTIONAL_STATE:
                state = errors.decoded(lambda: Delivery.wrap(d).remote.data, "transfer: state")
                txid = self.amqp.txid_of(state)
            fut = self._send(payload, txid)
        except errors.CLIENT_ERRORS as e:
            if not settled:
                self._settle(d, pn.REJECTED, errors.condition(e), txid)
            else:
                pn.settle(d)
                log.info("AMQP %s: dropped a pre-settled message: %s", self.amqp.peer, e)
            self._credit()
            return
        if settled:
            _settle(d)
        elif fut is None or fut.done():
            self._done(d, fut, txid)
        else:
            _incref(d)  # held until the store answers, whatever happens to the link
            waiting = self.waiting
            if waiting:
                last = waiting[-1]
                if last[0] is fut and last[1] == txid:
                    last[2].append(d)
                else:
                    waiting.append((fut, txid, [d]))
            else:
                waiting.append((fut, txid, [d]))
            if not self.hooked:
                self.hooked = True
                fut.add_done_callback(self._stored)
        if self.left * 2 < self.window:
            self._credit()

    def _send(self, payload: bytes, txid: str | None) -> asyncio.Future[None] | None:
        amqp = self.amqp
        session = amqp.session
        assert session is not None
        msg, to = message_from_transfer(
            payload, self.ids(), self.address or "", amqp.clock, amqp.user
        )
        routing = self.routing
        if self.address is None:
            if not to:
                raise DecodeError("the anonymous relay needs a 'to' in each message's properties")
            address, routing = amqp.relay_target(to)
            msg.address = address
            if to != address:
                msg.annotations[DESTINATION] = to
        else:
            address = self.address
            if self.sent_as is not None:
                ann = msg._ann
                if ann is None:
                    msg._ann = {DESTINATION: self.sent_as}
                else:
                    ann[DESTINATION] = self.sent_as
        fut = session.send(msg, routing=routing, tx=txid)
        if self.address is None:  # the relay: each message's address may block the link
            self._gate(session.blocked(address))
        return fut

    def _gate(self, gate: asyncio.Future[None] | None) -> bool:
        """Whether ``gate`` (an address's blocked() future) holds back credit until done."""
        if gate is None:
            return False
        self.gates += 1
        gate.add_done_callback(self._unblock)
        return True

    def _stored(self, _: object) -> None:
        """A pending store write finished: answer every transfer whose write is done, then
        wait on the oldest one still pending (writes finish in order, so usually none)."""
        self.hooked = False
        waiting = self.waiting
        done = self._done
        update, settle, decref, accepted = pn.update, pn.settle, pn.decref, pn.ACCEPTED
        while waiting:
            fut, txid, ds = waiting[0]
            if not fut.done():
                self.hooked = True
                fut.add_done_callback(self._stored)
                break
            waiting.popleft()
            if txid is None and not fut.cancelled() and fut.exception() is None:
                live = not (self.amqp.closed or self.closed)
                for d in ds:
                    if live:
                        update(d, accepted)
                        settle(d)
                    decref(d)
                continue
            for d in ds:
                try:
                    done(d, fut, txid)
                finally:
                    decref(d)
        self.amqp.want_flush()

    def _done(self, d: Any, fut: asyncio.Future[None] | None, txid: str | None) -> None:
        if self.amqp.closed or self.closed:
            return
        if fut is not None and (fut.cancelled() or fut.exception() is not None):
            exc = None if fut.cancelled() else fut.exception()
            log.warning("AMQP %s: store write failed: %s", self.amqp.peer, exc)
            cond = Condition(errors.INTERNAL, f"the node could not store the message: {exc}")
            self._settle(d, pn.REJECTED, cond, txid)
        elif txid is None:
            pn.update(d, pn.ACCEPTED)
            pn.settle(d)
        else:
            self._settle(d, pn.ACCEPTED, None, txid)

    def _settle(self, d: Any, state: int, cond: Condition | None, txid: str | None) -> None:
        dlv = Delivery.wrap(d)
        if txid is not None:
            self.amqp.transactional_outcome(dlv, txid, state, cond)
        else:
            if cond is not None:
                dlv.local.condition = cond
            dlv.update(state)
        dlv.settle()

    # -- credit -----------------------------------------------------------------------------
    def _credit(self) -> None:
        """Top the credit up to the window once under half of it, unless the target address
        is blocked (asked here, before credit is given, not at each transfer)."""
        if self.gates or self.closed:
            return
        session = self.amqp.session
        if (
            self.address is not None
            and session is not None
            and self._gate(session.blocked(self.address))
        ):
            return
        ptr = self.ptr
        c = pn.credit(ptr)
        if c * 2 < self.window:  # under half (a window of 1: at 0)
            pn.flow(ptr, self.window - c)
            c = self.window
        self.left = c

    def _unblock(self, _: object) -> None:
        self.gates -= 1
        if not self.amqp.closed and not self.closed:
            self._credit()
            self.amqp.want_flush()

    def detach(self, cond: Condition | None = None, closed: bool = True) -> None:
        self.closed = True
        self.amqp.links.pop(self.ptr, None)
        link = self.link
        if cond is not None:
            link.condition = cond
        if closed:
            link.close()
        else:
            link.detach()

    def released(self) -> None:
        self.closed = True


class Subscriber:
    """A link on which the client receives (proton: our Sender); the core consumer's
    delivery handler."""

    __slots__ = (
        "amqp",
        "link",
        "ptr",
        "consumer",
        "presettled",
        "durable",
        "closed",
        "tags",
        "accepted",
    )
    incoming = False  # proton: a sender (deliveries go out on it)

    def __init__(self, amqp: AmqpSession, link: Link, presettled: bool) -> None:
        self.amqp = amqp
        self.link = link
        self.ptr = link._impl  # the raw pn_link_t (see pn.py)
        self.consumer: Consumer = None  # type: ignore[assignment]
        self.presettled = presettled
        self.durable = False
        self.closed = False
        # unsettled deliveries (raw pn_delivery_t, compared by address) -> the core's tag:
        # a dict lookup instead of reading the tag back out of proton at each disposition
        self.tags: dict[Any, int] = {}
        # core tags the client accepted during this read, settled together at its end
        # (``settle_accepted``: one core call and one dispatch pass for them all)
        self.accepted: list[int] = []

    @classmethod
    def attach(cls, amqp: AmqpSession, link: Link) -> Subscriber | None:
        src = link.remote_source
        session = amqp.session
        assert session is not None
        presettled = link.remote_snd_settle_mode == Link.SND_SETTLED
        s = cls(amqp, link, presettled)
        try:
            link_name = errors.decoded(lambda: link.name, "attach: name")
            source = s._source(src, link_name)
        except errors.CLIENT_ERRORS as e:
            refuse(link, errors.condition(e))
            return None
        if source is None:
            return None
        try:
            # a pre-settled link's deliveries are settled in the core as they are sent (at
            # most once: a dropped connection cannot redeliver them), and still use credit
            mode = CreditMode.PRESETTLED if presettled else CreditMode.CREDIT
            s.consumer = session.subscribe(source, s, mode=mode, credit=link.credit, name=link_name)
        except errors.CLIENT_ERRORS as e:
            refuse(link, errors.condition(e))
            return None
        link.source.copy(src)
        if source.temporary:
            link.source.address = session.address_of(s.consumer)
            link.source.dynamic = True
        link.target.copy(link.remote_target)
        link.snd_settle_mode = Link.SND_SETTLED if presettled else Link.SND_UNSETTLED
        link.rcv_settle_mode = Link.RCV_FIRST
        amqp.links[s.ptr] = s
        link.open()
        if amqp.paused_writing:
            s.consumer.pause()
        return s

    def _source(self, src: Terminus, link_name: str) -> Source | None:
        amqp = self.amqp
        session = amqp.session
        assert session is not None
        caps, selector, no_local, name = source_fields(src)
        if src.dynamic:
            return Source("", temporary=True, selector=selector)
        durable = (
            src.durability != Terminus.NONDURABLE and src.expiry_policy == Terminus.EXPIRE_NEVER
        )
        shared = "shared" in caps or "global" in caps
        if not name:  # a lookup of an existing durable subscription by the link's name
            qname = session.durable_queue_name(link_name, shared)
            info = session.lookup_queue(qname)
            if info is None or info.routing != MULTICAST or not info.durable:
                refuse(
                    self.link,
                    Condition(errors.NOT_FOUND, f"no durable subscription named {link_name!r}"),
                )
                return None
            self.durable = True
            return Source(
                info.address,
                MULTICAST,
                selector=info.selector,
                durable_name=link_name,
                shared=shared,
            )
        address, routing = parse_address(name, caps)
        if routing is None:
            routing = amqp.engine.resolve_routing(address)
        if routing == MULTICAST and durable:
            self.durable = True
            return Source(
                address,
                routing,
                selector=selector,
                durable_name=link_name,
                shared=shared,
                no_local=no_local,
            )
        if no_local and routing != MULTICAST:
            no_local = False  # meaningless on a queue: ignored, not refused
        return Source(address, routing, selector=selector, no_local=no_local)

    # -- the core's DeliveryHandler --------------------------------------------------------
    def deliver(self, d: CoreDelivery) -> None:
        ref = d.ref
        payload = encode_message(ref.message, ref.delivery_count)
        ptr = self.ptr
        tag = d.tag
        wire = b"%d" % tag
        dlv = _new_delivery(ptr, (len(wire), _from_buffer(wire)))
        _link_send(ptr, payload, len(payload))  # cffi passes the bytes' own buffer
        _advance(ptr)
        if self.presettled:
            _settle(dlv)  # the core settled it already (PRESETTLED mode)
        else:
            self.tags[dlv] = tag
        amqp = self.amqp
        if not amqp._flush_soon:
            amqp.want_flush()

    def drained(self, consumer: Consumer) -> None:
        if not self.closed:
            self.link.drained()
            self.amqp.want_flush()

    def consumer_closed(self, consumer: Consumer, reason: str) -> None:
        if not self.closed and not self.amqp.closed:
            self.closed = True
            self.amqp.links.pop(self.ptr, None)
            self.link.condition = Condition(errors.RESOURCE_DELETED, reason)
            self.link.close()
            self.amqp.want_flush()

    # -- from the client --------------------------------------------------------------------
    def flow(self) -> None:
        if self.accepted:  # the accepts before it first, as they came
            self.settle_accepted()
        session = self.amqp.session
        if session is not None and not self.closed:
            ptr = self.ptr
            session.set_credit(self.consumer, pn.credit(ptr), bool(pn.drain_mode(ptr)))

    def disposition(self, d: Any) -> None:
        """The client's outcome for one delivery (raw pointer; the common accept is quick)."""
        session = self.amqp.session
        if session is None or self.closed:
            return
        state = _remote_state(d)
        if state == _ACCEPTED:
            tag = self.tags.pop(d, None)
            accepted = self.accepted
            if not accepted:
                self.amqp.settling.append(self)
            accepted.append(int(pn.tag(d)) if tag is None else tag)
            _settle(d)
            return
        if self.accepted:
            self.settle_accepted()
        self._outcome(d, Delivery.wrap(d), state)

    def settle_accepted(self) -> None:
        """Settle the accepts gathered from this read in the core, in their order."""
        tags, self.accepted = self.accepted, []
        session = self.amqp.session
        if session is None or self.closed or not tags:
            return
        try:
            session.settle_many(self.consumer, tags)
        except ConsumerError as e:
            log.info("AMQP %s: disposition refused: %s", self.amqp.peer, e)

    def _outcome(self, d: Any, dlv: Delivery, state: int) -> None:
        session = self.amqp.session
        assert session is not None
        txid: str | None = None
        outcome_desc: Any = None  # the outcome inside a transactional-state
        if state == TRANSACTIONAL_STATE:
            try:
                data: Any = errors.decoded(lambda: dlv.remote.data, "disposition: state")
                txid = self.amqp.txid_of(data)
            except errors.CLIENT_ERRORS as e:
                log.info("AMQP %s: transactional disposition refused: %s", self.amqp.peer, e)
                self.tags.pop(d, None)
                dlv.settle()
                return
            outcome_desc = data[1] if data and len(data) > 1 else None
            state = descriptor_code(getattr(outcome_desc, "descriptor", 0x24)) or 0x24
            outcome = _OUTCOMES.get(state, Outcome.ACCEPTED)
            value = getattr(outcome_desc, "value", None)
            modified = value if state == 0x27 and isinstance(value, list) else []
            failed = bool(modified[0]) if modified else False
            undeliverable = bool(modified[1]) if len(modified) > 1 else False
        elif state == Delivery.RECEIVED or (state == 0 and not dlv.settled):
            return  # not an outcome
        else:
            outcome = _STATES.get(state, Outcome.ACCEPTED)  # settled with no outcome: accepted
            is_modified = state == Delivery.MODIFIED
            failed = bool(dlv.remote.failed) if is_modified else False
            undeliverable = bool(dlv.remote.undeliverable) if is_modified else False
        if outcome is Outcome.MODIFIED and not (failed or undeliverable):
            outcome = Outcome.RELEASED  # modified, neither flag: no attempt counted
        # undeliverable-here (spec 3.4.5: not to be redelivered to this link) stays MODIFIED,
        # a counted attempt, even without delivery-failed: the core cannot exclude one
        # consumer, and RELEASED would hand the message straight back to this link.
        detail = ""
        if outcome is Outcome.REJECTED:
            try:
                cond = dlv.remote.condition if txid is None else None
            except UnicodeDecodeError:  # only the dead-letter record's detail: still rejected
                cond, detail = None, "the client's error condition is not valid UTF-8"
            if cond is not None:
                detail = f"{cond.name}: {cond.description or ''}".strip()
        tag = self.tags.pop(d, None)
        if tag is None:
            tag = int(dlv.tag)
        refused: Exception | None = None
        try:
            session.settle(self.consumer, tag, outcome, tx=txid, reason=REJECTED, detail=detail)
        except errors.CLIENT_ERRORS as e:
            refused = e
            log.info("AMQP %s: disposition of %s refused: %s", self.amqp.peer, tag, e)
            if txid is not None:
                self.amqp.fail_transaction(txid, e)
        if txid is not None and not dlv.settled:  # the client waits for the resource's word
            self.amqp.retired_in_transaction(dlv, txid, outcome_desc, refused)
        dlv.settle()

    def detach(self, closed: bool) -> None:
        """The client detached: the consumer goes; a durable subscription too on close."""
        if self.accepted:
            self.settle_accepted()
        if self.closed:
            return
        self.closed = True
        session = self.amqp.session
        if session is None:
            return
        try:
            session.unsubscribe(self.consumer, delete_durable=closed and self.durable)
        except errors.CLIENT_ERRORS as e:
            self.link.condition = errors.condition(e)
            session.unsubscribe(self.consumer)

    def released(self) -> None:
        """The link is gone with its session or connection (not removed by the client)."""
        if self.accepted:
            self.settle_accepted()
        if not self.closed:
            self.closed = True
            if self.amqp.session is not None:
                self.amqp.session.unsubscribe(self.consumer)


def _exists_or_creatable(amqp: AmqpSession, address: str, routing: str | None) -> None:
    """amqp:not-found at attach for a target that neither exists nor may be created."""
    from waystation.core.postoffice import RoutingError

    session = amqp.session
    assert session is not None
    if "::" in address:
        return
    if session.lookup_queue(address) is not None or session.lookup_address(address) is not None:
        return
    r = routing or amqp.engine.resolve_routing(address)
    if not session.may_auto_create(address, r):
        raise RoutingError(f"address {address!r} does not exist and may not be created")


__all__ = ["Producer", "Subscriber", "refuse"]
