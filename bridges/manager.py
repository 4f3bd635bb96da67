"""The bridges of one node: built from ``[[bridges]]``, started after the listeners, stopped first."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

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
        self.bridges: list[Bridge] = []
        for cfg in configs:
            spec = spec_from_config(cfg)
            bridge: Bridge
            if spec.foreign and spec.inbound:
                bridge = ForeignInbound(engine, spec)
            elif spec.foreign:
                bridge = ForeignStompBridge(engine, spec)
            else:
                bridge = CoreBridge(engine, spec)
            self.bridges.append(bridge)

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
