"""A small asyncio STOMP client over any (reader, writer) pair, for tunnel tests."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

from waystation.client.tunnel import open_tunnel_connection
from waystation.wire.stomp import Frame, StompParser, encode_frame

# Short tunnel timings for tests: ``HTTP`` goes to NodeProcess(http=...).
RESPONSE_TIME = 1.0
SESSION_TIMEOUT = 2.0
HTTP = f"""
[acceptors.http.tunnel]
response_time = "{RESPONSE_TIME}s"
session_timeout = "{SESSION_TIMEOUT}s"
"""
CONNECT = encode_frame("CONNECT", {"accept-version": "1.2", "host": "localhost"})


class AsyncStomp:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.parser = StompParser()
        self.frames: asyncio.Queue[Frame | None] = asyncio.Queue()
        self.eof: BaseException | None = None  # why the stream ended (None: clean EOF)
        self.task = asyncio.ensure_future(self._read())

    @classmethod
    async def tunnel(cls, url: str, **kw: object) -> AsyncStomp:
        """Open a tunnel to ``url`` (keyword args go to open_tunnel_connection) and
        CONNECT as guest."""
        reader, writer = await open_tunnel_connection(url, **kw)  # type: ignore[arg-type]
        client = cls(reader, writer)
        await client.connect()
        return client

    @property
    def session_id(self) -> str:
        return str(self.writer.get_extra_info("tunnel_session"))

    async def _read(self) -> None:
        try:
            while data := await self.reader.read(1 << 16):
                for ev in self.parser.feed(data):
                    if isinstance(ev, Frame):
                        self._got(ev)
                for ev in self.parser.feed(b""):  # what was parsed behind a CONNECTED
                    if isinstance(ev, Frame):
                        self._got(ev)
        except Exception as e:
            self.eof = e
        self.frames.put_nowait(None)

    def _got(self, frame: Frame) -> None:
        if frame.command == "CONNECTED":
            self.parser.version = frame.headers.get("version", "1.0")
        self.frames.put_nowait(frame)

    def frame(self, command: str, body: bytes = b"", **headers: str) -> None:
        self.writer.write(encode_frame(command, headers, body))

    async def connect(self) -> Frame:
        headers = {"accept-version": "1.2", "host": "localhost", "login": "guest"}
        self.writer.write(encode_frame("CONNECT", {**headers, "passcode": "guest"}))
        f = await self.next()
        assert f.command == "CONNECTED", f
        return f

    async def next(self, timeout: float = 10.0) -> Frame:
        f = await asyncio.wait_for(self.frames.get(), timeout)
        assert f is not None, f"stream ended: {self.eof!r}"
        return f

    async def receipt(self, rid: str, timeout: float = 10.0) -> None:
        f = await self.next(timeout)
        assert f.command == "RECEIPT" and f.headers["receipt-id"] == rid, f

    async def ended(self, timeout: float = 10.0) -> list[Frame]:
        """The frames left before the stream ends."""
        out = []
        while (f := await asyncio.wait_for(self.frames.get(), timeout)) is not None:
            out.append(f)
        return out

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.wait_closed(), 5.0)
        self.task.cancel()


def stomp_bytes(command: str, body: bytes = b"", **headers: str) -> bytes:
    return encode_frame(command, headers, body)


class RawTunnel:
    """The tunnel's HTTP requests one by one, for tests of the protocol itself."""

    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self.http = http
        self.base = base
        self.sid = ""

    async def open(self, protocol: str = "stomp") -> dict[str, object]:
        async with self.http.post(f"{self.base}/open", params={"protocol": protocol}) as r:
            assert r.status == 201, await r.text()
            info: dict[str, object] = await r.json()
        self.sid = str(info["session"])
        # the session's secret goes with every later request of this client (this kit's
        # helpers and any other request made through the same aiohttp session)
        self.http.headers["X-Tunnel-Token"] = str(info["token"])
        return info

    async def up(self, offset: int, data: bytes) -> tuple[int, dict[str, str], str]:
        async with self.http.post(
            f"{self.base}/{self.sid}/up", params={"offset": str(offset)}, data=data
        ) as r:
            return r.status, dict(r.headers), await r.text()

    async def down(self, ack: int) -> tuple[int, dict[str, str], bytes]:
        async with self.http.get(f"{self.base}/{self.sid}/down", params={"ack": str(ack)}) as r:
            return r.status, dict(r.headers), await r.read()


__all__ = [
    "CONNECT",
    "HTTP",
    "RESPONSE_TIME",
    "SESSION_TIMEOUT",
    "AsyncStomp",
    "RawTunnel",
    "stomp_bytes",
]
