"""A bridge whose link the remote node dials in: ``[[bridges]] direction = "accept"``.

A site behind a proxy or NAT can dial out but is never reachable.  It opens the link (its
own bridge has ``direction = "both"``) and asks, on that connection, for the traffic waiting
here for it; the adapter hands this node's half of the connection over through
``Session.serve_link`` to the bridge registered for the node name the connection claimed.

Everything else is a core bridge's: the store-and-forward queue ``sf.<remote_node>`` drained
with a window, each message confirmed only once the dialling node stored it (its ACK), held
messages resent first and in order on the next link, stable duplicate ids, routing and
in-doubt timeouts, dead-letter reasons.  Instead of dialling, the connection loop waits for
the next link; a new link from the same node replaces the one it holds (the node reconnected
before this side noticed the old connection die).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from waystation.bridges.core_bridge import CoreBridge
from waystation.bridges.link import BridgeLink
from waystation.bridges.redial import CONNECTED

if TYPE_CHECKING:
    from waystation.bridges.spec import BridgeSpec
    from waystation.core.engine import Engine

log = logging.getLogger("waystation.bridge")

WAITING = "waiting"  # no link: the remote has not dialled in (yet, or again)


class AcceptedBridge(CoreBridge):
    def __init__(self, engine: Engine, spec: BridgeSpec) -> None:
        super().__init__(engine, spec)
        self._offers: asyncio.Queue[BridgeLink] = asyncio.Queue()

    def _has_targets(self) -> bool:
        return True

    async def start(self) -> None:
        node = self.spec.remote_node
        held = self.engine.dial_ins.get(node)
        if held is not None and held != self.offer:
            # another bridge takes node's links: this one would hold a window of sf.<node>
            # that no link ever carries
            self.last_error = f"another bridge already accepts node {node!r}"
            log.error("bridge %s: not started: %s", self.spec.name, self.last_error)
            return
        self.engine.dial_ins[node] = self.offer
        await super().start()

    async def stop(self) -> None:
        if self.engine.dial_ins.get(self.spec.remote_node) == self.offer:
            del self.engine.dial_ins[self.spec.remote_node]
        while not self._offers.empty():
            self._offers.get_nowait().close("bridge stopping")
        await super().stop()

    def offer(self, link: Any) -> None:
        """A connection from the remote node asks for its traffic: serve it next, replacing
        (closing) the link held now and any offered before."""
        if self._stopping:
            link.close("bridge stopped")
            return
        while not self._offers.empty():
            self._offers.get_nowait().close("replaced by a newer link")
        current = self._link
        if current is not None:
            current.close(f"replaced by a new link from {self.spec.remote_node}")
        self._offers.put_nowait(link)

    async def _connection_loop(self) -> None:
        while not self._stopping:
            if self._link is None and self._offers.empty():
                self._set_state(WAITING)
            link = await self._offers.get()
            if link.closed.done():
                continue
            self._auth_refused = False
            log.info(
                "bridge %s: node %s dialled in from %s (%d messages held)",
                self.spec.name,
                self.spec.remote_node,
                link.target,
                len(self._entries),
            )
            await self._serve(link, link.target)

    def _set_state(self, state: str) -> None:
        if state == WAITING:
            if self.state != WAITING:
                self.state = state
                log.info(
                    "bridge %s: waiting for node %s to dial in",
                    self.spec.name,
                    self.spec.remote_node,
                )
        elif state == CONNECTED:
            self.state = state  # logged when the link came (above)
        else:
            super()._set_state(state)


__all__ = ["WAITING", "AcceptedBridge"]
