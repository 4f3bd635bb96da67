"""SUBSCRIBE and UNSUBSCRIBE, and what a persistent session keeps between connections.

Each topic filter is one core consumer on a multicast subscription of the mapped pattern:
a temporary one for a session that ends with its connection, a durable one (named after the
filter, owned by the user and client id) for a persistent session, so messages queue up
while the client is away.  ``$share/<group>/<filter>`` is a shared durable subscription: one
queue per group and filter, its consumers taking turns; it goes when its last member leaves
and no saved session holds it (``shared.py``).

A persistent session's state is saved with the core session (survives node restarts):
``subscriptions`` (a list of ``[filter, qos, no_local, retain_as_published, retain_handling,
subscription_id]``), ``qos2_in/<packet id>`` (the duplicate id of a QoS 2 message awaiting
PUBREL, see ``publish_in.py``) and ``qos2_out/<packet id>`` (a QoS 2 delivery: ``[message id,
state]``, see ``inflight.py``).  The QoS 2 ids are one key each, so one more id writes one
small record, never the whole set again; PUBREL / PUBCOMP drop the key.  (A session saved
before kept them as one list under ``qos2_in`` / ``qos2_out``: read, then rewritten per key.)

With security on the saved session belongs to the user who made it (the core records the
owner): another user's CONNECT with that client id is refused before it can see, resume or
wipe it (``session.py``), and each user's saved sessions count against its quotas.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from waystation.core.consumer import Consumer, ConsumerError, Delivery
from waystation.core.limits import LimitExceeded
from waystation.core.postoffice import RoutingError
from waystation.core.queue import MULTICAST
from waystation.core.security import SYSTEM, NotAuthorized, Permission, Principal
from waystation.core.session import CreditMode, SessionError, Source
from waystation.gateway.mqtt import shared
from waystation.gateway.mqtt.inflight import SENT
from waystation.gateway.mqtt.registry import registry
from waystation.gateway.mqtt.topics import (
    TopicError,
    dollar_blind,
    escape_level,
    filter_to_pattern,
    parse_filter,
)
from waystation.wire.mqtt import (
    ProtocolError,
    PubRel,
    ReasonCode,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    validate_topic_filter,
)

if TYPE_CHECKING:
    from waystation.core.engine import Engine
    from waystation.gateway.mqtt.session import MqttSession

log = logging.getLogger("waystation.mqtt")
R = ReasonCode
NEVER = 0xFFFFFFFF  # a session expiry interval that does not expire
# what a saved session holds ("x/": one key per packet id; "qos2_in" and "qos2_out": as saved
# before, one list each)
STATE_KEYS = ("subscriptions", "qos2_in/", "qos2_out/", "qos2_in", "qos2_out", "expires")


class Sub:
    """One topic filter of a session."""

    __slots__ = (
        "filter",
        "pattern",
        "qos",
        "no_local",
        "retain_as_published",
        "retain_handling",
        "sub_id",
        "group",
        "durable",
        "presettled",
        "dollar_blind",
        "consumer",
        "closed",
        "last_address",
        "last_topic",
        "session",
    )

    def __init__(
        self,
        topic_filter: str,
        pattern: str,
        qos: int,
        no_local: bool = False,
        retain_as_published: bool = False,
        retain_handling: int = 0,
        sub_id: int = 0,
        group: str | None = None,
    ) -> None:
        self.filter = topic_filter
        self.pattern = pattern
        self.qos = qos
        self.no_local = no_local
        self.retain_as_published = retain_as_published
        self.retain_handling = retain_handling
        self.sub_id = sub_id
        self.group = group
        self.durable = False
        self.presettled = qos == 0
        self.dollar_blind = dollar_blind(parse_filter(topic_filter)[1])
        self.consumer: Consumer | None = None
        self.closed = False
        self.last_address = ""  # the last delivery's address and its topic, reused
        self.last_topic = ""
        self.session: MqttSession | None = None  # set when attached: it is the handler

    # -- the core consumer's handler (the subscription itself: no object more per filter) --
    def deliver(self, delivery: Delivery) -> None:
        self.session.deliver(self, delivery)  # type: ignore[union-attr]

    def consumer_closed(self, consumer: object, reason: str) -> None:
        ms = self.session
        self.closed = True
        if ms is not None and not ms.closed and ms.subs.get(self.filter) is self:
            log.info("MQTT %s: subscription %r closed: %s", ms.link.peer, self.filter, reason)
            del ms.subs[self.filter]
        self.session = None  # no deliveries come any more (see release)

    def release(self) -> None:
        """Forget the consumer and the session once the consumer is closed: the consumer
        holds this as its handler, and the cycle would keep the connection (its buffers,
        its queue) in memory until the cyclic GC runs (``gateway/gc_policy.py``)."""
        self.consumer = None
        self.session = None

    def record(self) -> list[Any]:
        return [
            self.filter,
            self.qos,
            self.no_local,
            self.retain_as_published,
            self.retain_handling,
            self.sub_id,
        ]


def durable_name(topic_filter: str) -> str:
    """The durable subscription name of a filter (names cannot hold a filter's characters)."""
    group, rest = parse_filter(topic_filter)
    digest = hashlib.sha1(rest.encode()).hexdigest()[:24]
    if group is None:
        return f"mqtt.{digest}"
    return f"mqtt.{escape_level(group)}.{digest}"


# -- subscribing ---------------------------------------------------------------------------
def subscribe(ms: MqttSession, p: Subscribe) -> None:
    """SUBACK first, then what the new subscriptions brought (queued or retained)."""
    sub_id = int(p.properties.get("subscription_identifier", 0)) if ms.v5 else 0
    codes: list[int] = []
    retained: list[Sub] = []
    fresh: list[int] = []  # the requests that added a filter (undone if the state is refused)
    ms._hold_out = []
    try:
        for req in p.subscriptions:
            try:
                new = req.filter not in ms.subs
                codes.append(_one(ms, req, sub_id, retained))
                if new:
                    fresh.append(len(codes) - 1)
            except (
                NotAuthorized,
                LimitExceeded,
                RoutingError,
                SessionError,
                ConsumerError,
                TopicError,
                _Refused,
            ) as e:
                code = _code(e)
                log.info("MQTT %s: SUBSCRIBE %r refused: %s", ms.link.peer, req.filter, e)
                codes.append(code if ms.v5 else 0x80)
    finally:
        held, ms._hold_out = ms._hold_out, None
    if ms.closed:
        return
    try:
        save_subscriptions(ms)
    except LimitExceeded as e:  # the user's saved state is at its quota: the new ones go
        _undo(ms, p, fresh, codes, retained, e)
    ms._packet(SubAck(p.packet_id, codes))
    for data in held or ():
        ms.link.write(data)
    session = ms.session
    assert session is not None
    for s in retained:  # copies into the subscription's queue, delivered like the rest
        if not s.closed and s.consumer is not None:
            session.send_retained(s.consumer)


def _undo(
    ms: MqttSession,
    p: Subscribe,
    fresh: list[int],
    codes: list[int],
    retained: list[Sub],
    e: LimitExceeded,
) -> None:
    """The saved subscriptions could not grow: the filters this SUBSCRIBE added are removed
    again and answered QUOTA_EXCEEDED (3.1.1: failure), so what is saved stays true."""
    log.info("MQTT %s: SUBSCRIBE refused: %s", ms.link.peer, e)
    for i in fresh:
        s = ms.subs.pop(p.subscriptions[i].filter, None)
        if s is not None:
            _detach(ms, s, delete=True)
            if s in retained:
                retained.remove(s)
        codes[i] = R.QUOTA_EXCEEDED if ms.v5 else 0x80
    save_subscriptions(ms)  # no bigger than what was saved before


class _Refused(Exception):
    def __init__(self, reason: int, text: str) -> None:
        super().__init__(text)
        self.reason = reason


def _code(e: Exception) -> int:
    if isinstance(e, _Refused):
        return e.reason
    if isinstance(e, NotAuthorized):
        return R.NOT_AUTHORIZED
    if isinstance(e, LimitExceeded):
        return R.QUOTA_EXCEEDED
    if isinstance(e, TopicError):
        return R.TOPIC_FILTER_INVALID
    return R.UNSPECIFIED_ERROR


def _one(ms: MqttSession, req: Any, sub_id: int, retained: list[Sub]) -> int:
    f = req.filter
    try:
        validate_topic_filter(f)
    except ProtocolError as e:
        raise _Refused(R.TOPIC_FILTER_INVALID, e.message) from e
    group, rest = parse_filter(f)
    if group is not None and req.no_local:
        raise ProtocolError(R.PROTOCOL_ERROR, "[MQTT-3.8.3-4] no local on a shared subscription")
    old = ms.subs.get(f)
    if old is None and len(ms.subs) >= ms.options.max_subscriptions:
        raise _Refused(R.QUOTA_EXCEEDED, f"this client already has {len(ms.subs)} subscriptions")
    qos = min(req.qos, ms.options.max_qos)
    s = Sub(
        f,
        filter_to_pattern(rest),
        qos,
        req.no_local,
        req.retain_as_published,
        req.retain_handling,
        sub_id,
        group,
    )
    _attach(ms, s, durable=group is not None or ms.expiry > 0 or (old is not None and old.durable))
    if old is not None:  # replaced, without a gap [MQTT-3.8.4-3]
        old.closed = True
        assert ms.session is not None and old.consumer is not None
        ms.session.unsubscribe(old.consumer)
        old.release()
    ms.subs[f] = s
    if group is None and (req.retain_handling == 0 or (req.retain_handling == 1 and old is None)):
        retained.append(s)  # after SUBACK [MQTT-3.8.4-4]; none for a shared one
    return qos


def _attach(ms: MqttSession, s: Sub, *, durable: bool) -> None:
    session = ms.session
    assert session is not None
    s.durable = durable
    s.session = ms
    source = Source(
        s.pattern,
        MULTICAST,
        durable_name=durable_name(s.filter) if durable else None,
        shared=s.group is not None,
        no_local=s.no_local,
    )
    s.consumer = session.subscribe(
        source,
        s,
        mode=CreditMode.PRESETTLED if s.qos == 0 else CreditMode.WINDOW,
        window=ms.outbound.limit,
        name=s.filter,
    )
    if ms._paused_writing or ms.outbound.window_paused:
        s.consumer.pause()


def unsubscribe(ms: MqttSession, p: Unsubscribe) -> None:
    session = ms.session
    assert session is not None
    codes: list[int] = []
    for f in p.filters:
        s = ms.subs.pop(f, None)
        if s is None:
            codes.append(R.NO_SUBSCRIPTION_EXISTED)
            continue
        _detach(ms, s, delete=True)
        codes.append(R.SUCCESS)
    ms._packet(UnsubAck(p.packet_id, codes if ms.v5 else []))
    save_subscriptions(ms)


def _detach(ms: MqttSession, s: Sub, *, delete: bool) -> None:
    """Detach ``s``; with ``delete``, its durable subscription goes too (not a shared one,
    and only where the user may delete: else it stays, detached)."""
    session = ms.session
    assert session is not None and s.consumer is not None
    s.closed = True
    drop = delete and s.durable and s.group is None
    if drop and not session.allowed(Permission.DELETE_DURABLE_QUEUE, s.pattern):
        log.info(
            "MQTT %s: durable subscription of %r kept: no delete permission", ms.link.peer, s.filter
        )
        drop = False
    try:
        session.unsubscribe(s.consumer, delete_durable=drop)
    except (NotAuthorized, SessionError) as e:
        log.info("MQTT %s: unsubscribing %r: %s", ms.link.peer, s.filter, e)
    else:
        s.release()
    if delete and s.group is not None:  # the last member out closes the group's queue
        name = session.durable_queue_name(durable_name(s.filter), shared=True)
        shared.drop_if_unused(session, s.filter, name, shared.scope_of(ms.core_id))


# -- persistent sessions ----------------------------------------------------------------------
def open_state(ms: MqttSession, clean: bool) -> bool:
    """At CONNECT: discard (clean start) or find the saved session; whether one is present."""
    session = ms.session
    assert session is not None
    saved = session.load_state("subscriptions")
    ms._stateful = saved is not None or ms.expiry > 0
    if clean or saved is None:
        if saved is not None:
            _forget(ms, saved)
        if ms.expiry > 0:
            session.save_state("subscriptions", [])
        return False
    ms._resume = list(saved)
    session.drop_state("expires")  # claimed: no longer expiring
    ms.inbound.restore(session.load_state("qos2_in/") or {})
    ms.outbound.restore(session.load_state("qos2_out/") or {})
    _migrate(ms)
    return True


def _migrate(ms: MqttSession) -> None:
    """QoS 2 ids saved as one list each (before one key per id): restored, and saved again
    one key per id."""
    session = ms.session
    assert session is not None
    old_in, old_out = session.load_state("qos2_in"), session.load_state("qos2_out")
    if old_in:
        ms.inbound.restore(old_in)
        for pid, dup in ms.inbound.dup_ids.items():
            session.save_state(f"qos2_in/{pid}", dup)
    if old_out:
        out = ms.outbound
        out.restore(old_out)
        for pid in out.entries:
            rec = out.record(pid)
            if rec is not None:
                session.save_state(f"qos2_out/{pid}", rec)
        for mid, pid in out.resend.items():
            session.save_state(f"qos2_out/{pid}", [mid, SENT])
    for key in ("qos2_in", "qos2_out"):
        session.drop_state(key)


def resume(ms: MqttSession) -> None:
    """After CONNACK: the saved subscriptions attach again (what queued meanwhile flows),
    and PUBRELs the client has not confirmed are sent again [MQTT-4.4.0-1]."""
    for pid in ms.outbound.released():
        ms._packet(PubRel(pid))
    for rec in ms._resume:
        f, qos, no_local, rap, rh, sub_id = rec
        group, rest = parse_filter(f)
        s = Sub(f, filter_to_pattern(rest), qos, no_local, rap, rh, sub_id, group)
        try:
            _attach(ms, s, durable=True)
        except (NotAuthorized, LimitExceeded, RoutingError, SessionError, ConsumerError) as e:
            log.info("MQTT %s: saved subscription %r not resumed: %s", ms.link.peer, f, e)
            continue
        ms.subs[f] = s
    ms._resume = ()
    save_subscriptions(ms)


def _forget(ms: MqttSession, saved: list[Any]) -> None:
    session = ms.session
    assert session is not None
    for rec in saved:
        _delete_durable(session, rec[0])
    for key in STATE_KEYS:
        session.drop_state(key)


def _delete_durable(session: Any, topic_filter: str) -> None:
    if parse_filter(topic_filter)[0] is not None:  # the group's: goes with its last member
        name = session.durable_queue_name(durable_name(topic_filter), shared=True)
        shared.drop_if_unused(session, topic_filter, name, shared.scope_of(session.client_id))
        return
    name = session.durable_queue_name(durable_name(topic_filter))
    try:
        session.delete_subscription(name)
    except (NotAuthorized, SessionError) as e:
        log.info("MQTT: durable subscription %r kept: %s", name, e)


def drop_session(ms: MqttSession) -> None:
    """The connection of a session with expiry 0 ends: so does the session (a resumed one
    had durable subscriptions and saved state)."""
    stateful = ms._stateful or any(s.durable and s.group is None for s in ms.subs.values())
    for s in list(ms.subs.values()):
        if s.durable:  # its own subscriptions go; a group's goes with its last member
            _detach(ms, s, delete=True)
    if stateful:
        session = ms.session
        assert session is not None
        for key in STATE_KEYS:
            session.drop_state(key)


def expirer(ms: MqttSession) -> Callable[[], None]:
    """What ends a persistent session once its expiry interval has passed unclaimed; the
    moment is saved too, so a node restarted meanwhile ends it then (:func:`rearm`)."""
    assert ms.principal is not None and ms.session is not None
    if 0 < ms.expiry < NEVER:
        at = time.time() + ms.expiry
        who = {"at": at, "user": ms.principal.name, "client": ms.client_id}
        try:
            ms.session.save_state("expires", who)
        except LimitExceeded as e:  # the timer below still ends it; a restart would not
            log.warning(
                "MQTT %s: session expiry of %r not saved: %s", ms.link.peer, ms.client_id, e
            )
    return _expire(ms.engine, ms.principal, ms.core_id)


def rearm(engine: Engine) -> int:
    """At node start: the persistent sessions whose clients left with a finite expiry get
    their expiry timers back (one already past ends at once); how many."""
    n = 0
    now = time.time()
    reg = registry(engine)
    for scope in engine.client_states.scopes("mqtt/"):
        who = engine.load_state(scope, "expires")
        if not isinstance(who, dict):
            continue
        principal = engine.principal_named(str(who.get("user"))) or SYSTEM
        left = max(1, int(float(who.get("at", now)) - now))
        expire = _expire(engine, principal, scope.removeprefix("mqtt/"))
        reg.left(str(who.get("client")), principal, "restart", None, 0, left, expire)
        n += 1
    return n


def _expire(engine: Engine, principal: Principal, cid: str) -> Callable[[], None]:
    def expire() -> None:
        session = engine.open_session(principal, "mqtt", "session-expiry", cid)
        try:
            for rec in session.load_state("subscriptions") or ():
                _delete_durable(session, rec[0])
            for key in STATE_KEYS:
                session.drop_state(key)
        finally:
            session.close()

    return expire


def save_subscriptions(ms: MqttSession) -> None:
    if ms.expiry > 0 and ms.session is not None:
        ms._stateful = True
        recs = [s.record() for s in ms.subs.values()]
        ms.session.save_state("subscriptions", recs)


def save_inbound(ms: MqttSession, pid: int, dup: str | None) -> asyncio.Future[None] | None:
    """Save (``dup`` None: drop) one QoS 2 packet id awaiting PUBREL: one small record."""
    if ms.expiry == 0 or ms.session is None:
        return None
    ms._stateful = True
    key = f"qos2_in/{pid}"
    return ms.session.drop_state(key) if dup is None else ms.session.save_state(key, dup)


def save_outbound(ms: MqttSession, pid: int) -> asyncio.Future[None] | None:
    """Save QoS 2 delivery ``pid`` as it is now, or drop its record once it is over."""
    if ms.expiry == 0 or ms.session is None:
        return None
    ms._stateful = True
    rec = ms.outbound.record(pid)
    key = f"qos2_out/{pid}"
    return ms.session.drop_state(key) if rec is None else ms.session.save_state(key, rec)


__all__ = ["Sub", "durable_name", "open_state", "resume", "subscribe", "unsubscribe"]
