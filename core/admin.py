"""The operator's door: what the admin API does to queues and connections.

A client session (:mod:`.session`) checks a principal's permissions on every call; this class
checks nothing, because it acts for an operator the HTTP layer has already checked for the
``manage`` permission on the address concerned.  It works on the engine's post office and
queues through their public methods.  Removing chosen messages (delete one, move, retry)
takes them out of the part of a queue held in memory (``Queue.take``); messages paged to disk
or scheduled are reached by ``purge`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from waystation.core.consumer import MessageRef
from waystation.core.filter import compile_filter
from waystation.core.message import (
    DEAD_LETTER_DETAIL,
    DEAD_LETTER_REASON,
    ORIGINAL_ADDRESS,
    ORIGINAL_QUEUE,
    Message,
)
from waystation.core.postoffice import RoutingError
from waystation.core.queue import ANYCAST, MULTICAST, Queue
from waystation.core.store.api import Op

if TYPE_CHECKING:
    from waystation.core.engine import Engine
    from waystation.core.session import Session

OPERATOR_CLOSED = "closed by an operator"


class AdminError(Exception):
    """The operation cannot be done (unknown queue, session, message)."""


@dataclass(slots=True)
class Moved:
    """How many messages an operation moved, and how many it left where they were."""

    moved: int
    skipped: int = 0


class Admin:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # -- looking ---------------------------------------------------------------------------
    def queue(self, name: str) -> Queue:
        q = self.engine.queue(name)
        if q is None:
            raise AdminError(f"queue {name!r} does not exist")
        return q

    def queues(self) -> list[Queue]:
        return list(self.engine.post.queues.values())

    def queue_info(self, q: Queue) -> dict[str, object]:
        return {
            "name": q.name,
            "address": q.address,
            "routing": q.routing,
            "durable": q.durable,
            "temporary": q.temporary,
            "auto_created": q.auto_created,
            "filter": q.filter.text if q.filter is not None else None,
            "depth": q.depth,
            "in_flight": q.in_flight,
            "consumers": len(q.consumers),
            "enqueued": q.messages_added,
            "acked": q.messages_acked,
            "paused": self.paused(q),
        }

    def addresses(self) -> list[dict[str, object]]:
        post = self.engine.post
        by_address: dict[str, list[str]] = {}
        for q in post.queues.values():
            by_address.setdefault(q.address, []).append(q.name)
        return [
            {
                "name": a.name,
                "routing": a.routing,
                "auto_created": a.auto_created,
                "queues": sorted(by_address.get(a.name, [])),
                "memory_bytes": post.usage(a.name).memory_bytes,
            }
            for a in post.addresses.values()
        ]

    # -- pausing ---------------------------------------------------------------------------
    @staticmethod
    def paused(q: Queue) -> bool:
        return q.paused

    def pause(self, name: str) -> None:
        """Stop delivering from ``name``: messages keep arriving and waiting; consumers stay."""
        self.queue(name).paused = True

    def resume(self, name: str) -> None:
        q = self.queue(name)
        if q.paused:
            q.paused = False
            q.dispatch()

    # -- creating and deleting ------------------------------------------------------------
    def create_queue(
        self,
        name: str,
        address: str | None = None,
        routing: str = ANYCAST,
        *,
        durable: bool = True,
        filter: str | None = None,
        exclusive: bool = False,
        max_consumers: int = -1,
    ) -> Queue:
        if routing not in (ANYCAST, MULTICAST):
            raise AdminError(f"routing must be {ANYCAST!r} or {MULTICAST!r}")
        return self.engine.create_queue(
            name,
            address or name,
            routing=routing,
            durable=durable,
            filter=filter,
            exclusive=exclusive,
            max_consumers=max_consumers,
        )

    def create_address(self, name: str, routing: str) -> dict[str, object]:
        """An address with no queue yet (a topic, or an anycast address awaiting queues)."""
        info = self.engine.post.ensure_address(name, routing)
        if info.routing != routing:
            raise AdminError(f"address {name!r} exists with routing {info.routing!r}")
        return {"name": info.name, "routing": info.routing}

    def delete_address(self, name: str) -> None:
        """Forget an address no queue is bound to and no divert watches by name."""
        post = self.engine.post
        if name not in post.addresses:
            raise AdminError(f"address {name!r} does not exist")
        bound = sorted(q.name for q in post.queues.values() if q.address == name)
        if bound:
            raise ValueError(f"address {name!r} has queues {bound}: delete them first")
        watching = sorted(d.name for d in post.diverts.values() if d.address == name)
        if watching:
            raise ValueError(f"address {name!r} is watched by diverts {watching}")
        post.remove_address(name)

    def delete_queue(self, name: str) -> None:
        try:
            self.engine.delete_queue(name)
        except RoutingError as e:
            raise AdminError(str(e)) from None

    # -- removing messages ----------------------------------------------------------------
    def purge(self, name: str) -> int:
        """Remove every waiting message (in memory, paged and scheduled); in flight ones stay
        with their consumers.  Returns how many went."""
        q = self.queue(name)
        refs = q.drain_all()
        self._unref(refs)
        return len(refs)

    def delete_message(self, name: str, message_id: int) -> bool:
        q = self.queue(name)
        refs = q.take(lambda m: m.id == message_id, 1)
        self._unref(refs)
        return bool(refs)

    def _unref(self, refs: Iterable[MessageRef], ops: list[Op] | None = None) -> None:
        persistence = self.engine.persistence
        out: list[Op] = [] if ops is None else ops
        for ref in refs:
            if ref.rid:
                persistence.unref_ops(ref.rid, ref.message, out)
        if ops is None and out:
            persistence.write(out, True)

    # -- moving ---------------------------------------------------------------------------
    def move(
        self, name: str, target: str, ids: set[int] | None = None, selector: str | None = None
    ) -> Moved:
        """Send the chosen waiting messages of ``name`` to the address ``target`` (copies with
        new ids, the same trace id), removing them from ``name`` in the same write."""
        filt = compile_filter(selector)

        def pick(m: Message) -> bool:
            return (ids is None or m.id in ids) and (filt is None or filt.matches(m))

        return self._reroute(self.queue(name), pick, lambda _m: target)

    def retry_targets(self, name: str, ids: set[int] | None = None) -> set[str]:
        """The original addresses :meth:`retry` would send the chosen messages to."""
        return {
            str(a)
            for m in self.queue(name).browse()
            if (ids is None or m.id in ids) and (a := m.annotation(ORIGINAL_ADDRESS)) is not None
        }

    def retry(self, name: str, ids: set[int] | None = None) -> Moved:
        """Send dead letters (or expired messages) in ``name`` back to the address they were
        on (their ``_WS_ORIG_ADDRESS``), without the dead-letter annotations; messages without
        an original address stay and are counted as skipped."""
        q = self.queue(name)
        skipped = sum(
            1
            for m in q.browse()
            if (ids is None or m.id in ids) and m.annotation(ORIGINAL_ADDRESS) is None
        )

        def pick(m: Message) -> bool:
            return (ids is None or m.id in ids) and m.annotation(ORIGINAL_ADDRESS) is not None

        done = self._reroute(q, pick, lambda m: str(m.annotation(ORIGINAL_ADDRESS)))
        done.skipped = skipped
        return done

    def _reroute(
        self, q: Queue, pick: Callable[[Message], bool], where: Callable[[Message], str]
    ) -> Moved:
        engine = self.engine
        post = engine.post
        refs = q.take(pick)
        ops: list[Op] = []
        for i, ref in enumerate(refs):
            msg = ref.message
            copy = msg.copy(engine.ids(), where(msg))
            ann = copy.annotations
            for key in (ORIGINAL_ADDRESS, ORIGINAL_QUEUE, DEAD_LETTER_REASON, DEAD_LETTER_DETAIL):
                ann.pop(key, None)
            try:
                post.route(copy, ops)
            except Exception:
                q.put_back(refs[i:])  # not moved: back at the head, in order
                self._unref(refs[:i], ops)
                engine.persistence.write(ops, True)
                raise
        self._unref(refs, ops)
        if ops:
            engine.persistence.write(ops, True)
        return Moved(len(refs))

    # -- diverts --------------------------------------------------------------------------
    def divert_info(self, name: str) -> dict[str, object]:
        d = self.engine.post.diverts.get(name)
        if d is None:
            raise AdminError(f"divert {name!r} does not exist")
        return {
            "name": d.name,
            "address": d.address,
            "target": d.target,
            "exclusive": d.exclusive,
            "filter": d.filter.text if d.filter is not None else None,
            "transformer": d.transformer is not None,
        }

    def diverts(self) -> list[dict[str, object]]:
        return [self.divert_info(n) for n in sorted(self.engine.post.diverts)]

    def delete_divert(self, name: str) -> None:
        if name not in self.engine.post.diverts:
            raise AdminError(f"divert {name!r} does not exist")
        self.engine.remove_divert(name)

    # -- connections ----------------------------------------------------------------------
    def sessions(self) -> list[dict[str, object]]:
        return [s.info() for s in self.engine.sessions.values()]

    def session(self, sid: str) -> Session:
        s = self.engine.sessions.get(sid)
        if s is None:
            raise AdminError(f"no connection {sid!r}")
        return s

    def close_session(self, sid: str) -> None:
        """Close a client's core session.  Its consumers are closed first and their handlers
        told, which makes an adapter end the connection (STOMP sends ERROR and closes); a
        connection with no consumer learns at its next call that its session is gone."""
        s = self.session(sid)
        for consumer in list(s.consumers):
            consumer.close()
            consumer.handler.consumer_closed(consumer, OPERATOR_CLOSED)
        s.close()


__all__ = ["OPERATOR_CLOSED", "Admin", "AdminError", "Moved"]
