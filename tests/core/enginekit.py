"""Helpers for engine tests: an engine on a temp journal, a collecting delivery handler."""

from __future__ import annotations

import asyncio
from pathlib import Path

from waystation.core.consumer import Consumer, Delivery
from waystation.core.engine import Engine, EngineConfig
from waystation.core.settings import AddressSettings
from waystation.core.store.journal import FileJournal


class Collector:
    """A DeliveryHandler that records deliveries."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.closed_reason: str | None = None

    def deliver(self, delivery: Delivery) -> None:
        self.deliveries.append(delivery)

    def consumer_closed(self, consumer: Consumer, reason: str) -> None:
        self.closed_reason = reason

    @property
    def bodies(self) -> list[bytes]:
        return [d.message.body for d in self.deliveries]

    def ack_all(self) -> None:
        for d in self.deliveries:
            if d.consumer.is_in_flight(d.tag):
                d.consumer.ack(d.tag)


async def make_engine(
    data_dir: Path | None,
    settings: dict[str, AddressSettings] | None = None,
    **kw: object,
) -> Engine:
    cfg = EngineConfig(data_dir=data_dir, address_settings=settings or {}, **kw)  # type: ignore[arg-type]
    journal = bindings = None
    if data_dir is not None:
        journal, bindings = FileJournal(data_dir / "journal"), FileJournal(data_dir / "bindings")
    eng = Engine(cfg, journal, bindings=bindings)
    await eng.start()
    return eng


async def settle(rounds: int = 3) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)
