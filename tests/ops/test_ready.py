"""``/ready`` follows the node's state: 503 before the store is recovered, 200 once serving,
503 again from the moment the listener starts shutting down (in-process: the states are
too short-lived to catch in a real node's start and stop)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from waystation.config.listeners import HttpAcceptor, StompAcceptor
from waystation.core.engine import Engine
from waystation.gateway.http import ops
from waystation.gateway.http.context import HttpContext
from waystation.gateway.stomp import stomp_options


@dataclass(slots=True)
class ReadyContext(HttpContext):
    """A context with the ``ready`` field the node is asked to add."""

    ready: Callable[[], bool] | None = None


def context(engine: Engine, ready: Callable[[], bool] | None = None) -> HttpContext:
    opts = stomp_options(StompAcceptor())
    if ready is None:
        return HttpContext(engine, HttpAcceptor(), opts, None)
    return ReadyContext(engine, HttpAcceptor(), opts, None, ready=ready)


async def status(client: TestClient, path: str) -> int:
    async with client.get(path) as r:
        return r.status


def test_ready_follows_engine_start_and_listener_shutdown(run):
    async def go() -> None:
        engine = Engine()
        app = web.Application()
        ops.setup(app, context(engine))
        async with TestClient(TestServer(app)) as client:
            assert await status(client, "/health") == 200
            assert await status(client, "/ready") == 503  # store not recovered yet
            await engine.start()
            assert await status(client, "/ready") == 200
            await app.shutdown()  # what the listener runs first when it stops
            assert await status(client, "/ready") == 503
            assert await status(client, "/health") == 200
        await engine.stop()

    run(go())


def test_the_nodes_own_readiness_is_used_when_given(run):
    async def go() -> None:
        engine = Engine()
        await engine.start()
        flag = [False]
        app = web.Application()
        ops.setup(app, context(engine, lambda: flag[0]))
        async with TestClient(TestServer(app)) as client:
            assert await status(client, "/ready") == 503  # e.g. a listener not yet up
            flag[0] = True
            assert await status(client, "/ready") == 200
        await engine.stop()

    run(go())
