"""REST push registration (POST .../push-consumers and .../push-subscriptions, an XML body)
fuzzed against a real node.

Bodies: valid registrations drawn by hypothesis (xmlgen.registrations, their targets moved
to a closed port on 127.0.0.1, which the fuzz node's push_allow admits), three in four
mutated element by element (mutate.py: flips, cuts, repeats, splices, grown text); XML
pieces put together any way; the hostile documents (entity expansion, external entities,
DTDs, in UTF-8 and UTF-16) and deep nesting.  Sent with the fuzz user's credentials, wrong
ones or none, as XML or another content type; one case in ten is a mangled raw HTTP request
instead.  A registration the node accepts is deleted again.  The node stays up, answers no
request with a 500, answers the bystander and a fresh registration (and its deletion) after
every batch, and frees what the fuzz took."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator
from random import Random

import aiohttp

from fuzz import xmlgen
from fuzz.campaign import check, fuzz, fuzz_seed
from fuzz.fuzzkit import (
    BATCH,
    PASSWORD,
    USER,
    Batch,
    Case,
    FuzzNode,
    Tally,
    budget,
    draw,
    pool,
    send_case,
)
from fuzz.mutate import cut, end_of, mutate

TARGET = b'href="http://127.0.0.1:9'  # nothing listens: pushes fail at once
AUTH = {"Authorization": aiohttp.encode_basic_auth(USER, PASSWORD)}
WRONG = {"Authorization": aiohttp.encode_basic_auth(USER, "wrong")}
DESTINATIONS = 4  # fz.queues0 ..., fz.topics0 ...: made before the fuzz
TIMEOUT = aiohttp.ClientTimeout(total=30)
HOSTILE = [xmlgen.LAUGHS, xmlgen.XXE, xmlgen.EXTERNAL_DTD, xmlgen.PARAMETER, xmlgen.PLAIN_DTD,
           xmlgen.XXE.decode().encode("utf-16"), b"<a>" * 5000 + b"</a>" * 5000]  # fmt: skip
_HREF = re.compile(rb'href="https?://[^/"]*')
_ELEMENTS = re.compile(rb"(?<=>)")


def _units(doc: bytes) -> list[bytes]:
    """A document cut after each ``>``: elements for mutate.py to flip, repeat, drop."""
    return [u for u in _ELEMENTS.split(doc) if u]


async def _register(
    http: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str], tally: Tally
) -> None:
    async with http.post(url, data=body, headers=headers) as r:
        tally.status(r.status)
        location = r.headers.get("Location") if r.status in (200, 201) else None
        await r.read()
    if location:
        async with http.delete(location, headers=AUTH) as r:
            tally.status(r.status)
            assert r.status == 204, f"a registration the node made could not be deleted: {r.status}"


def batches(seed: int, cases: int, tally: Tally, node: FuzzNode) -> Iterator[Batch]:
    rng = Random(seed)
    valid = [_HREF.sub(TARGET, r.to_xml()) for r in draw(xmlgen.registrations(), pool(cases), seed)]
    pieces = draw(xmlgen.xml_pieces, 50, seed)

    def job(rng: Random) -> Callable[[], Awaitable[None]]:
        kind, factory = rng.choice((("queues", "push-consumers"), ("topics", "push-subscriptions")))
        path = f"/{kind}/fz.{kind}{rng.randrange(DESTINATIONS)}/{factory}"
        roll = rng.random()
        if roll < 0.05:
            body = rng.choice(HOSTILE)
        elif roll < 0.15:
            body = "".join(rng.choices(pieces, k=rng.randrange(40))).encode(
                "utf-8", "surrogatepass"
            )
        else:
            body = rng.choice(valid)
            if rng.random() < 0.75:
                body = b"".join(mutate(_units(body), rng, None, [_units(v) for v in valid[:20]]))
        if rng.random() < 0.1:  # a mangled raw request
            units = [f"POST {path} HTTP/1.1\r\n".encode(),
                     f"Host: 127.0.0.1:{node.http_port}\r\n".encode(),
                     f"Authorization: {AUTH['Authorization']}\r\n".encode(),
                     b"Content-Type: application/xml\r\n",
                     f"Content-Length: {len(body)}\r\n\r\n".encode(), body]  # fmt: skip
            case = Case(cut(b"".join(mutate(units, rng)), rng), end_of(rng))
            return lambda: send_case(node.http_port, case, tally)
        headers = dict(rng.choices((AUTH, {}, WRONG), (18, 1, 1))[0])
        headers["Content-Type"] = rng.choices(
            ("application/xml", "text/plain", "application/json"), (18, 1, 1)
        )[0]

        async def run() -> None:
            tally.cases += 1
            async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
                await _register(http, f"{node.http_url}{path}", body, headers, tally)

        return run

    for _ in range(cases // BATCH + 1):
        yield [job(rng) for _ in range(BATCH)]


async def make_destinations(node: FuzzNode) -> None:
    """The queues and topics the registrations are for."""
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        for kind, tag in (("queues", "queue"), ("topics", "topic")):
            for i in range(DESTINATIONS):
                doc = f'<{tag} name="fz.{kind}{i}"/>'
                headers = {"Content-Type": "application/xml", **AUTH}
                async with http.post(f"{node.http_url}/{kind}", data=doc, headers=headers) as r:
                    assert r.status in (200, 201), (r.status, await r.text())


async def probe(node: FuzzNode) -> None:
    """A fresh client registers a push consumer (201) and deletes it (204)."""
    doc = b'<push-registration><link href="http://127.0.0.1:9/p"/></push-registration>'
    async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
        url = f"{node.http_url}/queues/fz.probe/push-consumers"
        headers = {"Content-Type": "application/xml", **AUTH}
        async with http.post(url, data=doc, headers=headers) as r:
            assert r.status == 201, (r.status, await r.text())
            location = r.headers["Location"]
        async with http.delete(location, headers=AUTH) as r:
            assert r.status == 204, r.status


@budget(default=600, long=20_000)
def test_rest_push_xml_node_survives_fuzz(tmp_path, run, cases: int) -> None:
    node = FuzzNode(tmp_path / "n").start()
    try:
        run(make_destinations(node))
        seed, tally = fuzz_seed(), Tally()
        work = batches(seed, cases, tally, node)
        report = run(fuzz(node, "rest push xml", seed, work, lambda: probe(node), tally), 3 * 3600)
        check(report, node)
    finally:
        node.stop()
