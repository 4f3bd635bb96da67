"""The core session: one client connection's door into the engine (DESIGN §7).

Every protocol adapter (STOMP, REST, AMQP, MQTT, bridges) opens one per connection with
``Engine.open_session`` and goes through it for everything: sends, subscriptions described by a
:class:`Source`, credit, settlement with neutral outcomes, transactions.  It is where every
permission check and per-client limit lives, once, so no adapter can forget one; ``close()``
releases what the connection held (consumers, transactions, temporary queues).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from waystation.core.address import NODE_SEPARATOR, is_wildcard, split_remote
from waystation.core.consumer import Consumer, ConsumerError, DeliveryHandler
from waystation.core.filter import Filter, compile_filter
from waystation.core.limits import LimitExceeded
from waystation.core.message import Message
from waystation.core.names import name_problem
from waystation.core.postoffice import PostOffice, RoutingError
from waystation.core.queue import ANYCAST, MULTICAST, Queue
from waystation.core.reasons import REJECTED
from waystation.core.security import SYSTEM, NotAuthorized, Permission, Principal
from waystation.core.transaction import Transaction, TransactionError

if TYPE_CHECKING:
    from waystation.core.engine import Engine


class Outcome(StrEnum):
    """How a consumer settles a delivery (AMQP's outcomes; STOMP and MQTT use a subset)."""

    ACCEPTED = "accepted"  # processed: removed from the queue
    RELEASED = "released"  # not processed: back to the queue, no delivery attempt counted
    MODIFIED = "modified"  # delivery failed: redelivered after the delay, or dead-lettered
    REJECTED = "rejected"  # refused for good: dead-lettered with the reason


class CreditMode(StrEnum):
    WINDOW = "window"  # at most N unsettled deliveries (STOMP prefetch, MQTT receive maximum)
    CREDIT = "credit"  # each delivery consumes granted credit; drain (AMQP link credit)
    PRESETTLED = "presettled"  # settled as sent, at most once (STOMP ack:auto, MQTT QoS 0)


@dataclass(frozen=True, slots=True)
class Source:
    """What a consumer reads.  ``routing`` None lets the engine decide: an existing queue of
    that name is anycast, an existing multicast address multicast, anything else anycast."""

    address: str
    routing: str | None = None
    selector: str | None = None
    durable_name: str | None = None  # a durable subscription (multicast) of this name
    shared: bool = False  # a durable subscription several clients share (not client-scoped)
    no_local: bool = False  # not the messages this session sends (multicast only)
    temporary: bool = False  # a new anycast queue of the node's naming, gone with the consumer
    owned: bool = True  # a durable subscription only its subscriber may attach to; False:
    # any principal with consume on the address may (REST push registrations, by name)


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """What a client may know of an existing queue (for discovery and 404s)."""

    name: str
    address: str
    routing: str
    durable: bool
    selector: str | None
    depth: int  # messages waiting (in flight not counted)


class SessionError(Exception):
    """A request the session refuses (unknown queue kind, closed session ...)."""


class _SubscriptionFilter:
    """A subscription's selector plus what the session adds when messages are routed to it:
    a consume check per message address (a wildcard subscription must not receive from an
    address a more specific rule denies) and no-local (not the messages its own session is
    routing right now: routing is synchronous, so that is exactly its own sends)."""

    __slots__ = ("inner", "text", "_allowed", "_cache", "_session")

    def __init__(
        self,
        inner: Filter | None,
        allowed: Callable[[str], bool] | None,
        session: Session | None,
    ) -> None:
        self.inner = inner
        self.text = inner.text if inner is not None else None
        self._allowed = allowed
        self._cache: dict[str, bool] = {}
        self._session = session

    def matches(self, msg: Message) -> bool:
        s = self._session
        if s is not None and s.routing:
            return False
        allowed = self._allowed
        if allowed is not None:
            ok = self._cache.get(msg.address)
            if ok is None:
                ok = allowed(msg.address)
                if len(self._cache) < 10000:
                    self._cache[msg.address] = ok
            if not ok:
                return False
        return self.inner is None or self.inner.matches(msg)


_ids = itertools.count(1)


class Session:
    """One connection's state in the core.  Not thread-safe: the event loop's only."""

    def __init__(
        self,
        engine: Engine,
        principal: Principal,
        protocol: str,
        remote: str,
        client_id: str | None = None,
    ) -> None:
        self.engine = engine
        self.id = f"{protocol}-{next(_ids)}"
        self.principal = principal
        self.protocol = protocol
        self.remote = remote
        self.client_id = client_id
        self.since = time.time()
        self.messages_in = 0
        self._out_closed = 0  # deliveries of consumers already closed
        self.consumers: dict[Consumer, Queue] = {}  # each consumer and the queue it reads
        self.transactions: dict[str, Transaction] = {}
        self.closed = False
        self.node: str | None = None  # the node a link from another node claimed to be
        self._send_ok: dict[tuple[str, str | None], bool] = {}  # checked send targets
        # the targets of each open transaction's sends (and their routing): what they
        # auto-create is made for this user at commit, which routes without a session
        self._tx_targets: dict[str, dict[str, str | None]] = {}
        # who auto-creates what this session's sends and subscriptions make ("": the node)
        self._creator = "" if principal is SYSTEM else principal.name
        self._post: PostOffice | None = None  # the engine's, once started (see _post_office)
        self.routing = False  # this session's messages are being routed (for no-local)
        self._origin: dict[str, object] = {
            "protocol": protocol,
            "session": self.id,
        }  # for the accepted event

    # -- introspection (the admin API's session list) -------------------------------------
    @property
    def messages_out(self) -> int:
        return self._out_closed + sum(c.delivered for c in self.consumers)

    def info(self) -> dict[str, object]:
        return {
            "id": self.id,
            "protocol": self.protocol,
            "remote": self.remote,
            "user": self.principal.name,
            "client_id": self.client_id,
            "since": self.since,
            "messages_in": self.messages_in,
            "messages_out": self.messages_out,
            "consumers": len(self.consumers),
            "transactions": len(self.transactions),
        }

    # -- checks and look-ups -------------------------------------------------------------
    def check(self, permission: Permission, address: str) -> None:
        """NotAuthorized unless this session's principal holds ``permission`` there; for
        ``node::queue``, on every name it really reaches (``PostOffice.permission_targets``)."""
        if NODE_SEPARATOR not in address:
            self.engine.security.check(self.principal, permission, address)
            return
        target = self._refused_target(permission, address)
        if target is not None:
            raise NotAuthorized(
                f"user {self.principal.name!r} may not {permission.value.replace('_', ' ')} "
                f"on {target!r} (where {address!r} goes)"
            )

    def _check(self, permission: Permission, address: str) -> None:
        self.engine.security.check(self.principal, permission, address)

    def allowed(self, permission: Permission, address: str) -> bool:
        """Whether :meth:`check` passes."""
        if NODE_SEPARATOR not in address:
            return self.engine.security.allowed(self.principal, permission, address)
        return self._refused_target(permission, address) is None

    def _refused_target(self, permission: Permission, address: str) -> str | None:
        """The first name ``node::queue`` really reaches that ``permission`` is not held on."""
        security = self.engine.security
        for target in self._post_office().permission_targets(address):
            if not security.allowed(self.principal, permission, target):
                return target
        return None

    def lookup_queue(self, name: str) -> QueueInfo | None:
        q = self.engine.queue(name)
        if q is None:
            return None
        selector = q.filter.text if q.filter is not None else None
        return QueueInfo(q.name, q.address, q.routing, q.durable, selector, q.depth)

    def lookup_address(self, name: str) -> str | None:
        """The routing of the declared address ``name``, or None."""
        info = self.engine.post.addresses.get(name)
        return info.routing if info is not None else None

    def may_auto_create(self, name: str, routing: str) -> bool:
        """Whether the address settings let a send or subscription create ``name``."""
        s = self.engine.settings.resolve(name)
        return s.auto_create_queues if routing == ANYCAST else s.auto_create_addresses

    def _live(self) -> None:
        if self.closed:
            raise SessionError("session is closed")

    def _name(self, name: str, *, remote: bool = False, wildcards: bool = False) -> None:
        if self.principal is SYSTEM:  # the node's own parts may use its own names (sf.*)
            return
        why = name_problem(name, remote=remote, wildcards=wildcards)
        if why is not None:
            raise RoutingError(f"invalid name: {why}")

    def _auto_create_limit(self, address: str, needed: int = 1) -> None:
        """Refuse to auto-create ``needed`` more queues and addresses (a queue whose address
        is new: two) past the node's ``max_auto_created`` or, security on, past this user's
        ``max_auto_created_per_user`` (what its sends and subscriptions made and still
        exists: unused ones are deleted, see ``PostOffice.reap_unused``)."""
        engine, post = self.engine, self._post_office()
        limits = engine.limits
        if post.auto_created_total + needed > limits.max_auto_created:
            raise LimitExceeded(
                "max_auto_created",
                f"cannot auto-create {address!r}: the node already has "
                f"{post.auto_created_total} auto-created queues and addresses",
            )
        if self._creator and engine.security.enabled:
            have = post.auto_created_by.get(self._creator, 0)
            if have + needed > limits.max_auto_created_per_user:
                raise LimitExceeded(
                    "max_auto_created_per_user",
                    f"cannot auto-create {address!r}: user {self._creator!r} already has "
                    f"{have} auto-created queues and addresses in use",
                )

    # -- producing ------------------------------------------------------------------------
    def claim_node(self, node: str) -> None:
        """A link from another node states its name; a user bound to node names (``nodes``)
        may claim only those."""
        if not self.engine.security.may_claim(self.principal, node):
            raise NotAuthorized(f"user {self.principal.name!r} may not claim to be node {node!r}")
        self.node = node

    def serve_link(self, link: Any) -> None:
        """Hand the reverse half of a connection a node dialled in (it claimed its name with
        :meth:`claim_node`) to the bridge that forwards this node's store-and-forward traffic
        for it (``[[bridges]] direction = "accept"``).  The link is a bridge link (see
        ``bridges/link.py``) the adapter implements over its own connection."""
        self._live()
        node = self.node
        if node is None:
            raise NotAuthorized("only a link that names its node (ws-node) may carry traffic back")
        if not self.engine.security.may_take_traffic(self.principal, node):
            raise NotAuthorized(
                f"user {self.principal.name!r} may not take node {node!r}'s traffic: bind the "
                f'user to it (nodes = ["{node}"])'
            )
        acceptor = self.engine.dial_ins.get(node)
        if acceptor is None:
            raise RoutingError(
                f"node {self.engine.node_name!r} takes no dialled-in link from node {node!r}: "
                f'it needs a [[bridges]] entry with remote_node = "{node}" and '
                'direction = "accept"'
            )
        acceptor(link)

    def check_send(self, address: str, routing: str | None = None) -> None:
        """Refuse a send target now (name, permission, auto-create and its limits), so an
        adapter can answer before it builds the message; ``node::queue`` is checked on where
        it really goes.  Results are remembered per target.  What the send auto-creates is
        made when it is routed, for this user (:meth:`admit_auto_create`), also when the
        target was deleted as unused since."""
        key = (address, routing)
        if self._send_ok.get(key):
            return
        self._name(address, remote=True)
        self.check(Permission.SEND, address)
        local = self._local_target(address)
        if local is not None:
            self._make_target(local, routing, make=False)
        if len(self._send_ok) < 1000:
            self._send_ok[key] = True

    def admit_auto_create(self, address: str, needed: int) -> str:
        """For the post office: routing this session's send auto-creates ``address``
        (``needed`` queues and addresses).  LimitExceeded past this user's or the node's
        limit; returns the user it is made for ("" for the node itself: not limited)."""
        if self._creator:
            self._auto_create_limit(address, needed)
        return self._creator

    def _local_target(self, address: str) -> str | None:
        """The local address a send to ``address`` reaches; None for another node's (the
        node's own store-and-forward queue takes it: nothing a client makes)."""
        if NODE_SEPARATOR not in address:
            return address
        node, local = split_remote(address)
        return local if node == self.engine.node_name else None

    def _make_target(self, address: str, routing: str | None, *, make: bool) -> None:
        """Check (and with ``make``, make) what routing a send to the local ``address``
        would auto-create (the rules of ``PostOffice._auto_create``), as this user."""
        engine, post = self.engine, self._post_office()
        if address in post.queues:
            return
        resolved = routing or engine.resolve_routing(address)
        settings = engine.settings.resolve(address)
        if resolved != MULTICAST:
            self._check(Permission.CREATE_DURABLE_QUEUE, address)
            if settings.auto_create_queues and not post.bindings(address):
                self._auto_create_limit(address, 1 if address in post.addresses else 2)
                if not make:
                    return
                post.create_queue(
                    address,
                    address,
                    ANYCAST,
                    durable=True,
                    auto_created=True,
                    creator=self._creator,
                )
        elif (
            address not in post.addresses
            and settings.auto_create_addresses
            and not post.bindings(address)
        ):
            self._auto_create_limit(address)
            if make:
                post.ensure_address(address, MULTICAST, auto_created=True, creator=self._creator)

    def send(
        self,
        msg: Message,
        *,
        routing: str | None = None,
        tx: str | None = None,
        retain: bool = False,
    ) -> asyncio.Future[None] | None:
        """Route ``msg``; the returned future resolves once a durable message is on disk.
        ``retain``: also keep it as its address's retained message (an empty body clears
        that), handed to later subscriptions by :meth:`send_retained`."""
        if self.closed:
            raise SessionError("session is closed")
        if retain:
            if tx is not None:
                raise SessionError("a retained message cannot be part of a transaction")
            routed = self.send(msg, routing=routing)
            kept = self.engine.retain(msg.copy(self.engine.ids()))
            if not msg.body:  # cleared: the address may now be unused
                self._post_office().address_unused(msg.address)
            return _both(routed, kept)
        if not self._send_ok.get((msg.address, routing)):
            self.check_send(msg.address, routing)
        if tx is not None:
            t = self._tx(tx)
            limits = self.engine.limits
            if len(t.sends) >= limits.max_transaction_messages:
                raise LimitExceeded(
                    "max_transaction_messages",
                    f"transaction {tx!r} already holds {len(t.sends)} messages",
                )
            if t.bytes + msg.size() > limits.max_transaction_bytes:
                raise LimitExceeded(
                    "max_transaction_bytes",
                    f"transaction {tx!r} would hold more than {limits.max_transaction_bytes} bytes",
                )
            self.engine.send(msg, routing=routing, tx=t)
            t.bytes += msg.size()
            self.messages_in += 1
            targets = self._tx_targets.get(tx)
            if targets is None:
                targets = self._tx_targets[tx] = {}
            targets.setdefault(msg.address, routing)
            return None
        self.messages_in += 1
        # ``Engine.send`` without a transaction is the post office's send: called directly,
        # compiled to compiled (mypyc), with no keyword call through the engine per message
        post = self._post_office()
        if not self.engine.no_local_subscriptions:
            return post.send(msg, routing, self._origin)
        self.routing = True  # a no-local subscription may be asking (see _SubscriptionFilter)
        try:
            return post.send(msg, routing, self._origin)
        finally:
            self.routing = False

    def blocked(self, address: str) -> asyncio.Future[None] | None:
        """A future while ``address`` is full under the BLOCK policy: stop reading until then."""
        return self._post_office().blocked(address)

    def _post_office(self) -> PostOffice:
        """The engine's post office, kept: the engine is interpreted Python even in the
        compiled build, so its ``post`` property would be a Python call per message."""
        post = self._post
        if post is None:
            post = self._post = self.engine.post
            post.auto_creators[self.id] = self.admit_auto_create
        return post

    # -- consuming ------------------------------------------------------------------------
    def subscribe(
        self,
        source: Source,
        handler: DeliveryHandler,
        *,
        mode: CreditMode = CreditMode.WINDOW,
        window: int | None = None,
        credit: int | None = None,
        name: str = "",
    ) -> Consumer:
        """Attach a consumer.  ``window``: unsettled deliveries in WINDOW mode (None: the
        address setting; capped by ``max_window``); ``credit``: initial link credit in CREDIT
        mode (None: 0; more comes with :meth:`set_credit`), and in PRESETTLED mode a credit
        each delivery uses up too (AMQP's pre-settled receiver; None: unlimited, as STOMP's
        auto ack)."""
        self._live()
        limits = self.engine.limits
        if len(self.consumers) >= limits.max_consumers_per_session:
            raise LimitExceeded(
                "max_consumers_per_session",
                f"this connection already has {len(self.consumers)} consumers",
            )
        engine = self.engine
        address = source.address
        routing = ANYCAST if source.temporary else source.routing or engine.resolve_routing(address)
        if source.no_local and routing != MULTICAST:
            raise SessionError("no-local applies to topic subscriptions only")
        if not source.temporary:
            self._name(address, wildcards=routing == MULTICAST)
        if source.durable_name is not None:
            self._name(source.durable_name)
        filt = compile_filter(source.selector)
        if source.temporary:
            q = self._temporary_queue()
        elif routing == ANYCAST:
            q = self._anycast_queue(address)
        else:
            q = self._subscription_queue(source)
            self._filter_routing(q, source)
        consumer_filter: Filter | _SubscriptionFilter | None = filt if routing == ANYCAST else None
        if engine.security.enabled and routing == MULTICAST and is_wildcard(q.address):
            consumer_filter = self._address_guard()  # also for subscriptions made before
        if mode is CreditMode.WINDOW:
            w = (
                engine.settings.resolve(q.address).default_consumer_window
                if window is None
                else window
            )
            if self.principal is SYSTEM:  # the node's own window (a bridge's, the operator's)
                w = max(0, w)
            elif w <= 0 or w > limits.max_window:
                w = limits.max_window
        else:
            w = 0
        try:
            c = q.add_consumer(
                handler,
                filter=consumer_filter,  # type: ignore[arg-type]
                auto_ack=mode is CreditMode.PRESETTLED,
                window=w,
                name=name,
                credit=_initial_credit(mode, credit, limits.max_credit),
                owner=self,
            )
        except ConsumerError:
            self._drop_if_temporary(q)
            raise
        self.consumers[c] = q
        return c

    def _address_guard(self) -> _SubscriptionFilter:
        security, principal = self.engine.security, self.principal
        return _SubscriptionFilter(
            None, lambda a: security.allowed(principal, Permission.CONSUME, a), None
        )

    def _drop_if_temporary(self, q: Queue) -> None:
        """A temporary queue of this session goes when its last consumer does."""
        if q.temporary and q.owner is self and not q.consumers and not q.deleted:
            self.engine.delete_queue(q.name)

    def _filter_routing(self, q: Queue, source: Source) -> None:
        """Set what a subscription queue lets in: its selector, plus the address guard of a
        wildcard subscription under security and no-local for this session."""
        engine = self.engine
        guard = engine.security.enabled and is_wildcard(q.address)
        if not guard and not source.no_local:
            if isinstance(q.filter, _SubscriptionFilter):  # a no-local of an earlier session
                q.filter = q.filter.inner
            return
        inner = q.filter.inner if isinstance(q.filter, _SubscriptionFilter) else q.filter
        security, principal = engine.security, self.principal
        q.filter = _SubscriptionFilter(
            inner,
            (lambda a: security.allowed(principal, Permission.CONSUME, a)) if guard else None,
            self if source.no_local else None,
        )
        if source.no_local:
            engine.no_local_subscriptions += 1  # sends mark themselves from now on

    def _temporary_queue(self) -> Queue:
        """A dynamic queue (AMQP dynamic source, a reply-to): named by the node, readable by
        this session alone, deleted with its consumer."""
        self._check(Permission.CREATE_NON_DURABLE_QUEUE, "tmp")
        name = f"tmp.{uuid.uuid4().hex}"
        return self.engine.post.create_queue(
            name, name, ANYCAST, durable=False, temporary=True, owner=self
        )

    def browse(self, queue: str, selector: str | None = None) -> Iterator[Message]:
        """The messages waiting in ``queue`` (matching ``selector``), in delivery order,
        without taking them (AMQP ``distribution-mode = copy``; needs BROWSE permission).
        A snapshot of the moment of the call: an adapter hands them out as credit allows."""
        self._live()
        self._name(queue)
        q = self.engine.queue(queue)
        if q is None:
            raise SessionError(f"queue {queue!r} does not exist")
        self._check(Permission.BROWSE, q.address)
        return iter(list(q.browse(compile_filter(selector))))

    def send_retained(self, consumer: Consumer) -> int:
        """Queue for ``consumer`` a copy of each retained message its subscription matches
        (marked with the ``RETAINED`` annotation); how many."""
        q = self.consumers.get(consumer)
        if q is None:
            raise ConsumerError("that consumer belongs to another session")
        return self.engine.retained_into(q, q.address)

    # -- what the protocol keeps for this client between connections -------------------------
    def _scope(self) -> str:
        if not self.client_id:
            raise SessionError("saved state needs a client id")
        return f"{self.protocol}/{self.client_id}"

    def load_state(self, key: str) -> Any:
        """What :meth:`save_state` kept for this protocol and client id (None if nothing;
        NotAuthorized if another user saved it, security on)."""
        return self.engine.load_state(self._scope(), key, self.principal)

    def save_state(self, key: str, value: Any) -> asyncio.Future[None] | None:
        """Keep msgpack data for this client across connections and restarts; the future
        resolves once it is on disk (bounded by ``max_state_bytes`` and the user's quotas)."""
        return self.engine.save_state(self._scope(), key, value, self.principal)

    def drop_state(self, key: str) -> asyncio.Future[None] | None:
        return self.engine.drop_state(self._scope(), key, self.principal)

    def address_of(self, consumer: Consumer) -> str:
        """The address a consumer reads (the node-chosen name of a temporary queue)."""
        return self.consumers[consumer].address

    def _anycast_queue(self, address: str) -> Queue:
        engine = self.engine
        q = engine.queue(address)
        if q is None:
            self._check(Permission.CONSUME, address)
            if not engine.settings.resolve(address).auto_create_queues:
                raise RoutingError(f"queue {address!r} does not exist")
            self._check(Permission.CREATE_DURABLE_QUEUE, address)
            post = self._post_office()
            self._auto_create_limit(address, 1 if address in post.addresses else 2)
            return post.create_queue(
                address, address, ANYCAST, durable=True, auto_created=True, creator=self._creator
            )
        if q.routing == MULTICAST and self.principal is not SYSTEM:  # the node may drain one
            raise NotAuthorized(
                f"queue {address!r} is a subscription of address {q.address!r}: "
                "subscribe to the address instead"
            )
        if q.temporary and q.owner is not self:
            raise NotAuthorized(f"queue {address!r} is another connection's temporary queue")
        self._check(Permission.CONSUME, q.address)
        return q

    def _subscriber(self) -> str:
        return f"{self.principal.name}/{self.client_id or ''}"

    def durable_queue_name(self, name: str, shared: bool = False) -> str:
        """The queue behind a durable subscription: scoped by the client id (JMS), so two
        clients' subscriptions of the same name never meet."""
        if shared:
            return f"shared.{name}"
        cid = self.client_id
        return f"{cid}.{name}" if cid and not name.startswith(cid + ".") else name

    def _subscription_queue(self, source: Source) -> Queue:
        engine, post = self.engine, self.engine.post
        address = source.address
        self._check(Permission.CONSUME, address)
        if not source.durable_name:  # checked before anything is made
            self._check(Permission.CREATE_NON_DURABLE_QUEUE, address)
        elif engine.queue(self.durable_queue_name(source.durable_name, source.shared)) is None:
            self._check(Permission.CREATE_DURABLE_QUEUE, address)
        if post.addresses.get(address) is None:
            if not engine.settings.resolve(address).auto_create_addresses:
                raise RoutingError(f"address {address!r} does not exist")
            self._auto_create_limit(address)
            post.ensure_address(address, MULTICAST, auto_created=True, creator=self._creator)
        if not source.durable_name:
            q = post.create_queue(
                f"tmp.{uuid.uuid4().hex}",
                address,
                MULTICAST,
                durable=False,
                temporary=True,
                filter=source.selector,
                owner=self,
            )
            return q
        qname = self.durable_queue_name(source.durable_name, source.shared)
        subscriber = "shared" if source.shared else self._subscriber() if source.owned else ""
        existing = engine.queue(qname)
        if existing is not None:
            q = existing
            if q.routing != MULTICAST or q.temporary or not q.durable:
                raise NotAuthorized(
                    f"durable subscription name {qname!r} is taken by a queue that is not a "
                    "durable subscription"
                )
            if q.subscriber and q.subscriber != subscriber:
                raise NotAuthorized(f"durable subscription {qname!r} belongs to another subscriber")
            selector = q.filter.text if q.filter is not None else None
            if q.address == address and selector == (source.selector or None):
                self._check(Permission.CONSUME, q.address)
                return q
            # the same subscriber changed its topic or selector: the old one goes (JMS)
            self._check(Permission.DELETE_DURABLE_QUEUE, q.address)
            self._check(Permission.CREATE_DURABLE_QUEUE, address)
            if q.consumers:
                raise SessionError(
                    f"durable subscription {qname!r} is in use: it cannot change its "
                    "address or selector while a consumer is attached"
                )
            engine.delete_queue(qname)
        q = post.create_queue(
            qname, address, MULTICAST, durable=True, filter=source.selector, subscriber=subscriber
        )
        return q

    # -- declaring (what a client may create without consuming) ---------------------------
    def create_queue(self, name: str, *, durable: bool = True, selector: str | None = None) -> None:
        """An anycast queue of that name, checked for create permission."""
        self._live()
        self._name(name)
        self.check(
            Permission.CREATE_DURABLE_QUEUE if durable else Permission.CREATE_NON_DURABLE_QUEUE,
            name,
        )
        self.engine.create_queue(name, name, routing=ANYCAST, durable=durable, filter=selector)

    def declare_address(self, name: str) -> None:
        """A multicast address (what a subscriber would make), checked like one."""
        self._live()
        self._name(name)
        self.check(Permission.CREATE_NON_DURABLE_QUEUE, name)
        self.engine.post.ensure_address(name, MULTICAST)

    def declare_subscription(self, source: Source) -> str:
        """Make (or find) the durable subscription ``source`` describes without attaching a
        consumer; returns its queue name."""
        self._live()
        if not source.durable_name:
            raise SessionError("a declared subscription needs a durable name")
        self._name(source.address, wildcards=True)
        self._name(source.durable_name)
        return self._subscription_queue(source).name

    def delete_subscription(self, name: str) -> None:
        """Drop the durable subscription ``name`` (no consumer may hold it)."""
        q = self.engine.queue(name)
        if q is None or q.routing != MULTICAST or q.temporary or q.deleted:
            return
        self.check(Permission.DELETE_DURABLE_QUEUE, q.address)
        if q.consumers:
            raise SessionError(f"durable subscription {name!r} is in use")
        self.engine.delete_queue(name)

    def set_credit(self, consumer: Consumer, credit: int, drain: bool = False) -> None:
        """Grant link credit (absolute); with ``drain``, use it up now or give it back."""
        consumer.set_credit(min(credit, self.engine.limits.max_credit), drain)

    def pause(self) -> None:
        """The client's socket is full: stop delivering until :meth:`resume`."""
        for c in self.consumers:
            c.pause()

    def resume(self) -> None:
        for c in list(self.consumers):
            c.resume()

    def settle(
        self,
        consumer: Consumer,
        tag: int,
        outcome: Outcome = Outcome.ACCEPTED,
        *,
        cumulative: bool = False,
        tx: str | None = None,
        reason: str = REJECTED,
        detail: str = "",
    ) -> int:
        """Settle one delivery, or (``cumulative``) it and every earlier one of the consumer;
        returns how many.  Accepted and modified outcomes may be part of a transaction."""
        if consumer.owner is not self:
            raise ConsumerError("that consumer belongs to another session")
        if outcome is Outcome.ACCEPTED and not cumulative and tx is None:  # the common case
            consumer.ack(tag)
            if consumer.window > 0:  # a place in its window opened (credit comes by flow)
                consumer.queue.dispatch()
            return 1
        t = self._tx(tx) if tx is not None else None
        tags = consumer.tags_through(tag) if cumulative else [tag]
        if not cumulative and not consumer.is_in_flight(tag):
            raise ConsumerError(f"no unacknowledged message with tag {tag} on this consumer")
        if outcome is Outcome.RELEASED and t is None:
            consumer.release(tags)  # back at the head, in their order
            return len(tags)
        for one in tags:
            if outcome is Outcome.ACCEPTED:
                consumer.ack(one, t)
            elif outcome is Outcome.MODIFIED:
                consumer.nack(one, t)
            elif t is not None:
                raise TransactionError(f"a {outcome.value} outcome cannot be transactional")
            else:
                consumer.reject(one, reason, detail)
        consumer.queue.dispatch()
        return len(tags)

    def settle_many(self, consumer: Consumer, tags: list[int]) -> int:
        """Accept several deliveries of one consumer (what one read of an adapter brought),
        in their order, with one dispatch pass after them; returns how many were settled.
        A tag not in flight is skipped (the others still settle) and named by the
        ConsumerError raised once the rest are done."""
        if consumer.owner is not self:
            raise ConsumerError("that consumer belongs to another session")
        unknown: list[int] = []
        n = 0
        for tag in tags:
            try:
                consumer.ack(tag)
            except ConsumerError:
                unknown.append(tag)
                continue
            n += 1
        if n and consumer.window > 0:  # places in its window opened (credit comes by flow)
            consumer.queue.dispatch()
        if unknown:
            raise ConsumerError(
                f"no unacknowledged message with tag {', '.join(map(str, unknown))} "
                "on this consumer"
            )
        return n

    def dead_letter_copy(self, message: Message, reason: str, detail: str = "") -> None:
        """Keep a message a pre-settled consumer took but cannot hand over (dead-lettered)."""
        self.engine.dead_letter_acknowledged(message, reason, detail)

    def unsubscribe(self, consumer: Consumer, *, delete_durable: bool = False) -> None:
        """Detach; a temporary queue goes with it, a durable subscription only when asked
        (which needs delete permission on its address)."""
        q = self.consumers.pop(consumer, None)
        if q is None:
            return
        durable = delete_durable and not q.temporary and q.routing == MULTICAST
        if durable:
            self._check(Permission.DELETE_DURABLE_QUEUE, q.address)
        self._out_closed += consumer.delivered
        consumer.close()
        if durable and not q.deleted:
            self.engine.delete_queue(q.name)
        self._drop_if_temporary(q)

    async def flush(self) -> None:
        """Wait until everything written so far (settlements included) is on disk."""
        await self.engine.flush()

    # -- transactions ---------------------------------------------------------------------
    def begin(self, tx_id: str | None = None) -> str:
        """Start a transaction named by the client (STOMP) or, with no name, by the broker
        (AMQP's coordinator); returns its id."""
        self._live()
        if len(self.transactions) >= self.engine.limits.max_transactions_per_session:
            raise LimitExceeded(
                "max_transactions_per_session",
                f"this connection already has {len(self.transactions)} open transactions",
            )
        txid = tx_id if tx_id is not None else uuid.uuid4().hex
        if txid in self.transactions:
            raise TransactionError(f"transaction {txid!r} is already active")
        self.transactions[txid] = self.engine.begin(txid)
        return txid

    def _tx(self, txid: str) -> Transaction:
        t = self.transactions.get(txid)
        if t is None:
            raise TransactionError(f"unknown transaction {txid!r}")
        return t

    def commit(self, txid: str) -> asyncio.Future[None] | None:
        """Route the transaction's sends and settle its acks, as one write.  What the sends
        auto-create (checked at each send) is made first, for this user: refused past its
        quota, the transaction stays open to be rolled back."""
        t = self._tx(txid)
        targets = self._tx_targets.get(txid)
        if targets:
            for address, routing in targets.items():
                local = self._local_target(address)
                if local is not None:
                    self._make_target(local, routing, make=True)
        self._tx_targets.pop(txid, None)
        del self.transactions[txid]
        self.routing = True
        try:
            return self.engine.commit(t)
        finally:
            self.routing = False

    def rollback(self, txid: str) -> None:
        t = self._tx(txid)
        del self.transactions[txid]
        self._tx_targets.pop(txid, None)
        self.engine.rollback(t)

    # -- closing --------------------------------------------------------------------------
    def close(self) -> None:
        """Roll back open transactions, detach every consumer (their unsettled messages go
        back), delete the temporary queues; the engine forgets the session."""
        if self.closed:
            return
        self.closed = True
        for t in self.transactions.values():
            self.engine.rollback(t)
        self.transactions.clear()
        self._tx_targets.clear()
        for c in list(self.consumers):
            self.unsubscribe(c)
        self.engine.close_owner(self)
        self.engine.forget_session(self)
        if self._post is not None:
            self._post.auto_creators.pop(self.id, None)


def _initial_credit(mode: CreditMode, credit: int | None, most: int) -> int:
    """The consumer's starting credit (-1: not counted)."""
    if mode is CreditMode.WINDOW or (mode is CreditMode.PRESETTLED and credit is None):
        return -1
    return min(max(0, credit or 0), most)


def _both(
    a: asyncio.Future[None] | None, b: asyncio.Future[None] | None
) -> asyncio.Future[None] | None:
    """One future for two writes (None when neither waits)."""
    if a is None or b is None:
        return a if b is None else b

    async def both(a: asyncio.Future[None], b: asyncio.Future[None]) -> None:
        await a
        await b

    return asyncio.ensure_future(both(a, b))


__all__ = ["CreditMode", "Outcome", "Session", "SessionError", "Source"]
