"""The engine: the one object a protocol adapter talks to.

It owns the post office, the store and the timers, recovers state on start, and offers the
small API every adapter maps its protocol onto: make and send messages, subscribe with credit,
ack/nack, transactions.  It never asks which protocol a message came from.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from waystation.core.client_state import OWNER, ClientStates
from waystation.core.consumer import Consumer, DeliveryHandler, MessageRef
from waystation.core.divert import Divert, load_transformer
from waystation.core.events import EventSink
from waystation.core.filter import compile_filter
from waystation.core.limits import DEFAULT_LIMITS, LimitExceeded, Limits
from waystation.core.message import (
    DEFAULT_PRIORITY,
    RETAINED,
    IdGenerator,
    Message,
    PropertyValue,
    now_ms,
)
from waystation.core.persistence import Persistence
from waystation.core.postoffice import PostOffice
from waystation.core.queue import ANYCAST, MULTICAST, Queue
from waystation.core.retained import RetainedMessages
from waystation.core.security import SYSTEM, Principal, SecurityManager
from waystation.core.session import CreditMode, Session, Source
from waystation.core.settings import DEFAULTS, AddressSettings, SettingsRepository
from waystation.core.store.api import Journal, MemoryJournal, Op, RecoveryReport, delete
from waystation.core.transaction import Transaction, TransactionError

log = logging.getLogger("waystation.engine")


@dataclass(slots=True)
class QueueSpec:
    name: str
    address: str | None = None
    routing: str = ANYCAST
    durable: bool = True
    filter: str | None = None
    exclusive: bool = False
    max_consumers: int = -1


@dataclass(slots=True)
class DivertSpec:
    name: str
    address: str
    target: str
    filter: str | None = None
    exclusive: bool = False
    transformer: str | None = None


@dataclass(slots=True)
class EngineConfig:
    node_name: str = "waystation"
    data_dir: Path | None = None
    address_settings: dict[str, AddressSettings] = field(default_factory=dict)
    queues: list[QueueSpec] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    diverts: list[DivertSpec] = field(default_factory=list)
    remote_nodes: set[str] = field(default_factory=set)
    routes: dict[str, str] = field(default_factory=dict)  # destination node -> next hop
    wildcard_routing: bool = True
    expiry_scan_period: float = 1.0
    duplicate_cache_size: int = DEFAULTS.duplicate_cache_size or 0  # where no pattern sets one
    limits: Limits = DEFAULT_LIMITS


@dataclass(slots=True)
class Subscription:
    consumer: Consumer
    queue: Queue
    temporary: bool
    session: Session


class Engine:
    def __init__(
        self,
        config: EngineConfig | None = None,
        journal: Journal | None = None,
        *,
        events: EventSink | None = None,
        security: SecurityManager | None = None,
        bindings: Journal | None = None,
    ) -> None:
        self.config = config or EngineConfig()
        self.journal: Journal = journal or MemoryJournal()
        self.events = events
        self.security = security or SecurityManager()
        self.ids = IdGenerator()
        self.settings = SettingsRepository(
            self.config.address_settings,
            dataclasses.replace(DEFAULTS, duplicate_cache_size=self.config.duplicate_cache_size),
        )
        self.persistence = Persistence(
            self.journal, enabled=not isinstance(self.journal, MemoryJournal), bindings=bindings
        )
        self.recovery_report = RecoveryReport()
        self._post: PostOffice | None = None
        self._reaper: asyncio.Task[None] | None = None
        self.started = False
        self.sessions: dict[str, Session] = {}  # open client sessions, by id
        self.no_local_subscriptions = 0  # made so far; while 0, sends skip the no-local mark
        self._sessions_of: Counter[str] = Counter()  # open sessions per user name
        self.retained = RetainedMessages()
        self.client_states = ClientStates()
        # node name -> the acceptor of links that node dials in (Session.serve_link)
        self.dial_ins: dict[str, Callable[[Any], None]] = {}

    @property
    def limits(self) -> Limits:
        return self.config.limits

    @property
    def secured(self) -> bool:
        """Whether users are told apart (security on)."""
        return self.security.enabled

    @property
    def anonymous_allowed(self) -> bool:
        """Whether a client may log in without credentials (security off, or allowed)."""
        return not self.security.enabled or self.security.allow_anonymous

    @property
    def post(self) -> PostOffice:
        if self._post is None:
            raise RuntimeError("engine not started")
        return self._post

    @property
    def node_name(self) -> str:
        return self.config.node_name

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        cfg = self.config
        state = await loop.run_in_executor(None, self.persistence.recover)
        self.recovery_report = state.report
        if state.report.torn_tail:
            log.warning("store recovery: torn tail discarded: %s", state.report.torn_tail)
        for problem in state.report.corrupt:
            log.error("store recovery: %s", problem)
        self.ids.raise_floor(state.max_id)
        paging = None if cfg.data_dir is None else cfg.data_dir / "paging"
        if paging is not None and paging.exists():  # spills are rebuilt from the journal
            import shutil  # here: with bz2 and lzma, 1 MB an idle node need not hold

            shutil.rmtree(paging, ignore_errors=True)
        post = self._post = PostOffice(
            cfg.node_name,
            self.settings,
            self.persistence,
            self.ids,
            events=self.events,
            data_dir=cfg.data_dir,
            wildcard_routing=cfg.wildcard_routing,
            remote_nodes=cfg.remote_nodes,
            routes=cfg.routes,
            loop=loop,
        )
        for rec in state.queues:
            post.create_queue(
                rec.name,
                rec.address,
                rec.routing,
                durable=True,
                filter=rec.filter,
                exclusive=rec.exclusive,
                max_consumers=rec.max_consumers,
                auto_created=rec.auto_created,
                subscriber=rec.subscriber,
                creator=rec.creator,
                qid=rec.rid,
                persist=False,
            )
        for spec in cfg.queues:
            if spec.name not in post.queues:
                post.create_queue(
                    spec.name,
                    spec.address or spec.name,
                    spec.routing,
                    durable=spec.durable,
                    filter=spec.filter,
                    exclusive=spec.exclusive,
                    max_consumers=spec.max_consumers,
                )
        for topic in cfg.topics:
            post.ensure_address(topic, MULTICAST)
        cleanup: list[Op] = []
        for rid, qid, mid, count in state.refs:  # in rid order, streamed from columns
            q = post.by_id.get(qid)
            msg = state.message(mid) if q is not None else None
            if q is None or msg is None:
                what = "queue" if q is None else "message"
                state.report.corrupt.append(f"reference {rid} points at a missing {what}; removed")
                cleanup.append(delete(rid))
                continue
            q.add(MessageRef(msg, q, rid, count), dispatch=False)
        state.release()  # every message placed (or paged): its journal files may move now
        for mid in state.unplaced():  # messages none of whose references was placed
            self.persistence.refcounts.pop(mid, None)
            cleanup.append(delete(mid))
        for rid, address, dup in sorted(state.duplicates):
            post.restore_duplicate(rid, address, dup)
        for rid, msg in sorted(state.retained, key=lambda r: r[0]):
            if (old := self.retained.put(msg, rid)) != 0:
                cleanup.append(delete(old))  # left by a replacement cut short
        for rid, scope, key, value in sorted(state.states, key=lambda r: r[0]):
            size = len(self.persistence.state_op(rid, scope, key, value).data)
            if (old := self.client_states.put(scope, key, value, rid, size)) != 0:
                cleanup.append(delete(old))
        if cleanup:
            self.persistence.write(cleanup, False)
        for d in cfg.diverts:
            self.add_divert(d)
        self._reaper = loop.create_task(self._reap())
        self.started = True
        n = sum(q.depth for q in post.queues.values())
        log.info(
            "engine %s started: %d queues, %d messages recovered",
            cfg.node_name,
            len(post.queues),
            n,
        )

    async def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        # give messages in flight back (their delivery counts are persisted) without
        # handing them to another consumer on the way out
        consumers = [c for q in self.post.queues.values() for c in q.consumers]
        for c in consumers:
            c.paused = True
        for c in consumers:
            c.close()
        await self.persistence.flush()
        await self.persistence.close()
        self.post.close()
        if self.events is not None:
            await asyncio.to_thread(self.events.close)

    async def _reap(self) -> None:
        period = self.config.expiry_scan_period
        while True:
            await asyncio.sleep(period)
            now = now_ms()
            for q in list(self.post.queues.values()):
                try:
                    q.expire_scan(now)
                except Exception:  # keep reaping the others
                    log.exception("expiry scan of %s failed", q.name)
            try:
                self.reap_unused()
            except Exception:
                log.exception("deleting unused auto-created queues and addresses failed")

    # -- sessions -------------------------------------------------------------------------
    def begin_burst(self) -> None:
        """An adapter starts handling one burst of input (what one read brought): the store
        writes it causes, until :meth:`end_burst`, become one journal batch."""
        self.persistence.begin()

    def end_burst(self) -> None:
        self.persistence.end()

    def open_session(
        self,
        principal: Principal,
        protocol: str,
        remote: str,
        client_id: str | None = None,
    ) -> Session:
        """The door for one client connection (DESIGN §7); closing it releases what it held."""
        limit = self.limits.max_sessions_per_user
        n = self._sessions_of[principal.name]
        if self.security.enabled and 0 <= limit <= n and principal is not SYSTEM:
            raise LimitExceeded(
                "max_sessions_per_user", f"user {principal.name!r} already has {n} sessions"
            )
        s = Session(self, principal, protocol, remote, client_id)
        self.sessions[s.id] = s
        self._sessions_of[principal.name] = n + 1
        return s

    def principal_named(self, name: str) -> Principal | None:
        """The user ``name`` with the roles they hold now (a stored registration's owner);
        None when security is on and no such user exists."""
        if not self.security.enabled:
            return Principal(name)
        if name == SYSTEM.name:
            return SYSTEM
        user = self.security.users.get(name)
        return Principal(user.name, user.roles) if user is not None else None

    def forget_session(self, session: Session) -> None:
        if self.sessions.pop(session.id, None) is not None:
            name = session.principal.name
            self._sessions_of[name] -= 1
            if self._sessions_of[name] <= 0:
                del self._sessions_of[name]

    def auto_created_count(self) -> int:
        """Auto-created queues and addresses on the node (``max_auto_created``)."""
        return self.post.auto_created_total

    def reap_unused(self) -> set[str]:
        """Delete the auto-created queues and addresses unused past their delay (address
        settings ``auto_delete_*``; an address with a retained message is in use).  Runs
        every expiry scan period; returns the names deleted."""
        return self.post.reap_unused(self.retained.has)

    # -- producing ------------------------------------------------------------------------
    def make_message(
        self,
        address: str,
        body: bytes = b"",
        properties: dict[str, PropertyValue] | None = None,
        *,
        durable: bool = False,
        priority: int = DEFAULT_PRIORITY,
        expiration: int = 0,
        scheduled: int = 0,
    ) -> Message:
        return Message(
            self.ids(),
            address,
            body,
            properties if properties is not None else {},
            durable,
            priority,
            now_ms(),
            expiration,
            scheduled,
        )

    def send(
        self,
        msg: Message,
        *,
        routing: str | None = None,
        tx: Transaction | None = None,
        origin: dict[str, object] | None = None,
    ) -> asyncio.Future[None] | None:
        """Route a message.  A returned future resolves when a durable message is on disk."""
        if tx is not None:
            self.post.check_storable(msg)  # refused at SEND, never half-way through a commit
            tx.add_send(msg)
            return None
        return self.post.send(msg, routing, origin)

    def blocked(self, address: str) -> asyncio.Future[None] | None:
        return self.post.blocked(address)

    async def flush(self) -> None:
        """Wait until everything written so far (acks included) is on disk."""
        await self.persistence.flush()

    # -- consuming ------------------------------------------------------------------------
    def queue(self, name: str) -> Queue | None:
        return self.post.queues.get(name)

    def resolve_routing(self, address: str) -> str:
        """For a destination given without a routing hint: an existing queue of that name is
        anycast, an existing multicast address is multicast, anything else anycast."""
        if address in self.post.queues:
            return ANYCAST
        info = self.post.addresses.get(address)
        return info.routing if info is not None else ANYCAST

    def subscribe(
        self,
        address: str,
        handler: DeliveryHandler,
        *,
        routing: str | None = None,
        selector: str | None = None,
        durable_name: str | None = None,
        auto_ack: bool = False,
        window: int | None = None,
        name: str = "",
    ) -> Subscription:
        """Attach an in-process consumer (tests, embedding): the same as a session's
        subscribe, acting as the node itself (``SYSTEM``), so nothing is checked or capped;
        durable subscriptions are named exactly ``durable_name``."""
        session = self.open_session(SYSTEM, "engine", "in-process")
        c = session.subscribe(
            Source(address, routing, selector, durable_name, owned=False),
            handler,
            mode=CreditMode.PRESETTLED if auto_ack else CreditMode.WINDOW,
            window=window,
            name=name,
        )
        q = session.consumers[c]
        return Subscription(c, q, q.temporary, session)

    def dead_letter_acknowledged(self, message: Message, reason: str, detail: str = "") -> None:
        """Dead-letter a copy of a message its consumer already took (auto-acknowledged)
        but cannot hand over, so it is kept rather than lost."""
        ops: list[Op] = []
        self.post.dead_letter_message(message, reason, detail, ops)
        self.post.persistence.write(ops, False)

    def unsubscribe(self, sub: Subscription, *, delete_durable: bool = False) -> None:
        sub.session.unsubscribe(sub.consumer, delete_durable=delete_durable)
        sub.session.close()

    def create_queue(self, name: str, address: str | None = None, **kw: object) -> Queue:
        return self.post.create_queue(name, address, **kw)  # type: ignore[arg-type]

    def delete_queue(self, name: str) -> None:
        self.post.delete_queue(name)

    def close_owner(self, owner: object) -> None:
        """Delete the temporary queues a closing connection owned."""
        for q in [q for q in self.post.queues.values() if q.temporary and q.owner is owner]:
            self.post.delete_queue(q.name)

    # -- transactions ---------------------------------------------------------------------
    # -- changes at run time (a config reload, the admin API) ------------------------------
    def add_divert(self, d: DivertSpec) -> None:
        self.post.add_divert(
            Divert(
                d.name,
                d.address,
                d.target,
                d.exclusive,
                compile_filter(d.filter),
                load_transformer(d.transformer) if d.transformer else None,
            )
        )

    def remove_divert(self, name: str) -> None:
        self.post.remove_divert(name)

    def replace_address_settings(self, patterns: dict[str, AddressSettings]) -> None:
        """New address settings; every queue takes them up at once."""
        self.settings.replace(patterns)
        for q in self.post.queues.values():
            q.refresh_settings()
            q.dispatch()

    def add_remote_node(self, node: str) -> None:
        """A bridge to ``node`` now exists: ``node::x`` is stored and forwarded."""
        self.post.remote_nodes.add(node)

    # -- retained messages and client state (see core/retained.py, core/client_state.py) --
    def retain(self, msg: Message) -> asyncio.Future[None] | None:
        """Keep ``msg`` as its address's retained message (an empty body clears it)."""
        persistence = self.persistence
        ops: list[Op] = []
        if not msg.body:
            old = self.retained.clear(msg.address)
        else:
            limit = self.limits.max_retained
            if len(self.retained) >= limit and not self.retained.has(msg.address):
                raise LimitExceeded("max_retained", f"the node holds {limit} retained messages")
            durable = msg.durable and persistence.enabled
            rid = self.ids() if durable else 0
            if durable:
                ops.append(persistence.retained_op(rid, msg))
            old = self.retained.put(msg, rid)
        if old:
            ops.append(delete(old))
        return persistence.write_bindings(ops, True)

    def retained_into(self, queue: Queue, pattern: str) -> int:
        """Put a copy of every retained message matching ``pattern`` into ``queue``
        (marked :data:`RETAINED`); how many went in."""
        found, expired = self.retained.matching(pattern)
        ops: list[Op] = [delete(rid) for rid in expired]
        n = 0
        post = self.post
        for msg in found:
            if queue.filter is not None and not queue.filter.matches(msg):
                continue
            copy = msg.copy(self.ids())
            copy.annotations[RETAINED] = True
            post.enqueue(copy, queue, ops)
            n += 1
        self.persistence.write(ops, False)
        if n:
            queue.dispatch()
        return n

    def _state_user(self, principal: Principal | None) -> str | None:
        """Whose ownership and quotas a client-state call is checked against (None: not
        checked: security off, or the node itself)."""
        if principal is None or principal is SYSTEM or not self.secured:
            return None
        return principal.name

    def load_state(self, scope: str, key: str, principal: Principal | None = None) -> Any:
        """A saved value (a group key ``"x/"``: its members); NotAuthorized for a scope
        another user owns."""
        self.client_states.check_access(scope, self._state_user(principal))
        return self.client_states.get(scope, key)

    def save_state(
        self, scope: str, key: str, value: Any, principal: Principal | None = None
    ) -> asyncio.Future[None] | None:
        """One record per key (its size bounded, and the user's quotas checked); the first
        save of a user into a scope records the user as its owner, in the same batch."""
        if not key or key.endswith("/") or key.startswith("$"):
            raise ValueError(f"state key {key!r}: a group or reserved key")
        persistence, states = self.persistence, self.client_states
        rid = self.ids()
        op = persistence.state_op(rid, scope, key, value)  # fails here if not msgpack data
        size, limit = len(op.data), self.limits.max_state_bytes
        if size > limit:
            raise LimitExceeded("max_state_bytes", f"state {key!r} of {size} bytes is over {limit}")
        ops = [op]
        user = self._state_user(principal)
        if user is not None and states.admit(scope, key, size, user, self.limits):
            orid = self.ids()
            owner_op = persistence.state_op(orid, scope, OWNER, user)
            states.put(scope, OWNER, user, orid, len(owner_op.data))
            ops.append(owner_op)
        old = states.put(scope, key, value, rid, size)
        if old:
            ops.append(delete(old))
        return persistence.write_bindings(ops, True)

    def drop_state(
        self, scope: str, key: str, principal: Principal | None = None
    ) -> asyncio.Future[None] | None:
        """Forget a key (a group key: all its members), and the owner with the last one; the
        future resolves once that is on disk (None: nothing was there)."""
        states = self.client_states
        states.check_access(scope, self._state_user(principal))
        old = states.drop(scope, key)
        if not old:
            return None
        if states.only_owner(scope):
            old += states.drop(scope, OWNER)
        return self.persistence.write_bindings([delete(r) for r in old], True)

    def begin(self, tx_id: str = "") -> Transaction:
        return Transaction(tx_id or uuid.uuid4().hex)

    def commit(self, tx: Transaction) -> asyncio.Future[None] | None:
        """Route the sends and settle the acks of ``tx`` as one atomic batch."""
        if tx.state != "active":
            raise TransactionError(f"transaction {tx.id!r} is {tx.state}")
        tx.state = "committed"
        post = self.post
        ops: list[Op] = []
        sync = False
        for msg in tx.sends:
            post.check_full(msg.address)
        for msg in tx.sends:
            sync |= post.route(msg, ops)
        for ref in tx.acks:
            ref.queue.messages_acked += 1
            post.ack_ops(ref, ops, tx=tx.id)
            sync |= ref.rid != 0
        for ref in tx.nacks:
            ref.queue.cancel([ref])
            ref.queue.dispatch()
        if not ops:
            return None
        return self.persistence.write(ops, sync)

    def rollback(self, tx: Transaction) -> None:
        """Drop the sends; give acked and nacked messages back for redelivery."""
        if tx.state != "active":
            return
        tx.state = "rolled back"
        by_queue: dict[Queue, list[MessageRef]] = {}
        for ref in tx.acks + tx.nacks:
            by_queue.setdefault(ref.queue, []).append(ref)
        for q, qrefs in by_queue.items():
            q.cancel(qrefs)
            q.dispatch()

    # -- introspection --------------------------------------------------------------------
    def stats(self) -> dict[str, object]:
        post = self.post
        return {
            "node": self.node_name,
            "queues": {
                q.name: {
                    "address": q.address,
                    "routing": q.routing,
                    "durable": q.durable,
                    "depth": q.depth,
                    "in_flight": q.in_flight,
                    "consumers": len(q.consumers),
                    "added": q.messages_added,
                    "acked": q.messages_acked,
                }
                for q in post.queues.values()
            },
            "store": self.journal.stats(),
        }
