"""Who holds each client id on an engine: the live connection (for takeover), and what a
gone client left behind (a delayed will, a session expiring).

One registry per engine (a node runs one; tests run several), weakly keyed so a stopped
engine takes its registry with it.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from waystation.core.engine import Engine
from waystation.core.security import Principal
from waystation.gateway.mqtt.will import publish_will
from waystation.wire.mqtt import Will

if TYPE_CHECKING:
    from waystation.gateway.mqtt.session import MqttSession

log = logging.getLogger("waystation.mqtt")


class Gone:
    """What a disconnected client left: its will until the delay ends, its session until
    it expires."""

    __slots__ = ("principal", "remote", "will", "will_timer", "expiry_timer")

    def __init__(self, principal: Principal, remote: str) -> None:
        self.principal = principal
        self.remote = remote
        self.will: Will | None = None
        self.will_timer: asyncio.TimerHandle | None = None
        self.expiry_timer: asyncio.TimerHandle | None = None


class Registry:
    def __init__(self, engine: Engine) -> None:
        self.engine = weakref.ref(engine)
        self.live: dict[str, MqttSession] = {}
        self.gone: dict[str, Gone] = {}

    # -- a client comes back ---------------------------------------------------------------
    def returning(self, client_id: str, clean: bool) -> None:
        """A CONNECT for ``client_id``: a pending will is dropped when the session resumes
        and published now when it does not (the old session ends here); a pending expiry
        is cancelled either way (the new connection decides)."""
        g = self.gone.pop(client_id, None)
        if g is None:
            return
        if g.expiry_timer is not None:
            g.expiry_timer.cancel()
        if g.will_timer is not None:
            g.will_timer.cancel()
            if clean:
                self._publish(g)

    # -- a client leaves -------------------------------------------------------------------
    def left(
        self,
        client_id: str,
        principal: Principal,
        remote: str,
        will: Will | None,
        will_delay: int,
        expiry: int,
        expire: Callable[[], None] | None,
    ) -> None:
        """Schedule what a departed client leaves: ``will`` after ``will_delay`` seconds or
        at session end (``expiry``), ``expire`` (drop the persistent session) after
        ``expiry`` seconds (0xFFFFFFFF: never)."""
        engine = self.engine()
        if engine is None:
            return
        loop = asyncio.get_running_loop()
        g = Gone(principal, remote)
        if will is not None:
            delay = min(will_delay, expiry)
            g.will = will
            if delay <= 0:
                publish_will(engine, principal, remote, will)
                g.will = None
            else:
                g.will_timer = loop.call_later(delay, self._will_due, client_id, g)
        if expire is not None and 0 < expiry < 0xFFFFFFFF:
            g.expiry_timer = loop.call_later(expiry, self._expired, client_id, g, expire)
        if g.will_timer is not None or g.expiry_timer is not None:
            self.gone[client_id] = g

    def _will_due(self, client_id: str, g: Gone) -> None:
        g.will_timer = None
        self._publish(g)
        if g.expiry_timer is None and self.gone.get(client_id) is g:
            del self.gone[client_id]

    def _publish(self, g: Gone) -> None:
        engine = self.engine()
        if engine is not None and g.will is not None:
            publish_will(engine, g.principal, g.remote, g.will)
        g.will = None

    def _expired(self, client_id: str, g: Gone, expire: Callable[[], None]) -> None:
        g.expiry_timer = None
        if g.will_timer is not None:  # the session ends first: its will goes now
            g.will_timer.cancel()
            g.will_timer = None
            self._publish(g)
        if self.gone.get(client_id) is g:
            del self.gone[client_id]
        try:
            expire()
        except Exception:
            log.exception("MQTT: expiring the session of %r failed", client_id)


_registries: weakref.WeakKeyDictionary[Any, Registry] = weakref.WeakKeyDictionary()


def registry(engine: Engine) -> Registry:
    r = _registries.get(engine)
    if r is None:
        r = _registries[engine] = Registry(engine)
    return r


__all__ = ["Gone", "Registry", "registry"]
