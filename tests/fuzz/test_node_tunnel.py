"""The HTTP tunnel (wire/tunnel.py's framing, gateway/http/tunnel) fuzzed through its HTTP
endpoints on a real node.

Each case opens a session (mostly for STOMP or MQTT, sometimes for a protocol that is not
one), then sends a stream from stompgen or mqttgen, half of them mutated, in chunks: mostly
at the right offsets, sometimes replayed, past a hole, or with offsets that are not numbers;
with the session's token, a wrong one or none; polls downstream acknowledging what arrived,
more, or garbage; and one in four also sends a mangled raw HTTP request (mutate.py over its
request line, headers and body) for its session.  Then it deletes the session, or abandons
it to the session timeout.  Some cases are raw mangled opens only.  The node stays up,
answers no request with a 500, answers the bystander and a fresh tunnel client's login
after every batch, and frees what the fuzz took."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from random import Random

import aiohttp

from fuzz import mqttgen, stompgen
from fuzz.campaign import check, fuzz, fuzz_seed
from fuzz.fuzzkit import BATCH, Batch, Case, FuzzNode, Tally, budget, pool, send_case
from fuzz.mutate import HUGE, cut, end_of, mutate
from waystation.client.tunnel import open_tunnel_connection
from waystation.wire.mqtt import MQTT_5, MQTT_311
from waystation.wire.tunnel import H_RECEIVED, H_TOKEN

PATH = "/tunnel"
TIMEOUT = aiohttp.ClientTimeout(total=30)  # a request the node never answers fails the case
BAD_PROTOCOLS = ["", "x" * 300, "stomp\0", "%ff", "STOMP", "../stomp", "amqp"]
BAD_OFFSETS = ["-1", "abc", "9" * 25, "", " 1", "1e3", "0x10", "١"]


def _offset(rng: Random, sent: int) -> str:
    roll = rng.random()
    if roll < 0.8:
        return str(sent)
    if roll < 0.88:
        return str(rng.randrange(sent + 1))  # a replay
    if roll < 0.94:
        return str(sent + rng.choice(HUGE[1:]))  # a hole
    return rng.choice(BAD_OFFSETS)


def _token(rng: Random, token: str) -> dict[str, str]:
    roll = rng.random()
    if roll < 0.9:
        return {H_TOKEN: token}
    if roll < 0.95:
        return {}
    return {H_TOKEN: token[::-1]}


def _raw_up(sid: str, token: str, offset: str, body: bytes, port: int) -> list[bytes]:
    """A valid upstream POST as raw units: request line, each header, blank line, body."""
    return [
        f"POST {PATH}/{sid}/up?offset={offset} HTTP/1.1\r\n".encode(),
        f"Host: 127.0.0.1:{port}\r\n".encode(),
        f"{H_TOKEN}: {token}\r\n".encode(),
        b"Content-Type: application/octet-stream\r\n",
        f"Content-Length: {len(body)}\r\n".encode(),
        b"\r\n",
        body,
    ]


async def _session_case(
    http: aiohttp.ClientSession,
    base: str,
    port: int,
    rng: Random,
    protocol: str,
    stream: list[bytes],
    tally: Tally,
) -> None:
    async with http.post(f"{base}/open", params={"protocol": protocol}) as r:
        tally.status(r.status)
        if r.status != 201:
            return
        info = await r.json()
    sid, token = str(info["session"]), str(info["token"])
    sent = got = 0
    for chunk in stream:
        async with http.post(
            f"{base}/{sid}/up", params={"offset": _offset(rng, sent)}, data=chunk,
            headers=_token(rng, token),
        ) as r:  # fmt: skip
            tally.status(r.status)
            if r.status == 200:
                sent = int(r.headers[H_RECEIVED])
        if rng.random() < 0.4:
            ack = str(got) if rng.random() < 0.8 else _offset(rng, got + 1)
            async with http.get(
                f"{base}/{sid}/down", params={"ack": ack}, headers=_token(rng, token)
            ) as r:
                tally.status(r.status)
                got += len(await r.read()) if r.status == 200 else 0
    if rng.random() < 0.25:
        units = _raw_up(sid, token, str(sent), b"".join(stream)[:4096], port)
        case = Case(cut(b"".join(mutate(units, rng)), rng), end_of(rng))
        await send_case(port, case, tally, count=False)
    if rng.random() < 0.75:
        async with http.delete(f"{base}/{sid}", headers=_token(rng, token)) as r:
            tally.status(r.status)


def batches(seed: int, cases: int, tally: Tally, node: FuzzNode) -> Iterator[Batch]:
    rng = Random(seed)
    n = pool(cases)
    streams = {
        "stomp": stompgen.sessions(rng, n, seed),
        "mqtt": mqttgen.sessions(MQTT_311, rng, n // 2, seed)
        + mqttgen.sessions(MQTT_5, rng, n // 2, seed),
    }
    base = f"{node.http_url}{PATH}"

    def job(rng: Random) -> Callable[[], Awaitable[None]]:
        if rng.random() < 0.1:  # a mangled open on its own
            units = [f"POST {PATH}/open?protocol=stomp HTTP/1.1\r\n".encode(),
                     f"Host: 127.0.0.1:{node.http_port}\r\n".encode(), b"Content-Length: 0\r\n",
                     b"\r\n"]  # fmt: skip
            case = Case(cut(b"".join(mutate(units, rng)), rng), end_of(rng))
            return lambda: send_case(node.http_port, case, tally)
        protocol = rng.choice(("stomp", "mqtt"))
        stream = rng.choice(streams[protocol])
        if rng.random() < 0.5:
            relength = stompgen.relength if protocol == "stomp" else mqttgen.relength
            stream = mutate(stream, rng, relength, streams[protocol])
        if rng.random() < 0.05:
            protocol = rng.choice(BAD_PROTOCOLS)
        chunks = cut(b"".join(stream), rng, 3)
        own = Random(rng.random())

        async def run() -> None:
            tally.cases += 1
            async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
                await _session_case(http, base, node.http_port, own, protocol, chunks, tally)

        return run

    for _ in range(cases // BATCH + 1):
        yield [job(rng) for _ in range(BATCH)]


async def probe(node: FuzzNode) -> None:
    """A fresh tunnel client (waystation.client.tunnel): open, STOMP login, receipt."""
    await stompgen.round_trip(*await open_tunnel_connection(f"{node.http_url}{PATH}"))


@budget(default=400, long=10_000)
def test_tunnel_node_survives_fuzz(tmp_path, run, cases: int) -> None:
    node = FuzzNode(tmp_path / "n").start()
    try:
        seed, tally = fuzz_seed(), Tally()
        work = batches(seed, cases, tally, node)
        report = run(fuzz(node, "tunnel", seed, work, lambda: probe(node), tally), 3 * 3600)
        check(report, node)
    finally:
        node.stop()
