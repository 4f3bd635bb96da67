"""The STOMP session's state machine in process: frames in through ``data_received``, frames
out through a fake link, an engine without sockets.  Fast, and every transition visible."""

from __future__ import annotations

import asyncio

import waystation.gateway.stomp.session as stomp_session
from waystation.core.engine import Engine
from waystation.core.security import Permission, SecurityManager, User
from waystation.gateway.stomp.session import StompOptions, StompSession
from waystation.wire.stomp import Limits


class FakeLink:
    peer = "fake:1"

    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False
        self.paused = False

    def write(self, data: bytes) -> None:
        self.out += data

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def frames(self) -> list[tuple[str, dict[str, str], bytes]]:
        out = []
        for raw in bytes(self.out).split(b"\x00"):
            raw = raw.lstrip(b"\n")
            if not raw:
                continue
            head, _, body = raw.partition(b"\n\n")
            cmd, *lines = head.decode().split("\n")
            out.append((cmd, dict(ln.split(":", 1) for ln in lines), body))
        self.out.clear()
        return out


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def in_engine(run, test):
    """Run ``test(engine)`` on one loop with a started in-memory engine."""

    async def go():
        eng = Engine()
        await eng.start()
        try:
            await test(eng)
        finally:
            await eng.stop()

    run(go())


def session(engine: Engine) -> tuple[StompSession, FakeLink]:
    link = FakeLink()
    opts = StompOptions(Limits(), heartbeat_send_ms=0, heartbeat_receive_ms=0, connection_ttl=0)
    return StompSession(engine, link, opts), link


def frame(cmd: str, body: bytes = b"", **headers: str) -> bytes:
    head = "".join(f"{k.replace('_', '-')}:{v}\n" for k, v in headers.items())
    return f"{cmd}\n{head}\n".encode() + body + b"\x00"


def test_frames_before_connect_are_refused_and_the_link_closed(run):
    async def go(engine):
        s, link = session(engine)
        s.data_received(frame("SEND", b"x", destination="/queue/q"))
        [(cmd, h, _)] = link.frames()
        assert cmd == "ERROR" and "expected CONNECT" in h["message"] and link.closed
        assert not engine.sessions

    in_engine(run, go)


def test_connect_opens_a_core_session_and_disconnect_closes_it(run):
    async def go(engine):
        s, link = session(engine)
        s.data_received(frame("CONNECT", accept_version="1.2", host="/", client_id="cid"))
        [(cmd, h, _)] = link.frames()
        assert cmd == "CONNECTED" and h["version"] == "1.2"
        [core] = engine.sessions.values()
        assert core.protocol == "stomp" and core.client_id == "cid" and core.remote == "fake:1"
        s.data_received(frame("DISCONNECT", receipt="bye"))
        await settle()
        [(cmd, h, _)] = link.frames()
        assert cmd == "RECEIPT" and h["receipt-id"] == "bye" and link.closed
        assert not engine.sessions

    in_engine(run, go)


def test_send_subscribe_ack_and_plain_destination_echoed(run):
    async def go(engine):
        s, link = session(engine)
        s.data_received(frame("CONNECT", accept_version="1.2", host="/"))
        s.data_received(frame("SUBSCRIBE", id="1", destination="/queue/plain", ack="client"))
        s.data_received(frame("SEND", b"one", destination="plain", receipt="r1"))
        await settle()
        frames = link.frames()
        assert [f[0] for f in frames] == ["CONNECTED", "RECEIPT", "MESSAGE"]
        msg = frames[2]
        assert msg[2] == b"one" and msg[1]["subscription"] == "1"
        assert msg[1]["destination"] == "plain"  # as the SEND named it (STOMP 1.2)
        s.data_received(frame("ACK", id=msg[1]["ack"], receipt="a1"))
        await settle()
        assert [f[0] for f in link.frames()] == ["RECEIPT"]
        assert engine.queue("plain").depth == 0 and engine.queue("plain").in_flight == 0

    in_engine(run, go)


def test_transaction_commit_and_unknown_transaction(run):
    async def go(engine):
        s, link = session(engine)
        s.data_received(frame("CONNECT", accept_version="1.2", host="/"))
        s.data_received(frame("BEGIN", transaction="t1"))
        s.data_received(frame("SEND", b"x", destination="/queue/tq", transaction="t1"))
        assert engine.queue("tq") is None or engine.queue("tq").depth == 0
        s.data_received(frame("COMMIT", transaction="t1", receipt="c"))
        await settle()
        assert engine.queue("tq").depth == 1
        link.frames()
        s.data_received(frame("COMMIT", transaction="t1"))
        [(cmd, h, _)] = link.frames()
        assert cmd == "ERROR" and "unknown transaction 't1'" in h["message"]
        assert link.closed and not engine.sessions

    in_engine(run, go)


def test_wrong_password_is_refused_without_a_session(run):
    async def go(engine):
        engine.security = SecurityManager(
            enabled=True,
            users={"app": User("app", lambda p: p == "secret", frozenset({"rw"}))},
            permissions={"#": {Permission.SEND: frozenset({"rw"})}},
        )
        s, link = session(engine)
        s.data_received(frame("CONNECT", accept_version="1.2", host="/", login="app", passcode="x"))
        await settle()
        for _ in range(100):
            if link.closed:
                break
            await asyncio.sleep(0.01)
        frames = link.frames()
        assert frames and frames[-1][0] == "ERROR" and link.closed
        assert not engine.sessions

    in_engine(run, go)


def test_internal_errors_carry_no_internals(run, monkeypatch):
    async def go(engine):
        s, link = session(engine)
        s.data_received(frame("CONNECT", accept_version="1.2", host="/"))
        link.frames()

        def boom(*a: object, **k: object) -> None:
            raise RuntimeError("secret internal state at 0xdeadbeef")

        monkeypatch.setitem(stomp_session._HANDLERS, "SEND", boom)
        s.data_received(frame("SEND", b"x", destination="/queue/q"))
        [(cmd, h, body)] = link.frames()
        assert cmd == "ERROR" and h["message"] == "internal error"
        assert b"0xdeadbeef" not in body and b"RuntimeError" not in body

    in_engine(run, go)
