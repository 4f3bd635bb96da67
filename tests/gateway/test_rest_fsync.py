"""A durable POST (and a durable acknowledgement) is answered only once the journal says the
write is on disk.  The REST app runs in-process over a real engine whose journal is a real
FileJournal with a gate: its sync writes complete normally but are acknowledged only when
the test opens the gate, which is what a slow disk looks like to the engine."""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from gatedjournal import GatedJournal

from waystation.config.listeners import HttpAcceptor
from waystation.core.engine import Engine, EngineConfig
from waystation.core.store.journal import FileJournal
from waystation.gateway.http import rest
from waystation.gateway.http.server import HttpContext
from waystation.gateway.stomp.session import StompOptions
from waystation.wire.stomp import Limits


async def _pending(aw: asyncio.Future[web.StreamResponse] | asyncio.Task[object]) -> bool:
    await asyncio.sleep(0.3)
    return not aw.done()


def test_durable_answers_wait_for_the_disk(tmp_path, run):
    async def go():
        journal = GatedJournal(tmp_path / "journal")
        engine = Engine(
            EngineConfig(data_dir=tmp_path),
            journal,
            bindings=FileJournal(tmp_path / "bindings"),
        )
        await engine.start()
        journal.gate.set()  # queue definitions may go through
        app = web.Application()
        rest.setup(app, HttpContext(engine, HttpAcceptor(), StompOptions(Limits()), tmp_path))
        try:
            async with TestServer(app) as server, TestClient(server) as client:
                async with client.post("/queues/q/create", data=b"fast") as r:
                    assert r.status == 201  # not durable: no wait
                journal.gate.clear()
                held = journal.held
                posting = asyncio.ensure_future(
                    client.post("/queues/q/create", data=b"slow", params={"durable": "true"})
                )
                assert await _pending(posting), "201 before the write was on disk"
                assert journal.held == held + 1
                journal.gate.set()
                r = await asyncio.wait_for(posting, 5)
                assert r.status == 201
                r.release()

                async with client.post("/queues/q/pull-consumers", data={"autoAck": "false"}) as r:
                    nxt = r.headers["msg-acknowledge-next"]
                follow = client.session  # links are absolute URLs
                for body in (b"fast", b"slow"):
                    async with follow.post(nxt) as r:
                        assert await r.read() == body
                        ack = r.headers["msg-acknowledgement"]
                    journal.gate.clear()
                    acking = asyncio.ensure_future(follow.post(ack, data={"acknowledge": "true"}))
                    if body == b"slow":  # a durable message: its acknowledgement is a write
                        assert await _pending(acking), "acknowledged before it was on disk"
                    journal.gate.set()
                    r = await asyncio.wait_for(acking, 5)
                    assert r.status == 200
                    nxt = r.headers["msg-acknowledge-next"]
                    r.release()
        finally:
            journal.gate.set()
            await engine.stop()

    run(go())
