"""A fault-injecting HTTP reverse proxy for tests, run in the test's own event loop.

Every request to ``url + path`` goes to ``target + path``.  At random (seeded) it answers
502 before forwarding (the request is lost), forwards and then answers 504 (the answer is
lost), cuts the connection after forwarding, or delays the request.  Like a real proxy it
can give up on a slow answer (``timeout``: 504) and refuse large bodies (``max_body``: 413).
``stats`` counts what it did.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Mapping
from types import TracebackType

import aiohttp
from aiohttp import web

HOP_BY_HOP = frozenset(
    ("connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade")
)


def _forwardable(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}


class HttpFaults:
    def __init__(
        self,
        target: str,
        *,
        fail_before: float = 0.0,
        fail_after: float = 0.0,
        cut: float = 0.0,
        delay: float = 0.0,
        max_delay: float = 0.3,
        timeout: float | None = None,
        max_body: int | None = None,
        seed: int = 1,
    ) -> None:
        self.target = target.rstrip("/")
        self.fail_before, self.fail_after, self.cut = fail_before, fail_after, cut
        self.delay, self.max_delay = delay, max_delay
        self.timeout = timeout
        self.max_body = max_body
        self.rng = random.Random(seed)
        self.stats: Counter[str] = Counter()
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> HttpFaults:
        self._client = aiohttp.ClientSession(auto_decompress=False)
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._client is not None:
            await self._client.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert self._client is not None
        body = await request.read()
        chance = self.rng.random
        if self.max_body is not None and len(body) > self.max_body:
            self.stats["too_large"] += 1
            return web.Response(status=413, text=f"proxy: body over {self.max_body} bytes")
        if chance() < self.fail_before:
            self.stats["fail_before"] += 1
            return web.Response(status=502, text="proxy: injected failure before forwarding")
        if chance() < self.delay:
            self.stats["delay"] += 1
            await asyncio.sleep(chance() * self.max_delay)
        try:
            async with (
                asyncio.timeout(self.timeout),
                self._client.request(
                    request.method,
                    self.target + request.path_qs,
                    data=body if body else None,
                    headers=_forwardable(request.headers),
                ) as resp,
            ):
                data = await resp.read()
                status, headers = resp.status, _forwardable(resp.headers)
        except TimeoutError:
            self.stats["timeout"] += 1
            return web.Response(status=504, text="proxy: the server did not answer in time")
        if chance() < self.fail_after:
            self.stats["fail_after"] += 1
            return web.Response(status=504, text="proxy: injected loss of the answer")
        if chance() < self.cut and request.transport is not None:
            self.stats["cut"] += 1
            request.transport.abort()  # the client sees its connection reset
            return web.Response(status=500)
        self.stats["ok"] += 1
        return web.Response(status=status, body=data, headers=headers)


__all__ = ["HttpFaults"]
