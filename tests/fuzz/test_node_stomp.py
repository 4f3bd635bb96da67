"""STOMP over TCP, fuzzed against a real node: sessions from stompgen.py, three in four
mutated (mutate.py, and stompgen.relength).  The node stays up, answers the bystander and a
fresh login after every batch, and frees what the fuzz took (campaign.check)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from random import Random

from fuzz import stompgen
from fuzz.campaign import check, fuzz, fuzz_seed
from fuzz.fuzzkit import Batch, FuzzNode, Tally, budget, pool
from fuzz.mutate import stream_batches

MUTATE = 0.75  # the share of cases mutated; the rest go as drawn


def batches(seed: int, cases: int, tally: Tally, port: int) -> Iterator[Batch]:
    rng = Random(seed)
    sessions = stompgen.sessions(rng, pool(cases), seed)
    return stream_batches(rng, cases, sessions, tally, port, stompgen.relength, MUTATE)


async def probe(port: int) -> None:
    """A fresh login and a receipt on the STOMP listener."""
    await stompgen.round_trip(*await asyncio.open_connection("127.0.0.1", port))


@budget(default=2000, long=30_000)
def test_stomp_node_survives_fuzz(tmp_path, run, cases: int) -> None:
    node = FuzzNode(tmp_path / "n").start()
    try:
        seed, tally = fuzz_seed(), Tally()
        work = batches(seed, cases, tally, node.stomp_port)
        report = run(
            fuzz(node, "stomp", seed, work, lambda: probe(node.stomp_port), tally),
            timeout=3 * 3600,
        )
        check(report, node)
    finally:
        node.stop()
