"""The HTTP port before its application exists (gateway/http/ops/front.py): probes answered
at the door, anything else handed to the application with the bytes already read, one
admission count across the hand-over, and the application built at start when REST has
stored work to resume."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from waystation.config.listeners import HttpAcceptor, StompAcceptor
from waystation.core.engine import Engine, EngineConfig
from waystation.gateway.http.context import HttpContext
from waystation.gateway.http.ops.front import FrontContext, HttpFront
from waystation.gateway.stomp import stomp_options

Front = Callable[[], Awaitable[HttpFront]]


@asynccontextmanager
async def front(
    data_dir: Path | None = None, host: str = "127.0.0.1", **http: object
) -> AsyncIterator[HttpFront]:
    """A started engine and front on a free port; both stopped after."""
    engine = Engine(EngineConfig(data_dir=data_dir)) if data_dir else Engine()
    await engine.start()
    cfg = HttpAcceptor(url="http://127.0.0.1:0", **http)  # type: ignore[arg-type]

    def context() -> HttpContext:
        return HttpContext(engine, cfg, stomp_options(StompAcceptor()), data_dir)

    f = HttpFront(FrontContext(engine, cfg, data_dir, None, context), host, 0)
    await f.start()
    try:
        yield f
    finally:
        await f.stop()
        await engine.stop()


async def exchange(port: int, *parts: bytes, pause: float = 0.0) -> bytes:
    """Send ``parts`` (``pause`` between them) and read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for part in parts:
        writer.write(part)
        await writer.drain()
        if pause:
            await asyncio.sleep(pause)
    data = await asyncio.wait_for(reader.read(), 20)
    writer.close()
    return data


def statuses(data: bytes) -> list[int]:
    """The status of each response in ``data`` (bodies here hold no status lines)."""
    return [int(m) for m in re.findall(rb"HTTP/1\.[01] (\d{3}) ", data)]


def test_a_probe_split_across_packets_is_answered_without_the_application(run) -> None:
    async def go() -> None:
        async with front() as f:
            port = f.bound_port()
            data = await exchange(
                port,
                b"GET /rea",
                b"dy?x=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
                pause=0.05,
            )
            assert statuses(data) == [200]
            assert json.loads(data.split(b"\r\n\r\n", 1)[1])["status"] == "ready"
            assert f.server is None  # no application was needed

    run(go())


def test_pipelined_probe_then_request_are_both_answered_in_order(run) -> None:
    async def go() -> None:
        async with front() as f:
            data = await exchange(
                f.bound_port(),
                b"GET /health HTTP/1.1\r\nHost: a\r\n\r\n"
                b"POST /ready HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"
                b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            )
            # the probe at the door; the POST (405: /ready is GET only) and /metrics by
            # the application, which got the bytes read before it existed
            assert statuses(data) == [200, 405, 200], data[:2000]
            assert b"waystation_event_loop_lag" in data
            assert f.server is not None

    run(go())


def test_concurrent_first_requests_share_one_build(run) -> None:
    async def go() -> None:
        async with front() as f:
            req = b"GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
            results = await asyncio.gather(*(exchange(f.bound_port(), req) for _ in range(5)))
            assert [statuses(r) for r in results] == [[200]] * 5

    run(go())


def test_one_admission_count_before_and_after_the_hand_over(run) -> None:
    async def go() -> None:
        async with front(max_connections=1) as f:
            port = f.bound_port()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                # held at the door: a second connection is refused
                refused = await exchange(port)
                assert statuses(refused) == [503] and b"max_connections" in refused
                # handed over (keep-alive): still the one place taken
                writer.write(b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n")
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
                assert head.startswith(b"HTTP/1.1 200")
                refused = await exchange(port)
                assert statuses(refused) == [503]
            finally:
                writer.close()
            for _ in range(100):  # the place comes free once the server sees the close
                data = await exchange(port, b"GET /health HTTP/1.0\r\n\r\n")
                if statuses(data) == [200]:
                    break
                await asyncio.sleep(0.05)
            assert statuses(data) == [200]

    run(go())


def test_idle_keep_alive_probe_connection_is_closed_at_stop(run) -> None:
    async def go() -> None:
        async with front() as f:
            reader, writer = await asyncio.open_connection("127.0.0.1", f.bound_port())
            writer.write(b"GET /ready HTTP/1.1\r\nHost: a\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert b"Connection: keep-alive" in head
            await f.stop()
            rest = await asyncio.wait_for(reader.read(), 10)  # the body, then EOF
            assert json.loads(rest)["status"] == "ready"
            writer.close()

    run(go())


def test_stored_rest_work_builds_the_application_at_start(run, tmp_path: Path) -> None:
    async def go() -> None:
        async with front(tmp_path) as f:
            assert f.server is None  # nothing stored: built on first use
        store = tmp_path / HttpAcceptor().rest.push_store_dir
        store.mkdir(parents=True)
        (store / "stale.xml").write_text("<push-registration/>")
        async with front(tmp_path) as f:
            assert f.server is not None  # push deliveries resume without a request

    run(go())


def test_the_port_opens_on_a_name_and_on_ipv6_as_on_ipv4(run) -> None:
    """A numeric address is bound without the loop's resolver; a name still resolves."""

    async def go() -> None:
        for host in ("localhost", "::1"):
            async with front(host=host) as f:
                reader, writer = await asyncio.open_connection(host, f.bound_port())
                writer.write(b"GET /health HTTP/1.0\r\n\r\n")
                data = await asyncio.wait_for(reader.read(), 10)
                writer.close()
                assert statuses(data) == [200], host

    run(go())
