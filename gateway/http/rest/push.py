"""Delivering to one push registration (a webhook) with retries.

Each registration is an engine consumer with a window of one: a message is acknowledged only
after the endpoint answered 2xx, so a crash or restart redelivers it.  Outcomes of one
attempt:

- 2xx: acknowledged, next message;
- a transient failure (connection refused or reset, timeout after ``push_timeout``, 5xx, 408,
  429): retried ``maxRetries`` times in all, ``retryWaitMillis`` apart (at least
  :data:`MIN_RETRY_WAIT`); then, with ``disableOnFailure``, the registration is disabled (the
  message goes back to the queue), otherwise a new round of retries starts after a pause
  that doubles each round up to :data:`MAX_ROUND_PAUSE` (the message is never dropped).  The
  log says when a registration starts failing and when it delivers again, not every attempt;
- a target outside ``push_allow`` (see :mod:`.pushguard`), checked as the connection is
  made, and any other status (4xx, 3xx: redirects are not followed): the message is
  dead-lettered with a reason
  (``remote-authentication`` 401, ``remote-authorization`` 403,
  ``invalid-remote-destination`` 404/410, ``message-too-large`` 413, else
  ``remote-rejected``) and the registration goes on.

A request carries the message's body, Content-Type (the message's own, else ``link@type``)
and properties as headers (see :mod:`mapping`), the registration's custom headers and Basic
credentials.  ``rel="template"`` fills the URL parameter with the message id (stable across
retries); ``rel="destination"`` HEADs the remote queue or topic once for its
``msg-create-with-id`` and posts each message with id ``{node}-{registration}-{message}``, so
the remote drops a repeat.

A registration whose subscription queue is deleted under it (by an operator, a STOMP client)
is disabled, so what ``GET`` shows stays true.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable

import aiohttp

from waystation.core.consumer import Consumer, Delivery
from waystation.core.engine import Engine
from waystation.core.queue import ANYCAST, MULTICAST
from waystation.core.reasons import (
    INVALID_REMOTE_DESTINATION,
    MESSAGE_TOO_LARGE,
    REMOTE_AUTHENTICATION,
    REMOTE_AUTHORIZATION,
    REMOTE_REJECTED,
)
from waystation.core.security import Principal
from waystation.core.session import Outcome, Session, Source
from waystation.gateway.http.rest import sessions
from waystation.gateway.http.rest.links import QUEUES
from waystation.gateway.http.rest.mapping import DEFAULT_TYPE, message_headers
from waystation.gateway.http.rest.pushguard import PushGuard, TargetRefused, refused_in
from waystation.gateway.http.rest.registration import DESTINATION, Registration

log = logging.getLogger("waystation.rest.push")

MIN_RETRY_WAIT = 0.1  # seconds: retryWaitMillis="0" must not make a busy loop
MAX_ROUND_PAUSE = 60.0  # seconds between rounds of retries, at most
_TRANSIENT = frozenset((408, 425, 429))
_REASONS = {
    401: REMOTE_AUTHENTICATION,
    403: REMOTE_AUTHORIZATION,
    404: INVALID_REMOTE_DESTINATION,
    410: INVALID_REMOTE_DESTINATION,
    413: MESSAGE_TOO_LARGE,
}


class Transient(Exception):
    """This attempt failed in a way worth retrying."""


class Rejected(Exception):
    """The endpoint refused this message for good (status, text)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


class Pusher:
    def __init__(
        self,
        reg: Registration,
        engine: Engine,
        session: Callable[[], aiohttp.ClientSession],
        timeout: float,
        on_disabled: Callable[[Registration], None],
        guard: PushGuard | None = None,
        principal: Principal | None = None,
        remote: str = "push",
    ) -> None:
        self.reg = reg
        self.principal = principal  # whom it acts for (see .sessions); None: not startable
        self.remote = remote
        self.guard = guard or PushGuard([])
        self.engine = engine
        self._session = session
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self._on_disabled = on_disabled
        self.session: Session | None = None  # open from start to stop
        self.consumer: Consumer | None = None
        self.failures = 0  # transient failures since the last success (0: healthy)
        self._pending: collections.deque[Delivery] = collections.deque()
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._create_template: str | None = None

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> None:
        """Open its session and subscribe (raises on a bad selector, a refused queue or a
        missing permission of the registering user) and start pushing."""
        reg = self.reg
        if not reg.enabled or self.consumer is not None:
            return
        if self.principal is None:
            raise PermissionError(f"push registration {reg.id}: its user no longer exists")
        if reg.kind == QUEUES:
            source = Source(reg.destination, ANYCAST, selector=reg.selector)
        else:
            assert reg.topic is not None
            source = Source(
                reg.topic,
                MULTICAST,
                selector=reg.selector,
                durable_name=reg.destination if reg.durable else None,
                owned=False,  # reachable by name, as push subscriptions always were
            )
        if self.session is None or self.session.closed:
            self.session = sessions.open_session(self.engine, self.principal, self.remote)
        try:
            self.consumer = self.session.subscribe(source, self, window=1, name=f"push-{reg.id}")
        except BaseException:
            self.session.close()
            self.session = None
            raise
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self, *, delete_subscription: bool = False) -> None:
        """Stop pushing and close the session; ``delete_subscription`` also drops a topic
        registration's subscription queue (the user needs delete_durable_queue for a durable
        one)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._pending.clear()
        consumer, self.consumer = self.consumer, None
        session, self.session = self.session, None
        try:
            if consumer is not None and session is not None:
                session.unsubscribe(consumer, delete_durable=delete_subscription)
            elif delete_subscription and self.reg.topic is not None and self.principal:
                session = session or sessions.open_session(self.engine, self.principal, self.remote)
                session.delete_subscription(self.reg.destination)
        except Exception:
            log.exception("push registration %s: unsubscribing", self.reg.id)
        finally:
            if session is not None:
                session.close()

    def _settle(self, d: Delivery, outcome: Outcome, reason: str = "", detail: str = "") -> None:
        assert self.session is not None
        if reason:
            self.session.settle(d.consumer, d.tag, outcome, reason=reason, detail=detail)
        else:
            self.session.settle(d.consumer, d.tag, outcome)

    # -- DeliveryHandler ----------------------------------------------------------------
    def deliver(self, delivery: Delivery) -> None:
        self._pending.append(delivery)
        self._ready.set()

    def consumer_closed(self, consumer: Consumer, reason: str) -> None:
        log.warning("push registration %s stopped and disabled: %s", self.reg.id, reason)
        self.consumer = None
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self.reg.enabled:
            self.reg.enabled = False
            self._on_disabled(self.reg)

    # -- pushing ------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            while not self._pending:
                self._ready.clear()
                await self._ready.wait()
            d = self._pending.popleft()
            if self.consumer is None or d.consumer.closed or not d.consumer.is_in_flight(d.tag):
                continue
            try:
                if not await self._push(d):
                    return  # disabled
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug: give the message back rather than lose it
                log.exception("push registration %s: delivery failed", self.reg.id)
                if d.consumer.is_in_flight(d.tag) and self.session is not None:
                    self._settle(d, Outcome.MODIFIED)

    async def _push(self, d: Delivery) -> bool:
        """Deliver one message; False when the registration got disabled."""
        reg = self.reg
        wait = max(reg.retry_wait_ms / 1000, MIN_RETRY_WAIT)
        pause = wait
        while True:
            for attempt in range(reg.max_retries):
                if attempt:
                    await asyncio.sleep(wait)
                try:
                    await self._attempt(d)
                except Transient as e:
                    self._failed(e)
                    continue
                except Rejected as e:
                    self._recovered()
                    reason = _REASONS.get(e.status, REMOTE_REJECTED)
                    log.warning(
                        "push %s: message %d dead-lettered (%s): %s",
                        reg.id,
                        d.message.id,
                        reason,
                        e,
                    )
                    self._settle(d, Outcome.REJECTED, reason, str(e))  # dead-lettered
                    return True
                self._recovered()
                self._settle(d, Outcome.ACCEPTED)
                return True
            if reg.disable_on_failure:
                log.warning(
                    "push %s: %d attempts failed; registration disabled", reg.id, reg.max_retries
                )
                reg.enabled = False
                consumer, self.consumer = self.consumer, None
                if consumer is not None and self.session is not None:
                    self.session.unsubscribe(consumer)  # the message goes back to the queue
                self._on_disabled(reg)
                return False
            pause = min(pause * 2, MAX_ROUND_PAUSE)
            log.debug(
                "push %s: %d attempts failed; next round in %.1fs", reg.id, reg.max_retries, pause
            )
            await asyncio.sleep(pause)

    def _failed(self, e: Transient) -> None:
        """Log the first failure of a spell only: a dead endpoint must not flood the log."""
        self.failures += 1
        if self.failures == 1:
            log.warning("push %s: %s; retrying (logged again once it delivers)", self.reg.id, e)
        else:
            log.debug("push %s: attempt failed (%d in a row): %s", self.reg.id, self.failures, e)

    def _recovered(self) -> None:
        if self.failures:
            log.info(
                "push %s: delivering again after %d failed attempts", self.reg.id, self.failures
            )
            self.failures = 0

    async def _attempt(self, d: Delivery) -> None:
        reg = self.reg
        msg = d.message
        if reg.rel == DESTINATION:
            template = await self._remote_template()
            url = template.replace("{id}", f"{self.engine.node_name}-{reg.id}-{msg.id}")
            method = "POST"
        else:
            url = reg.target(str(msg.id))
            method = reg.method
        headers = message_headers(msg, default_type=reg.type or DEFAULT_TYPE)
        for name, value in reg.headers:
            headers[name] = value
        headers.update(self._auth())
        try:
            self.guard.check_literal(url)  # names are checked by the session's resolver
            async with self._session().request(
                method, url, data=msg.body, headers=headers, timeout=self.timeout,
                allow_redirects=False,  # a redirect must not lead past the allow-list
            ) as resp:  # fmt: skip
                await resp.read()
                status = resp.status
                text = resp.reason or ""
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
            refused = e if isinstance(e, TargetRefused | ValueError) else refused_in(e)
            if refused is not None:
                raise Rejected(0, f"{method} {url}: {refused}") from None
            raise Transient(f"{url}: {e!r}") from None
        if 200 <= status < 300:
            return
        if status >= 500 or status in _TRANSIENT:
            raise Transient(f"{url} answered {status} {text}")
        raise Rejected(status, f"{method} {url} answered {status} {text}")

    def _auth(self) -> dict[str, str]:
        reg = self.reg
        if reg.username is None:
            return {}
        return {"Authorization": aiohttp.encode_basic_auth(reg.username, reg.password or "")}

    async def _remote_template(self) -> str:
        """``msg-create-with-id`` of the remote destination (asked once)."""
        if self._create_template is not None:
            return self._create_template
        href = self.reg.href
        try:
            self.guard.check_literal(href)
            async with self._session().head(
                href, headers=self._auth(), timeout=self.timeout, allow_redirects=False
            ) as resp:
                status = resp.status
                found = resp.headers.get("msg-create-with-id")
                if found is None and "create-with-id" in resp.links:
                    found = str(resp.links["create-with-id"]["url"])
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            refused = e if isinstance(e, TargetRefused) else refused_in(e)
            if refused is not None:
                raise Rejected(0, f"HEAD {href}: {refused}") from None
            raise Transient(f"HEAD {href}: {e!r}") from None
        if status >= 500 or status in _TRANSIENT:
            raise Transient(f"HEAD {href} answered {status}")
        if status >= 300 or not found or "{id}" not in found:
            raise Rejected(
                404 if status < 300 else status, f"HEAD {href}: no msg-create-with-id ({status})"
            )
        self._create_template = found
        return found


__all__ = ["Pusher"]
