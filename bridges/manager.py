"""The bridges of one node: built from ``[[bridges]]``, started after the listeners, stopped first."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from waystation.bridges.accepted import AcceptedBridge
from waystation.bridges.core_bridge import CoreBridge
from waystation.bridges.foreign import ForeignInbound, ForeignStompBridge
from waystation.bridges.spec import spec_from_config

if TYPE_CHECKING:
    from waystation.config.links import BridgeConfig
    from waystation.core.engine import Engine

log = logging.getLogger("waystation.bridge")

Bridge = CoreBridge | ForeignInbound


class BridgeManager:
    def __init__(self, engine: Engine, configs: list[BridgeConfig]) -> None:
        self.engine = engine
        self.bridges: list[Bridge] = [self._make(cfg) for cfg in configs]

    def _make(self, cfg: BridgeConfig) -> Bridge:
        spec = spec_from_config(cfg)
        if spec.foreign and spec.inbound:
            return ForeignInbound(self.engine, spec)
        if spec.foreign:
            return ForeignStompBridge(self.engine, spec)
        if spec.accept:
            return AcceptedBridge(self.engine, spec)
        return CoreBridge(self.engine, spec)

    async def add(self, cfg: BridgeConfig) -> None:
        """A bridge added at run time (a config reload): built, started."""
        bridge = self._make(cfg)
        if not bridge.spec.foreign:
            self.engine.add_remote_node(bridge.spec.remote_node)
        self.bridges.append(bridge)
        await bridge.start()

    async def remove(self, name: str) -> None:
        """Stop and forget a bridge (what it had not forwarded stays in its queue)."""
        bridge = self.get(name)
        if bridge is not None:
            self.bridges.remove(bridge)
            await bridge.stop()

    async def start(self) -> None:
        for b in self.bridges:
            await b.start()

    async def stop(self) -> None:
        for b in self.bridges:
            try:
                await b.stop()
            except Exception:  # stopping the others matters more
                log.exception("bridge %s: error while stopping", b.spec.name)

    def status(self) -> list[dict[str, object]]:
        return [b.status() for b in self.bridges]

    def get(self, name: str) -> Bridge | None:
        return next((b for b in self.bridges if b.spec.name == name), None)

    def _named(self, name: str) -> Bridge:
        bridge = self.get(name)
        if bridge is None:
            raise KeyError(name)
        return bridge

    def pause(self, name: str) -> None:
        """Stop taking new messages from the bridge's source; its link stays up.  KeyError
        for an unknown name.  A paused bridge stays paused across a reconnect, not across a
        node restart or a reload that re-creates it."""
        self._named(name).pause()

    def resume(self, name: str) -> None:
        self._named(name).resume()
