"""What a real node cannot easily show: event-loop lag under a stall, bridge metrics from the
node's bridge status (the HttpContext field the node is asked to add), the admin API with
security off."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from waystation.config.listeners import HttpAcceptor, StompAcceptor
from waystation.core.engine import Engine
from waystation.gateway.http import admin, ops
from waystation.gateway.http.context import HttpContext
from waystation.gateway.http.ops.metrics import LoopLag
from waystation.gateway.stomp import stomp_options


@dataclass(slots=True)
class BridgeContext(HttpContext):
    bridges: Callable[[], list[dict[str, Any]]] | None = None


def test_loop_lag_sees_a_stall(run):
    async def go() -> None:
        lag = LoopLag(interval=0.02)
        lag.start()
        await asyncio.sleep(0.1)
        assert lag.samples >= 2 and lag.last < 0.1
        time.sleep(0.3)  # a callback blocking the loop
        await asyncio.sleep(0.1)
        assert lag.take_worst() >= 0.25
        await lag.stop()

    run(go())


STATUS = [
    {
        "name": "to-b",
        "remote_node": "site-b",
        "state": "connected",
        "waiting": 7,
        "in_flight": 3,
        "forwarded": 120,
        "failed": 2,
        "dead_lettered": 1,
    },
    {"name": "to-c", "remote_node": "site-c", "state": "retrying", "waiting": 40},
]


def test_bridge_status_becomes_metrics_and_the_admin_list(run):
    async def go() -> None:
        engine = Engine()
        await engine.start()
        ctx = BridgeContext(
            engine, HttpAcceptor(), stomp_options(StompAcceptor()), None, bridges=lambda: STATUS
        )
        app = web.Application()
        ops.setup(app, ctx)
        admin.setup(app, ctx)
        async with TestClient(TestServer(app)) as client:
            async with client.get("/metrics") as r:
                text = await r.text()
            samples = {
                (s.name, s.labels.get("bridge")): s.value
                for fam in text_string_to_metric_families(text)
                for s in fam.samples
            }
            assert samples[("waystation_bridge_up", "to-b")] == 1
            assert samples[("waystation_bridge_up", "to-c")] == 0
            assert samples[("waystation_bridge_backlog", "to-c")] == 40
            assert samples[("waystation_bridge_in_flight", "to-b")] == 3
            assert samples[("waystation_bridge_forwarded_total", "to-b")] == 120
            assert samples[("waystation_bridge_dead_lettered_total", "to-b")] == 1
            # security off, a caller on this host: the admin API answers without a login
            async with client.get("/admin/api/v1/bridges") as r:
                assert r.status == 200
                assert [b["name"] for b in (await r.json())["bridges"]] == ["to-b", "to-c"]
            async with client.post("/admin/api/v1/queues", json={"name": "made"}) as r:
                assert r.status == 201
            assert engine.queue("made") is not None
        await engine.stop()

    run(go())
