"""An AMQP 1.0 client (proton's engine, no reactor) wired to an in-process AmqpSession
through a fake link: real protocol bytes both ways, no sockets."""

from __future__ import annotations

import asyncio

from proton import Collector, Connection, Message, Transport

from waystation.core.engine import Engine
from waystation.gateway.amqp.session import AmqpOptions, AmqpSession


class FakeLink:
    peer = "fake:1"

    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False
        self.paused = False
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.out += data
        self.writes += 1

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


class Client:
    """A proton engine client talking to ``AmqpSession`` in process."""

    def __init__(
        self,
        engine: Engine,
        user: str | None = None,
        password: str | None = None,
        container: str = "client-1",
        mech: str | None = None,
        options: AmqpOptions | None = None,
        sasl: bool = True,
    ) -> None:
        self.link = FakeLink()
        self.server = AmqpSession(engine, self.link, options or AmqpOptions(idle_timeout=0))
        self.conn = Connection()
        self.events = Collector()
        self.conn.collect(self.events)
        self.conn.container = container
        self.transport = Transport()
        if sasl:
            s = self.transport.sasl()
            s.allow_insecure_mechs = True
            s.allowed_mechs(mech or ("PLAIN" if user else "ANONYMOUS"))
        if user is not None:
            self.conn.user = user
            self.conn.password = password or ""
        self.transport.bind(self.conn)
        self.ssn = self.conn.session()

    def open(self) -> None:
        self.conn.open()
        self.ssn.open()

    async def pump(self, rounds: int = 20) -> None:
        """Move bytes both ways until neither side has anything more to say."""
        for _ in range(rounds):
            moved = False
            t = self.transport
            n = t.pending()
            if n > 0:
                data = t.peek(n)
                t.pop(n)
                self.server.data_received(data)
                moved = True
            for _ in range(3):
                await asyncio.sleep(0)
            if self.link.out:
                data, self.link.out = bytes(self.link.out), bytearray()
                while data:
                    cap = t.capacity()
                    if cap <= 0:
                        break
                    t.push(data[:cap])
                    data = data[cap:]
                moved = True
            if self.link.closed and not self.link.out:
                t.close_tail()
            if not moved:
                await asyncio.sleep(0.001)
                if t.pending() <= 0 and not self.link.out:
                    return

    def sender(self, address: str | None, name: str = "s", presettled: bool = False, **kw):
        from proton import Link

        snd = self.ssn.sender(name)
        snd.target.address = address
        snd.source.address = name
        if presettled:
            snd.snd_settle_mode = Link.SND_SETTLED
        for k, v in kw.items():
            setattr(snd.target, k, v)
        snd.open()
        return snd

    def receiver(self, address: str | None, name: str = "r", presettled: bool = False):
        from proton import Link

        rcv = self.ssn.receiver(name)
        rcv.source.address = address
        rcv.target.address = name
        if presettled:
            rcv.snd_settle_mode = Link.SND_SETTLED
        rcv.open()
        return rcv

    def send(self, snd, msg: Message, tag: str = "t", settle: bool = False):
        dlv = snd.delivery(tag)
        snd.send(msg.encode())
        snd.advance()
        if settle:
            dlv.settle()
        return dlv

    def received(self, rcv) -> list[tuple[object, Message]]:
        """Every complete delivery waiting on ``rcv``: (delivery, message)."""
        out = []
        while True:
            dlv = rcv.current
            if dlv is None or dlv.partial or not dlv.readable:
                break
            data = rcv.recv(dlv.pending)
            rcv.advance()
            m = Message()
            m.decode(data)
            out.append((dlv, m))
        return out


def in_engine(run, test, **engine_kw):
    async def go():
        eng = Engine(**engine_kw)
        await eng.start()
        try:
            await test(eng)
        finally:
            await eng.stop()

    run(go())
