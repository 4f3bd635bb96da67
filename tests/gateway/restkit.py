"""Helpers for REST tests: link reading, a producer and consumer walk, a webhook sink, push
registration, raw requests (bytes no HTTP client would send)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from nodekit import free_port

# Push targets in the tests listen on 127.0.0.1, which a node refuses unless it is listed.
PUSH_LOOPBACK = 'push_allow = ["127.0.0.0/8", "::1/128"]'
HTTP_PUSH_LOOPBACK = f"[acceptors.http.rest]\n{PUSH_LOOPBACK}\n"


def link(resp: aiohttp.ClientResponse, rel: str) -> str:
    """A link by name, from a ``msg-{rel}`` header or a ``Link`` header's ``rel``."""
    v = resp.headers.get(f"msg-{rel}")
    if v is not None:
        return v
    hit = resp.links.get(rel)
    if hit is None:
        raise AssertionError(f"no {rel} link in {dict(resp.headers)}")
    return str(hit["url"])


async def discover(s: aiohttp.ClientSession, url: str) -> dict[str, str]:
    """HEAD a queue or topic: its msg-* links by name (without the msg- prefix)."""
    async with s.head(url) as r:
        assert r.status == 200, (r.status, await r.text())
        out = {k[4:]: v for k, v in r.headers.items() if k.lower().startswith("msg-")}
        for rel, info in r.links.items():
            out[str(rel)] = str(info["url"])
        return out


async def post(s: aiohttp.ClientSession, url: str, body: bytes | str = b"", **kw: object) -> str:
    """POST a message; returns its msg-create-next."""
    async with s.post(url, data=body, **kw) as r:  # type: ignore[arg-type]
        assert r.status == 201, (r.status, await r.text())
        return link(r, "create-next")


@dataclass
class Got:
    status: int
    body: bytes
    headers: dict[str, str]
    next: str | None


async def consume(s: aiohttp.ClientSession, url: str, wait: float | None = None) -> Got:
    """POST a consume-next (or acknowledge-next) URL."""
    headers = {"Accept-Wait": str(wait)} if wait is not None else {}
    async with s.post(url, headers=headers) as r:
        body = await r.read()
        nxt = r.headers.get("msg-consume-next") or r.headers.get("msg-acknowledge-next")
        return Got(r.status, body, dict(r.headers), nxt)


@dataclass
class Hit:
    method: str
    path: str
    headers: CIMultiDict[str]
    body: bytes
    at: float


@dataclass
class Sink:
    """A webhook endpoint: records each request, answers from ``plan`` then ``default``."""

    port: int = field(default_factory=free_port)
    plan: list[int] = field(default_factory=list)
    default: int = 200
    hits: list[Hit] = field(default_factory=list)
    runner: web.AppRunner | None = None
    event: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.hits.append(
            Hit(
                request.method,
                request.path_qs,
                CIMultiDict(request.headers),
                body,
                time.monotonic(),
            )
        )
        self.event.set()
        status = self.plan.pop(0) if self.plan else self.default
        return web.Response(status=status, text="sink")

    async def start(self) -> Sink:
        self.event = asyncio.Event()  # of this loop (a test may start the sink again later)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port, reuse_address=True).start()
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def wait_hits(self, n: int, timeout: float = 10.0) -> list[Hit]:
        end = time.monotonic() + timeout
        while len(self.hits) < n:
            left = end - time.monotonic()
            assert left > 0, f"got {len(self.hits)} of {n} pushes"
            self.event.clear()
            try:
                await asyncio.wait_for(self.event.wait(), left)
            except TimeoutError:
                pass
        return self.hits


def registration(href: str, *, root: str = "push-registration", **opts: str) -> str:
    """A push registration document; ``opts`` are extra elements, e.g. maxRetries="3"."""
    link_attrs = f'href="{href}"'
    for attr in ("method", "rel", "type"):
        if attr in opts:
            link_attrs += f' {attr}="{opts.pop(attr)}"'
    extra = "".join(f"<{k}>{v}</{k}>" for k, v in opts.items())
    return f"<{root}><link {link_attrs}/>{extra}</{root}>"


async def drain(s: aiohttp.ClientSession, destination: str) -> list[bytes]:
    """Every message waiting on a queue, taken by a fresh auto-ack consumer (then deleted)."""
    async with s.post(f"{destination}/pull-consumers") as r:
        assert r.status == 201, (r.status, await r.text())
        nxt, consumer = r.headers["msg-consume-next"], r.headers["Location"]
    out: list[bytes] = []
    while True:
        got = await consume(s, nxt)
        if got.status == 503:
            break
        assert got.status == 200, (got.status, got.body)
        out.append(got.body)
        assert got.next is not None
        nxt = got.next
    async with s.delete(consumer) as r:
        assert r.status == 204
    return out


async def register(
    s: aiohttp.ClientSession, factory: str, doc: str | bytes, status: int = 201
) -> str:
    """POST a push registration document; returns its Location."""
    async with s.post(factory, data=doc, headers={"Content-Type": "application/xml"}) as r:
        assert r.status == status, (r.status, await r.text())
        return r.headers["Location"]


async def raw_request(port: int, head: bytes, body: bytes = b"") -> tuple[int, str]:
    """Send one request whose head is given as bytes (e.g. a header that is not UTF-8);
    -> (status, body text)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            head.rstrip(b"\r\n")
            + f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2].decode(errors="replace")
