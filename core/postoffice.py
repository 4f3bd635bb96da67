"""The post office: addresses, bindings and routing.

A message sent to an address is copied to every queue bound there (exact bindings and, with
wildcard routing, queues bound to matching patterns) whose filter accepts it; diverts move or
copy it elsewhere first; ``node::address`` goes to the store-and-forward queue of that node.
Everything one send changes on disk is written as one atomic journal batch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from waystation.core.address import (
    NODE_SEPARATOR,
    is_wildcard,
    matches,
    split_remote,
    validate_name,
)
from waystation.core.consumer import MessageRef
from waystation.core.divert import Divert, DivertError, find_loop
from waystation.core.duplicates import DuplicateCache
from waystation.core.events import (
    ACCEPTED,
    ACKED,
    DEAD_LETTERED,
    DELIVERED,
    DIVERTED,
    DROPPED,
    ROUTED,
    STORED,
    EventSink,
    emit_message,
)
from waystation.core.events import EXPIRED as EXPIRED_EVENT
from waystation.core.filter import compile_filter
from waystation.core.message import (
    ACTUAL_EXPIRY,
    DEAD_LETTER_DETAIL,
    DEAD_LETTER_REASON,
    ORIGINAL_ADDRESS,
    ORIGINAL_QUEUE,
    ROUTE_PATH,
    ROUTE_TO_NODE,
    IdGenerator,
    Message,
    now_ms,
)
from waystation.core.persistence import Persistence, QueueRecord
from waystation.core.queue import ANYCAST, MULTICAST, AddressUsage, Queue
from waystation.core.reasons import (
    ADDRESS_FULL,
    EXPIRED,
    MAX_DELIVERIES,
    NO_ROUTE,
    ROUTE_LOOP,
    UNKNOWN_NODE,
)
from waystation.core.settings import FullPolicy, Resolved, SettingsRepository
from waystation.core.store.api import Op, delete

log = logging.getLogger("waystation.postoffice")

SF_PREFIX = "sf."
DUPLICATE = "duplicate"  # the reason of a ``dropped`` event for a duplicate id
MAX_ROUTE_DEPTH = 16


class RoutingError(Exception):
    """The destination does not exist and may not be created."""


class AddressFull(Exception):
    """The address is over its size limit with the FAIL policy."""


class QueueExists(Exception):
    pass


class InvalidMessage(ValueError):
    """The message cannot be stored (a number out of range, text that is not Unicode)."""


class AddressInfo:
    __slots__ = ("name", "routing", "auto_created", "creator")

    def __init__(
        self, name: str, routing: str, auto_created: bool = False, creator: str = ""
    ) -> None:
        self.name = name
        self.routing = routing
        self.auto_created = auto_created
        self.creator = creator  # the user whose send or subscription auto-created it


class RoutePlan:
    """What routing to one address needs that does not change from message to message:
    the bound queues and whether any is durable.  Made on first use and dropped whenever a
    queue is created or deleted or an address forgotten (``PostOffice._plans``)."""

    __slots__ = ("queues", "durable")

    def __init__(self, queues: list[Queue]) -> None:
        self.queues = queues
        self.durable = any(q.durable for q in queues)


class PostOffice:
    def __init__(
        self,
        node_name: str,
        settings: SettingsRepository,
        persistence: Persistence,
        ids: IdGenerator,
        *,
        events: EventSink | None = None,
        data_dir: Path | None = None,
        wildcard_routing: bool = True,
        remote_nodes: set[str] | None = None,
        routes: dict[str, str] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.node_name = node_name
        self.repo = settings
        self.persistence = persistence
        self.ids = ids
        self.events = events
        self.data_dir = data_dir
        self.wildcard_routing = wildcard_routing
        self.remote_nodes = set(remote_nodes or ())
        self.routes = dict(routes or {})  # destination node -> next hop (a bridged node)
        self.loop = loop or asyncio.get_event_loop()
        self.queues: dict[str, Queue] = {}
        self.by_id: dict[int, Queue] = {}
        self.addresses: dict[str, AddressInfo] = {}
        self._exact: dict[str, list[Queue]] = {}
        self._wild: list[Queue] = []
        self._plans: dict[str, RoutePlan] = {}  # address -> bindings (see RoutePlan)
        self._trace_prefix = node_name + "/"  # a trace id is "node/message id"
        self.diverts: dict[str, Divert] = {}
        self._divert_cache: dict[str, list[Divert]] = {}
        self._dups: dict[str, DuplicateCache] = {}
        self._usages: dict[str, AddressUsage] = {}
        self._tmp_dir: Path | None = None
        # auto-created queues and addresses (``max_auto_created``), and of them those each
        # user's sends and subscriptions made (``max_auto_created_per_user``), kept as they
        # come and go so a check costs nothing however many there are
        self.auto_created_total = 0
        self.auto_created_by: dict[str, int] = {}
        # session id -> what admits (and names the user of) what its sends auto-create when
        # routed (``Session.admit_auto_create``): routing itself knows no user
        self.auto_creators: dict[str, Callable[[str, int], str]] = {}
        # what a client auto-created and nothing uses now -> since when (loop time): the
        # queues with no consumer, the addresses with no queue (see ``reap_unused``)
        self._unused_queues: dict[str, float] = {}
        self._unused_addresses: dict[str, float] = {}

    # -- QueueContext ---------------------------------------------------------------------
    def settings(self, address: str) -> Resolved:
        return self.repo.resolve(address)

    def usage(self, address: str) -> AddressUsage:
        u = self._usages.get(address)
        if u is None:
            u = self._usages[address] = AddressUsage(address)
        return u

    def memory_bytes(self, address: str) -> int:
        """Bytes ``address``'s messages hold in memory (a read that makes no usage entry)."""
        u = self._usages.get(address)
        return u.memory_bytes if u is not None else 0

    def memory_released(self, usage: AddressUsage) -> None:
        limit = self.settings(usage.address).max_size_bytes
        if limit < 0 or usage.memory_bytes < limit:
            waiters, usage.waiters = usage.waiters, []
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    def spill_dir(self, queue: Queue) -> Path:
        if self.data_dir is not None:
            base = self.data_dir / "paging"
        else:
            if self._tmp_dir is None:
                import tempfile  # here: it brings shutil, bz2 and lzma (1 MB) to an idle node

                self._tmp_dir = Path(tempfile.mkdtemp(prefix="waystation-paging-"))
            base = self._tmp_dir
        path = base / f"q{queue.id}"
        if path.exists():
            import shutil

            shutil.rmtree(path, ignore_errors=True)
        return path

    def on_delivered(self, ref: MessageRef) -> None:
        if self.events is not None:
            emit_message(
                self.events,
                DELIVERED,
                ref.message,
                ref.queue.name,
                delivery_count=ref.delivery_count,
            )

    def on_acked(self, ref: MessageRef) -> None:
        if not ref.rid and self.events is None:  # not stored, no event: nothing to do
            return
        ops: list[Op] = []
        self.ack_ops(ref, ops)
        self.persistence.write(ops, False)

    def ack_ops(self, ref: MessageRef, ops: list[Op], tx: object = None, **extra: Any) -> None:
        """Settle an acknowledged reference: what must be written goes to ``ops``.
        ``extra`` may name the consumer's ``protocol`` and ``session`` for the event; ``tx``
        is accepted from callers and not an event field (DESIGN §8)."""
        if ref.rid:
            self.persistence.unref_ops(ref.rid, ref.message, ops)
        if self.events is not None:
            emit_message(
                self.events,
                ACKED,
                ref.message,
                ref.queue.name,
                delivery_count=ref.delivery_count,
                **extra,
            )

    def on_delivery_count(self, ref: MessageRef) -> None:
        if ref.rid:
            op = self.persistence.delivery_count_op(
                ref.rid, ref.queue.id, ref.message, ref.delivery_count
            )
            self.persistence.write([op], False)

    def on_replaced(self, ref: MessageRef) -> None:
        self.on_acked(ref)

    def dead_letter(self, ref: MessageRef, reason: str, detail: str = "") -> None:
        ops: list[Op] = []
        if ref.rid:
            self.persistence.unref_ops(ref.rid, ref.message, ops)
        dla = self.settings(ref.queue.address).dead_letter_address
        ref.queue.messages_dead_lettered[reason] += 1
        self.dead_letter_message(
            ref.message, reason, detail, ops, dla, ref.queue.name, ref.delivery_count
        )
        self.persistence.write(ops, False)

    def dead_letter_message(
        self,
        msg: Message,
        reason: str,
        detail: str,
        ops: list[Op],
        dla: str | None = None,
        queue: str | None = None,
        delivery_count: int | None = None,
    ) -> None:
        """Copy ``msg`` to the dead-letter address with its original address and queue and
        the reason as annotations; the copy keeps the trace id."""
        if dla is None:
            dla = self.settings(msg.address).dead_letter_address
        if msg.trace_id is None:  # refused before it was routed (no route, unknown node)
            msg.trace_id = self._trace_prefix + str(msg.id)
        # delivery_count None (a message never delivered) is written as null, like absent
        emit_message(
            self.events, DEAD_LETTERED, msg, queue, reason=reason, delivery_count=delivery_count
        )
        if not dla or dla == msg.address:
            log.warning(
                "message %d on %s dropped (%s: %s): no dead-letter address",
                msg.id,
                msg.address,
                reason,
                detail,
            )
            return
        copy = msg.copy(self.ids(), dla)
        copy.expiration = 0
        copy.scheduled = 0
        ann = copy.annotations
        ann.setdefault(ORIGINAL_ADDRESS, msg.address)
        if queue is not None:
            ann.setdefault(ORIGINAL_QUEUE, queue)
        ann[DEAD_LETTER_REASON] = reason
        if detail:
            ann[DEAD_LETTER_DETAIL] = detail
        self._ensure_anycast(dla)
        self._route_local(copy, ops, dead_letter=True)

    def expire(self, ref: MessageRef) -> None:
        msg = ref.message
        ops: list[Op] = []
        if ref.rid:
            self.persistence.unref_ops(ref.rid, msg, ops)
        target = self.settings(ref.queue.address).expiry_address
        ref.queue.messages_expired += 1
        emit_message(
            self.events,
            EXPIRED_EVENT,
            msg,
            ref.queue.name,
            delivery_count=ref.delivery_count,
            reason=EXPIRED,
        )
        if target and target != msg.address:
            copy = msg.copy(self.ids(), target)
            copy.expiration = 0
            ann = copy.annotations
            ann.setdefault(ORIGINAL_ADDRESS, msg.address)
            ann.setdefault(ORIGINAL_QUEUE, ref.queue.name)
            ann[ACTUAL_EXPIRY] = now_ms()
            self._ensure_anycast(target)
            self._route_local(copy, ops, dead_letter=True)
        self.persistence.write(ops, False)

    # -- addresses and queues -------------------------------------------------------------
    def ensure_address(
        self, name: str, routing: str, auto_created: bool = False, creator: str = ""
    ) -> AddressInfo:
        """The address ``name``, made if new; ``creator``: the user whose send or
        subscription auto-creates it (counted against that user's quota, and removed once
        unused, see :meth:`reap_unused`)."""
        info = self.addresses.get(name)
        if info is None:
            validate_name(name)
            creator = creator if auto_created else ""
            info = self.addresses[name] = AddressInfo(name, routing, auto_created, creator)
            if auto_created:
                self._count(creator, 1)
                if creator:
                    self._unused_addresses[name] = self.loop.time()
        return info

    def remove_address(self, name: str) -> None:
        """Forget ``name`` (the caller checked that no queue or divert uses it)."""
        info = self.addresses.pop(name, None)
        self._plans.pop(name, None)
        self._unused_addresses.pop(name, None)
        self._divert_cache.pop(name, None)
        usage = self._usages.get(name)
        if usage is not None and not usage.memory_bytes and not usage.waiters:
            del self._usages[name]
        if info is not None and info.auto_created:
            self._count(info.creator, -1)

    def _count(self, creator: str, n: int) -> None:
        """``n`` more (or fewer) auto-created queues and addresses, made by ``creator``."""
        self.auto_created_total += n
        if creator:
            left = self.auto_created_by.get(creator, 0) + n
            if left > 0:
                self.auto_created_by[creator] = left
            else:
                self.auto_created_by.pop(creator, None)

    def _ensure_anycast(self, name: str) -> Queue:
        q = self.queues.get(name)
        if q is None:
            q = self.create_queue(name, name, ANYCAST, durable=True, auto_created=True)
        return q

    def create_queue(
        self,
        name: str,
        address: str | None = None,
        routing: str = ANYCAST,
        *,
        durable: bool = True,
        temporary: bool = False,
        filter: str | None = None,
        exclusive: bool = False,
        max_consumers: int = -1,
        owner: object = None,
        auto_created: bool = False,
        qid: int | None = None,
        persist: bool = True,
        subscriber: str = "",
        creator: str = "",
    ) -> Queue:
        """``creator``: the user whose send or subscription auto-creates it (counted against
        that user's quota; an anycast one is deleted once unused, see :meth:`reap_unused`)."""
        if name in self.queues:
            raise QueueExists(f"queue {name!r} already exists")
        validate_name(name, allow_wildcards=False)
        address = address or name
        validate_name(address)
        creator = creator if auto_created and not temporary else ""
        self.ensure_address(address, routing, auto_created, creator)
        compiled = compile_filter(filter)
        durable = durable and not temporary
        q = Queue(
            self,
            qid if qid is not None else self.ids(),
            name,
            address,
            routing=routing,
            durable=durable,
            temporary=temporary,
            filter=compiled,
            exclusive=exclusive,
            max_consumers=max_consumers,
            owner=owner,
            auto_created=auto_created,
        )
        q.subscriber = subscriber
        q.creator = creator
        self.queues[name] = q
        self.by_id[q.id] = q
        if auto_created:
            self._count(creator, 1)
            if creator and routing == ANYCAST:
                self._unused_queues[name] = self.loop.time()
        if self.wildcard_routing and is_wildcard(address):
            self._wild.append(q)
        else:
            self._exact.setdefault(address, []).append(q)
        self._plans.clear()
        if durable and persist:
            rec = QueueRecord(
                q.id,
                name,
                address,
                routing,
                filter,
                exclusive,
                max_consumers,
                auto_created,
                subscriber,
                creator,
            )
            self.persistence.write_bindings([self.persistence.queue_op(rec)], True)
        return q

    def delete_queue(self, name: str) -> None:
        q = self.queues.pop(name, None)
        if q is None:
            raise RoutingError(f"queue {name!r} does not exist")
        self.by_id.pop(q.id, None)
        q.deleted = True
        if q in self._wild:
            self._wild.remove(q)
        else:
            bound = self._exact.get(q.address, [])
            if q in bound:
                bound.remove(q)
            if not bound:
                self._exact.pop(q.address, None)
        self._plans.clear()
        if q.auto_created:
            self._count(q.creator, -1)
        self._unused_queues.pop(name, None)
        info = self.addresses.get(q.address)
        if info is not None and info.creator and not self._bound(q.address):
            self._unused_addresses.setdefault(q.address, self.loop.time())
        for c in list(q.consumers):
            c.close()
            c.handler.consumer_closed(c, f"queue {name!r} was deleted")
        ops: list[Op] = []
        for ref in q.drain_all():
            if ref.rid:
                self.persistence.unref_ops(ref.rid, ref.message, ops)
        q.close()
        self.persistence.write(ops, True)
        if q.durable:  # after the references: a crash between leaves an empty queue, not orphans
            self.persistence.write_bindings([delete(q.id)], True)

    def bindings(self, address: str) -> list[Queue]:
        return self._plan(address).queues

    def _bound(self, address: str) -> bool:
        """Whether a queue is bound to ``address`` itself (exactly, or as its pattern)."""
        return bool(self._exact.get(address)) or any(q.address == address for q in self._wild)

    # -- auto-delete ----------------------------------------------------------------------
    def queue_unused(self, queue: Queue) -> None:
        """A client's auto-created queue lost its last consumer (QueueContext)."""
        if not queue.deleted and queue.routing == ANYCAST:
            self._unused_queues.setdefault(queue.name, self.loop.time())

    def address_unused(self, name: str) -> None:
        """Something that kept ``name`` (its retained message) went: it may be reaped."""
        info = self.addresses.get(name)
        if info is not None and info.creator:
            self._unused_addresses.setdefault(name, self.loop.time())

    def reap_unused(self, in_use: Callable[[str], bool]) -> set[str]:
        """Delete what clients' sends and subscriptions auto-created and nothing has used for
        its delay (``auto_delete_queues``, ``auto_delete_addresses`` and their delays): a queue
        with no consumer and no message, an address with no queue bound, no divert from or to
        it and (``in_use``, the engine's) no retained message.  Returns the names deleted.

        Only candidates are looked at (made as things fall unused), so a pass costs nothing
        while there are none.  The node's own queues (store-and-forward, dead-letter, expiry)
        and anything created by an operator or the config are never candidates."""
        gone: set[str] = set()
        if not self._unused_queues and not self._unused_addresses:
            return gone
        now = self.loop.time()
        kept: set[str] | None = None  # divert sources and targets, looked up once a pass
        unused_queues = self._unused_queues
        for name, since in list(unused_queues.items()):
            q = self.queues.get(name)
            if q is None or q.deleted or q.consumers:  # back when its last consumer goes
                del unused_queues[name]
                continue
            s = q.settings
            if q.depth or q.paused or not s.auto_delete_queues:
                unused_queues[name] = now  # unused from now on at the earliest
                continue
            if (now - since) * 1000 < s.auto_delete_queues_delay_ms:
                continue
            if kept is None:
                kept = self._divert_names()
            if name in kept:
                unused_queues[name] = now
                continue
            self.delete_queue(name)
            gone.add(name)
        unused_addresses = self._unused_addresses
        wild = {q.address for q in self._wild} if self._wild else set()
        for name, since in list(unused_addresses.items()):
            info = self.addresses.get(name)
            if info is None or not info.creator or self._exact.get(name) or name in wild:
                del unused_addresses[name]  # back when its last queue goes
                continue
            s = self.settings(name)
            # an anycast queue's own address goes with it (unused as long as the queue was)
            due = name in gone or (now - since) * 1000 >= s.auto_delete_addresses_delay_ms
            if not due:
                continue
            if kept is None:
                kept = self._divert_names()
            if not s.auto_delete_addresses or name in kept or in_use(name):
                unused_addresses[name] = now
                continue
            self.remove_address(name)
            gone.add(name)
        if gone:
            log.debug("auto-deleted %d unused queues and addresses", len(gone))
        return gone

    def _divert_names(self) -> set[str]:
        """The addresses diverts watch or send to (kept however unused they look)."""
        names: set[str] = set()
        for d in self.diverts.values():
            names.add(d.address)
            node, local = split_remote(d.target)
            names.add(local if node is None or node == self.node_name else SF_PREFIX + node)
        return names

    # -- store-and-forward ----------------------------------------------------------------
    def next_hop(self, node: str) -> str | None:
        """The bridged node a message for ``node`` is forwarded to, or None (dead-lettered)."""
        hop = node if node in self.remote_nodes else self.routes.get(node)
        return hop if hop is not None and hop in self.remote_nodes else None

    def permission_targets(self, address: str) -> tuple[str, ...]:
        """Where a message sent to ``address`` really goes, the names every permission for it
        (send, manage) must be checked against.  A plain address: itself.  ``node::queue``
        is never checked as written: for this node, ``queue``; for another, ``queue`` and
        the store-and-forward queue it waits in (``sf.<next hop>``), or, with no bridge or
        route to that node, ``sf.<node>`` and the dead-letter address it lands in instead.
        ``address`` is a name already checked (``core.names.name_problem``)."""
        if NODE_SEPARATOR not in address:
            return (address,)
        node, local = split_remote(address)
        if node == self.node_name:
            return (local,)
        node = node or ""
        hop = self.next_hop(node)
        if hop is not None:
            return (local, SF_PREFIX + hop)
        dla = self.settings(address).dead_letter_address
        if dla and dla != address and dla != local:
            return (local, SF_PREFIX + node, dla)
        return (local, SF_PREFIX + node)

    def _plan(self, address: str) -> RoutePlan:
        hit = self._plans.get(address)
        if hit is not None:
            return hit
        queues = list(self._exact.get(address, ()))
        if self._wild:
            queues.extend(q for q in self._wild if matches(q.address, address) and q not in queues)
        if len(self._plans) > 10000:
            self._plans.clear()
        plan = self._plans[address] = RoutePlan(queues)
        return plan

    # -- diverts --------------------------------------------------------------------------
    def add_divert(self, divert: Divert) -> None:
        if divert.name in self.diverts:
            raise DivertError(f"divert {divert.name!r} already exists")
        chain = find_loop([*self.diverts.values(), divert])
        if chain is not None:
            names = " -> ".join(d.address for d in chain) + f" -> {chain[0].address}"
            raise DivertError(f"divert loop: {names} (diverts {', '.join(d.name for d in chain)})")
        self.diverts[divert.name] = divert
        self._divert_cache.clear()

    def remove_divert(self, name: str) -> None:
        if self.diverts.pop(name, None) is not None:
            self._divert_cache.clear()

    def _diverts_for(self, address: str) -> list[Divert]:
        hit = self._divert_cache.get(address)
        if hit is None:
            hit = [
                d
                for d in self.diverts.values()
                if d.address == address or matches(d.address, address)
            ]
            if len(self._divert_cache) >= 10000:  # one entry per address a message went to
                self._divert_cache.clear()
            self._divert_cache[address] = hit
        return hit

    # -- duplicate detection --------------------------------------------------------------
    def dup_cache(self, address: str) -> DuplicateCache:
        c = self._dups.get(address)
        if c is None:
            c = self._dups[address] = DuplicateCache(self.settings(address).duplicate_cache_size)
        return c

    # -- routing --------------------------------------------------------------------------
    def check_full(self, address: str) -> None:
        """Apply the FAIL policy before accepting a message."""
        if not self.repo.has_size_limits():
            return
        s = self.settings(address)
        if (
            s.max_size_bytes >= 0
            and s.full_policy is FullPolicy.FAIL
            and self.usage(address).memory_bytes >= s.max_size_bytes
        ):
            raise AddressFull(
                f"address {address!r} is full ({self.usage(address).memory_bytes} of {s.max_size_bytes} bytes)"
            )

    def blocked(self, address: str) -> asyncio.Future[None] | None:
        """With the BLOCK policy and the address full: a future resolved when there is room."""
        if not self.repo.has_size_limits():
            return None
        s = self.settings(address)
        if s.max_size_bytes < 0 or s.full_policy is not FullPolicy.BLOCK:
            return None
        u = self.usage(address)
        if u.memory_bytes < s.max_size_bytes:
            return None
        fut: asyncio.Future[None] = self.loop.create_future()
        u.waiters.append(fut)
        return fut

    def route(
        self,
        msg: Message,
        ops: list[Op],
        routing: str | None = None,
        depth: int = 0,
        origin: dict[str, Any] | None = None,
    ) -> bool:
        """Route ``msg``; append what must be written to ``ops``.  ``origin`` (``protocol``,
        ``session``) goes into the ``accepted`` event.  Returns whether the
        message needs a synchronous write (durable and stored somewhere durable)."""
        if depth > MAX_ROUTE_DEPTH:
            log.error("message %d: routing deeper than %d hops, dropped", msg.id, MAX_ROUTE_DEPTH)
            return False
        if msg.trace_id is None:  # where the message first enters any node (DESIGN §8)
            msg.trace_id = self._trace_prefix + str(msg.id)
        address = msg.address
        remote: tuple[str, str] | None = None
        if "::" in address:
            node, local = split_remote(address)
            if node == self.node_name:
                msg.address = address = local
            else:  # for another node: accepted here, then stored to forward
                remote = (node or "", local)
        # a client's repeat is caught by its full name (``node::address`` for another node);
        # a message without properties has no duplicate id (the common case: no call)
        dup = msg.duplicate_id() if msg._props else None
        if dup is not None and dup in self.dup_cache(address):
            log.debug("duplicate id %r on %s: message dropped", dup, address)
            emit_message(self.events, DROPPED, msg, reason=DUPLICATE)
            return False
        dup_op = self._duplicate_op(dup, address) if dup is not None else None
        if remote is not None:
            if self.events is not None and depth == 0:
                emit_message(self.events, ACCEPTED, msg, **(origin or {}))
            sync = self._route_remote(msg, remote[0], remote[1], ops)
            self._remember(dup, dup_op, address, ops)
            return sync
        repo = self.repo
        if repo.has_expiry_delays() or repo.has_size_limits():  # skipped in the common case
            s = self.settings(address)
            if msg.expiration == 0 and s.expiry_delay_ms > 0:
                msg.expiration = now_ms() + s.expiry_delay_ms
            if (
                s.max_size_bytes >= 0
                and s.full_policy is FullPolicy.DROP
                and self.usage(address).memory_bytes >= s.max_size_bytes
            ):
                emit_message(self.events, DROPPED, msg, reason=ADDRESS_FULL)
                self._remember(dup, dup_op, address, ops)
                return False
        # whatever can fail (encoding the message and its duplicate id) comes before the first
        # change (duplicate cache, queues), so a refused message leaves no trace; the journal
        # record reuses this encoding.  A plain message (no properties, annotations or standard
        # fields) always encodes, so it is encoded only where a durable queue will store it.
        encoded = None
        if msg.durable and (
            msg._props or msg._ann or msg._std is not None or self.diverts or self._stores(address)
        ):
            encoded = self._encode(msg)
        if self.events is not None and depth == 0:  # a divert's copy is "diverted" instead
            emit_message(self.events, ACCEPTED, msg, **(origin or {}))
        if not self.diverts:  # the common case: straight to the address's queues
            sync = self._route_local(msg, ops, routing, False, encoded, origin)
            if dup is not None:
                self._remember(dup, dup_op, address, ops)
            return sync
        sync = False
        diverts = self._diverts_for(address)
        if diverts:
            exclusive = False
            for d in diverts:
                if d.applies(msg):
                    copy = d.divert(msg, self.ids())
                    # the copy: its id, its (target) address
                    emit_message(self.events, DIVERTED, copy)
                    sync |= self.route(copy, ops, None, depth + 1)
                    exclusive |= d.exclusive
            if exclusive:
                self._remember(dup, dup_op, address, ops)
                return sync
        sync = self._route_local(msg, ops, routing, False, encoded, origin) or sync
        self._remember(dup, dup_op, address, ops)
        return sync

    def _duplicate_op(self, dup: str | bytes, address: str) -> Op:
        try:
            return self.persistence.duplicate_op(self.ids(), address, dup)
        except (OverflowError, ValueError, TypeError) as e:
            raise InvalidMessage(f"duplicate id {dup!r} cannot be stored: {e}") from None

    def _remember(
        self, dup: str | bytes | None, op: Op | None, address: str, ops: list[Op]
    ) -> None:
        """Record a routed message's duplicate id (only once it was routed: a refused
        message's id must not turn its corrected resend into a duplicate)."""
        if dup is None or op is None:
            return
        for old in self.dup_cache(address).add(dup, op.rid):
            ops.append(delete(old))
        ops.append(op)

    def _stores(self, address: str) -> bool:
        """Whether a message to ``address`` may be stored here (unknown: an address whose
        queues are created on first use)."""
        plan = self._plan(address)
        return plan.durable or not plan.queues

    @staticmethod
    def _encode(msg: Message) -> bytes:
        try:
            return msg.encode()
        except (OverflowError, ValueError, TypeError) as e:  # msgpack: int range, str, type
            raise InvalidMessage(f"message to {msg.address!r} cannot be stored: {e}") from None

    def _route_local(
        self,
        msg: Message,
        ops: list[Op],
        routing: str | None = None,
        dead_letter: bool = False,
        encoded: bytes | None = None,
        origin: dict[str, Any] | None = None,
    ) -> bool:
        address = msg.address
        plan = self._plan(address)
        queues = plan.queues
        if queues:
            durable = msg.durable and plan.durable  # stored in some queue here
        else:
            queues = self._auto_create(address, routing, origin)
            durable = msg.durable and any(q.durable for q in queues)
        if durable and encoded is None:
            encoded = self._encode(msg)  # dead-letter and store-and-forward copies, plain ones
        sync = False
        stored = False
        events = self.events
        for q in queues:
            if q.filter is not None and not q.filter.matches(msg):
                continue
            rid = 0
            if durable and q.durable:
                rid = self.ids()
                if not stored:
                    assert encoded is not None
                    ops.append(self.persistence.message_op(msg, encoded))
                    stored = True
                ops.append(self.persistence.ref_op(rid, q.id, msg, 0))
                sync = True
            q.add(MessageRef(msg, q, rid))
            if events is not None:  # the hot path: no call when the log is off
                emit_message(events, ROUTED, msg, q.name)
        if not queues and not dead_letter:
            s = self.settings(address)
            if s.send_to_dla_on_no_route:
                self.dead_letter_message(msg, NO_ROUTE, f"no queue bound to {address!r}", ops)
            else:
                emit_message(self.events, DROPPED, msg, reason=NO_ROUTE)
        return sync

    def enqueue(self, msg: Message, q: Queue, ops: list[Op]) -> None:
        """Put ``msg`` (new, not routed) into ``q`` alone, stored if both are durable."""
        if msg.trace_id is None:
            msg.trace_id = self._trace_prefix + str(msg.id)
        rid = 0
        if msg.durable and q.durable:
            rid = self.ids()
            ops.append(self.persistence.message_op(msg, self._encode(msg)))
            ops.append(self.persistence.ref_op(rid, q.id, msg, 0))
        q.add(MessageRef(msg, q, rid), dispatch=False)
        if self.events is not None:
            emit_message(self.events, ROUTED, msg, q.name)

    def _auto_create(
        self, address: str, routing: str | None, origin: dict[str, Any] | None = None
    ) -> list[Queue]:
        """What a message to ``address`` with no queue bound makes (address settings
        ``auto_create_*``); ``origin``: the sending session, whose user it is made for."""
        info = self.addresses.get(address)
        kind = routing or (info.routing if info else ANYCAST)
        s = self.settings(address)
        if kind == MULTICAST:
            if info is None:
                if not s.auto_create_addresses:
                    raise RoutingError(f"address {address!r} does not exist")
                creator = self._admit(origin, address, 1)
                self.ensure_address(address, MULTICAST, auto_created=True, creator=creator)
            return []
        if is_wildcard(address):
            return []
        if not s.auto_create_queues:
            raise RoutingError(f"queue {address!r} does not exist")
        creator = self._admit(origin, address, 1 if info is not None else 2)
        return [
            self.create_queue(
                address, address, ANYCAST, durable=True, auto_created=True, creator=creator
            )
        ]

    def _admit(self, origin: dict[str, Any] | None, address: str, needed: int) -> str:
        """The user a client's send auto-creates ``address`` for, once that user's and the
        node's limits let it (LimitExceeded otherwise); "" for the node's own sends."""
        if origin is None:
            return ""
        admit = self.auto_creators.get(origin.get("session", ""))
        return admit(address, needed) if admit is not None else ""

    def _route_remote(self, msg: Message, node: str, address: str, ops: list[Op]) -> bool:
        """``node::address``: into the store-and-forward queue for that node, or for the next
        hop of its route, keeping the full name there so the next node routes it on."""
        hop = self.next_hop(node)
        if hop is None:
            via = self.routes.get(node)
            why = (
                f"no bridge to node {node!r}"
                if via is None
                else f"no bridge to {via!r} (route to {node!r})"
            )
            self.dead_letter_message(msg, UNKNOWN_NODE, why, ops)
            return msg.durable
        ann = msg.annotations
        if hop != node and self._route_loop(msg, node, ops):
            return msg.durable
        ann[ROUTE_TO_NODE] = hop
        ann.setdefault(ORIGINAL_ADDRESS, address if hop == node else f"{node}::{address}")
        msg.address = SF_PREFIX + hop
        self._ensure_anycast(msg.address)
        return self._route_local(msg, ops)

    def _route_loop(self, msg: Message, node: str, ops: list[Op]) -> bool:
        """Routes of different nodes can point at each other: a message sent on through a
        route carries the nodes it passed that way (an annotation here, a property once it
        crossed a link); one that comes back is dead-lettered as a loop."""
        path = msg.application_properties.pop(ROUTE_PATH, None) or msg.annotation(ROUTE_PATH)
        passed = str(path).split(",") if path else []
        if self.node_name in passed:
            why = f"route loop: {' -> '.join(passed)} -> {self.node_name} (for {node!r})"
            self.dead_letter_message(msg, ROUTE_LOOP, why, ops)
            return True
        msg.annotations[ROUTE_PATH] = ",".join([*passed, self.node_name])
        return False

    def send(
        self, msg: Message, routing: str | None = None, origin: dict[str, Any] | None = None
    ) -> asyncio.Future[None] | None:
        """Route and persist one message; the future (if any) resolves once it is on disk.
        ``origin``: ``protocol`` and ``session`` of the producer, for the ``accepted`` event."""
        self.check_full(msg.address)
        ops: list[Op] = []
        sync = self.route(msg, ops, routing, 0, origin)
        if not ops:
            return None
        fut = self.persistence.write(ops, sync)
        if fut is not None and sync and self.events is not None:
            fut.add_done_callback(lambda f: self._stored(msg, f))
        return fut

    def _stored(self, msg: Message, fut: asyncio.Future[None]) -> None:
        """The ``stored`` event: the durable message is on disk."""
        if not fut.cancelled() and fut.exception() is None:
            emit_message(self.events, STORED, msg)

    def check_storable(self, msg: Message) -> None:
        """Raise InvalidMessage now if ``msg`` could not be stored when routed later (a
        transaction's send), so one bad message cannot fail a commit half-way."""
        if msg.durable:
            self._encode(msg)
        dup = msg.duplicate_id()
        if dup is not None:
            self._duplicate_op(dup, msg.address)

    def restore_duplicate(self, rid: int, address: str, dup: str | bytes) -> None:
        self.dup_cache(address).add(dup, rid)

    def close(self) -> None:
        for q in self.queues.values():
            q.close()
        if self._tmp_dir is not None:
            import shutil

            shutil.rmtree(self._tmp_dir, ignore_errors=True)


__all__ = [
    "ADDRESS_FULL",
    "EXPIRED",
    "MAX_DELIVERIES",
    "NO_ROUTE",
    "UNKNOWN_NODE",
    "AddressFull",
    "InvalidMessage",
    "PostOffice",
    "QueueExists",
    "RoutingError",
]
