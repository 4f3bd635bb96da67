"""Helpers for engine tests: an engine on a temp journal, a collecting delivery handler."""

from __future__ import annotations

import asyncio
from pathlib import Path

from waystation.core.consumer import Consumer, Delivery
from waystation.core.engine import Engine, EngineConfig
from waystation.core.events import EXTRA_FIELDS
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


class RecordingSink:
    """An event sink that checks each call against the DESIGN §8 contract (extra keys from
    ``EXTRA_FIELDS`` only) and keeps the records in memory."""

    def __init__(self) -> None:
        self.records: list[dict[str, object]] = []

    def emit(
        self,
        kind: str,
        message_id: int,
        address: str,
        size: int,
        queue: str | None = None,
        **extra: object,
    ) -> None:
        assert set(extra) <= EXTRA_FIELDS, (kind, extra)
        self.records.append(
            {"event": kind, "message_id": message_id, "address": address, "queue": queue, **extra}
        )

    def of(self, kind: str) -> list[dict[str, object]]:
        return [r for r in self.records if r["event"] == kind]

    def close(self) -> None:
        pass
