"""The connection loop every bridge shares: dial the urls in failover order, serve a link
until it closes, back off between failed rounds, give up after ``reconnect_attempts``."""

from __future__ import annotations

import asyncio
import logging
import time

from waystation.bridges.dial import Target
from waystation.bridges.link import AMQP_SCHEMES, BridgeLink, ConnectRefused, LinkOptions
from waystation.bridges.reasons import is_authentication_failure
from waystation.bridges.spec import BridgeSpec
from waystation.bridges.stomp_link import StompLink

log = logging.getLogger("waystation.bridge")

CONNECTING = "connecting"
CONNECTED = "connected"
RETRYING = "retrying"
STOPPED = "stopped"


def describe(e: BaseException) -> str:
    text = str(e)
    name = type(e).__name__
    if isinstance(e, TimeoutError) and not text:
        return "timed out"
    return f"{name}: {text}" if text else name


async def open_link(target: Target, options: LinkOptions) -> BridgeLink:
    """Dial ``target`` and open the protocol its scheme names (amqp/amqps: AMQP 1.0, the
    others STOMP).  Raises OSError/TimeoutError when unreachable, ConnectRefused when the
    remote says no."""
    if target.scheme in AMQP_SCHEMES:
        from waystation.bridges.amqp_link import AmqpLink  # proton: with the first AMQP link

        return await AmqpLink.open(target, options)
    return await StompLink.open(target, options)


def link_options(
    spec: BridgeSpec,
    client_id: str | None = None,
    node: str | None = None,
    expect_node: str | None = None,
    amqp_target: str | None = None,
    amqp_source: str | None = None,
) -> LinkOptions:
    return LinkOptions(
        login=spec.user,
        passcode=spec.password,
        heartbeat=spec.heartbeat,
        liveness=spec.liveness_timeout,
        connect_timeout=spec.liveness_timeout or 30.0,
        client_id=client_id,
        node=node,
        expect_node=expect_node,
        amqp_target=amqp_target,
        amqp_source=amqp_source,
    )


class Redialing:
    """Base of the bridge kinds; subclasses implement ``_serve`` and ``_set_state``."""

    spec: BridgeSpec
    failed: int
    last_error: str | None
    next_attempt: float | None
    _options: LinkOptions
    _stopping: bool
    _progress: bool  # the last link moved messages: redial at once, without backing off
    _auth_refused: bool  # the last round failed on credentials

    def _set_state(self, state: str) -> None:
        raise NotImplementedError

    async def _serve(self, link: BridgeLink, target: Target) -> None:
        raise NotImplementedError

    def _has_targets(self) -> bool:
        """Log the urls this version cannot dial; False (and the reason) when none is left."""
        spec = self.spec
        for why in spec.skipped:
            log.warning("bridge %s: url skipped: %s", spec.name, why)
        if spec.targets:
            return True
        self.last_error = "no usable url: " + "; ".join(spec.skipped)
        log.error("bridge %s: not started: %s", spec.name, self.last_error)
        return False

    def _gave_up(self) -> None:
        """Called once the loop stops for good (reconnect_attempts exhausted)."""

    async def _connection_loop(self) -> None:
        policy = self.spec.retry
        failures = 0
        while not self._stopping:
            self._set_state(CONNECTING)
            got = await self._connect_any()
            if got is not None:
                await self._serve(*got)
                if self._stopping:
                    return
                if self._progress:
                    failures = 0
                    continue  # the link worked: redial at once
            failures += 1
            self.failed += 1
            if policy.exhausted(failures):
                self.last_error = f"gave up after {failures} failed attempts: {self.last_error}"
                log.error("bridge %s: %s", self.spec.name, self.last_error)
                self._gave_up()
                self._set_state(STOPPED)
                return
            delay = policy.delay(failures)
            self.next_attempt = time.time() + delay
            self._set_state(RETRYING)
            await asyncio.sleep(delay)
            self.next_attempt = None

    async def _connect_any(self) -> tuple[BridgeLink, Target] | None:
        errors: list[str] = []
        auth = False
        for target in self.spec.targets:
            if self._stopping:
                return None
            try:
                link = await open_link(target, self._options)
            except ConnectRefused as e:
                refused = is_authentication_failure(e.message)
                auth |= refused
                what = "credentials refused" if refused else "connection refused"
                errors.append(f"{target}: {what}: {e}")
            except (OSError, EOFError) as e:
                errors.append(f"{target}: {describe(e)}")
            except Exception as e:  # a bug must not end the bridge: count it as a failure
                log.exception("bridge %s: connecting to %s failed", self.spec.name, target)
                errors.append(f"{target}: {describe(e)}")
            else:
                self._auth_refused = False
                return link, target
        self._auth_refused = auth
        self.last_error = "; ".join(errors)
        return None
