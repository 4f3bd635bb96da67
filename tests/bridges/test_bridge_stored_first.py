"""A bridge forwards a durable message only once it is on its own node's disk.

The queue hands a message to the bridge as soon as it is routed, while its journal batch (with
the duplicate id it came with) may still wait for the group commit.  Forwarded then, a
``kill -9`` can lose it here after the remote stored it; the previous hop, never confirmed,
resends it, this node takes it as new under a new message id, and the remote gets it twice
(the chain A -> B -> C with B killed mid-flow: 7 duplicates at C).  Here the journal holds
its writes until the test lets them through: nothing may cross the bridge before."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from test_core_bridge import Pair, until

from waystation.bridges.dial import Target
from waystation.core.engine import Engine, EngineConfig
from waystation.core.store.api import Op, Recovered, RecoveryReport
from waystation.gateway.stomp.server import stomp_server
from waystation.gateway.stomp.session import StompOptions
from waystation.wire.stomp import Limits


class HeldJournal:
    """A journal whose writes reach the disk only when the test says so."""

    def __init__(self) -> None:
        self.batches: list[Sequence[Op]] = []
        self.durable = 0  # batches on "disk"
        self.held = False
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []

    def open(self) -> Recovered:
        return Recovered({}, RecoveryReport())

    def write(self, ops: Sequence[Op], sync: bool) -> asyncio.Future[None] | None:
        self.batches.append(ops)
        if not self.held:
            self.durable = len(self.batches)
        if not sync:
            return None
        return self._wait_for(len(self.batches))

    async def flush(self) -> None:
        await self._wait_for(len(self.batches))

    def _wait_for(self, n: int) -> asyncio.Future[None]:
        fut = asyncio.get_running_loop().create_future()
        self._waiting.append((n, fut))
        self._settle()
        return fut

    def release(self) -> None:
        """Everything written so far is on disk, and so is every later write."""
        self.held = False
        self.durable = len(self.batches)
        self._settle()

    def _settle(self) -> None:
        for n, fut in self._waiting:
            if n <= self.durable and not fut.done():
                fut.set_result(None)
        self._waiting = [(n, f) for n, f in self._waiting if not f.done()]

    async def close(self) -> None:
        self.release()

    def stats(self) -> dict[str, int]:
        return {}


def test_a_message_crosses_only_once_it_is_stored_here(run) -> None:  # noqa: ANN001
    async def main() -> None:
        journal = HeldJournal()
        a = Engine(EngineConfig(node_name="site-a", remote_nodes={"site-b"}), journal)
        b = Engine(EngineConfig(node_name="site-b"))
        await a.start()
        await b.start()
        server = stomp_server(b, "127.0.0.1", 0, StompOptions(Limits()))
        await server.start()
        p = Pair(a, b, server)
        try:
            br = p.bridge([Target("127.0.0.1", p.port)])
            await br.start()
            await until(lambda: br.status()["state"] == "connected")
            journal.held = True
            early = p.send(3)
            late = p.send(2, durable="false")  # (a property, still a durable message)
            await asyncio.sleep(0.5)  # ample for an in-process hop
            assert p.received() == []  # not on site-a's disk: not forwarded
            assert br.status()["in_flight"] == 5
            assert journal.durable < len(journal.batches)
            journal.release()
            await until(lambda: len(p.received()) == 5)
            assert p.received() == [m.body for m in early + late]
            # a non-durable message has nothing to wait for
            m = a.make_message("site-b::orders", b"fast", {}, durable=False)
            a.send(m)
            await until(lambda: len(p.received()) == 6)
            assert p.received()[-1] == b"fast"
        finally:
            journal.release()
            for br in p.bridges:
                await br.stop()
            await server.stop()
            await a.stop()
            await b.stop()

    run(main())
