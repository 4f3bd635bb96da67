"""kill -9 over STOMP: every receipted durable message survives, exactly once, and nothing
that was never sent appears."""

from __future__ import annotations

import asyncio
import random

import pytest
from nodekit import NodeProcess

CYCLES = 5


async def producer(
    port: int, name: str, sent: set[str], receipted: set[str], stop: asyncio.Event, window: int = 32
) -> None:
    """Send durable messages with a receipt each, ``window`` outstanding, until the
    connection dies or ``stop`` is set."""
    seq = 0
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return
    writer.write(b"CONNECT\naccept-version:1.2\nhost:x\nheart-beat:0,0\n\n\x00")
    pending: dict[str, str] = {}
    buf = b""
    outstanding = asyncio.Semaphore(window)

    async def read_loop() -> None:
        nonlocal buf
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    return
                on_data(chunk)
        except (ConnectionError, OSError):
            return
        finally:
            for _ in range(window + 1):  # wake the sender: the connection is gone
                outstanding.release()

    def on_data(chunk: bytes) -> None:
        nonlocal buf
        buf += chunk
        while b"\x00" in buf:
            frame, buf = buf.split(b"\x00", 1)
            frame = frame.lstrip(b"\r\n")
            if frame.startswith(b"RECEIPT"):
                rid = frame.split(b"receipt-id:", 1)[1].split(b"\n", 1)[0].decode()
                body = pending.pop(rid, None)
                if body is not None:
                    receipted.add(body)
                    outstanding.release()

    rt = asyncio.ensure_future(read_loop())
    try:
        while not stop.is_set() and not rt.done():
            await outstanding.acquire()
            if rt.done():
                break
            seq += 1
            body = f"{name}-{seq}"
            sent.add(body)
            pending[str(seq)] = body
            writer.write(
                f"SEND\ndestination:/queue/crash\npersistent:true\nreceipt:{seq}\ncontent-length:{len(body)}\n\n{body}".encode()
                + b"\x00"
            )
            if seq % 8 == 0:
                await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        rt.cancel()
        writer.close()


async def drain_all(port: int, expect_at_least: int) -> list[str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00SUBSCRIBE\nid:0\ndestination:/queue/crash\nack:auto\n\n\x00"
    )
    got: list[str] = []
    buf = b""
    while True:
        try:
            chunk = await asyncio.wait_for(
                reader.read(65536), 3 if len(got) >= expect_at_least else 20
            )
        except TimeoutError:
            break
        if not chunk:
            break
        buf += chunk
        while b"\x00" in buf:
            frame, buf = buf.split(b"\x00", 1)
            frame = frame.lstrip(b"\r\n")
            if frame.startswith(b"MESSAGE"):
                got.append(frame.split(b"\n\n", 1)[1].decode())
    writer.close()
    return got


@pytest.mark.timeout(600)
def test_kill9_loses_no_receipted_message_and_invents_none(tmp_path):
    node = NodeProcess(tmp_path / "node").start()
    sent: set[str] = set()
    receipted: set[str] = set()
    rng = random.Random(7)

    async def cycle(i: int) -> None:
        stop = asyncio.Event()
        tasks = [
            asyncio.ensure_future(producer(node.stomp_port, f"c{i}p{k}", sent, receipted, stop))
            for k in range(4)
        ]
        await asyncio.sleep(rng.uniform(0.4, 1.5))
        node.kill9()  # mid-stream: some sends are on disk without a receipt, some not at all
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)

    try:
        for i in range(CYCLES):
            asyncio.run(cycle(i))
            node.start()
        assert len(receipted) > 500, "the producers barely ran"
        got = asyncio.run(drain_all(node.stomp_port, len(receipted)))
    finally:
        node.stop()
    missing = receipted - set(got)
    invented = set(got) - sent
    dups = len(got) - len(set(got))
    assert not missing, f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:5]}"
    assert not invented, f"messages that were never sent: {sorted(invented)[:5]}"
    assert dups == 0, f"{dups} duplicates"
    # per producer connection, messages come out in send order
    last: dict[str, int] = {}
    for body in got:
        p, seq = body.rsplit("-", 1)
        assert int(seq) > last.get(p, 0), f"out of order: {body}"
        last[p] = int(seq)
