"""MQTT 3.1.1 and 5 over TCP, fuzzed against a real node: sessions from mqttgen.py, three
in four mutated (mutate.py, and mqttgen.relength).  The node stays up, answers the bystander
and a fresh MQTT round trip after every batch, and frees what the fuzz took."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from random import Random

import pytest

from fuzz import mqttgen
from fuzz.campaign import check, fuzz, fuzz_seed
from fuzz.fuzzkit import Batch, FuzzNode, Tally, budget, pool
from fuzz.mutate import stream_batches
from waystation.wire.mqtt import MQTT_5, MQTT_311


def batches(v: int, seed: int, cases: int, tally: Tally, port: int) -> Iterator[Batch]:
    rng = Random(seed)
    sessions = mqttgen.sessions(v, rng, pool(cases), seed)
    return stream_batches(rng, cases, sessions, tally, port, mqttgen.relength)


async def probe(port: int, v: int) -> None:
    """A fresh client: CONNECT, SUBSCRIBE, a QoS 1 PUBLISH to itself and its PUBACK."""
    await mqttgen.round_trip(*await asyncio.open_connection("127.0.0.1", port), v)


@pytest.mark.parametrize("v", [pytest.param(MQTT_311, id="3.1.1"), pytest.param(MQTT_5, id="5")])
@budget(default=1000, long=20_000)
def test_mqtt_node_survives_fuzz(tmp_path, run, v: int, cases: int) -> None:
    node = FuzzNode(tmp_path / "n").start()
    try:
        seed, tally = fuzz_seed(), Tally()
        work = batches(v, seed, cases, tally, node.mqtt_port)
        report = run(
            fuzz(node, f"mqtt v{v}", seed, work, lambda: probe(node.mqtt_port, v), tally),
            timeout=3 * 3600,
        )
        check(report, node)
    finally:
        node.stop()
