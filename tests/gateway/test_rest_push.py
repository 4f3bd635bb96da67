"""Push registrations (webhooks): delivery, retries, disableOnFailure, dead letters,
templates, REST-to-REST forwarding, and durable registrations across a restart."""

from __future__ import annotations

import asyncio
import base64
import time

import aiohttp
import pytest
from nodekit import NodeProcess, free_port
from restkit import HTTP_PUSH_LOOPBACK, Sink, consume, drain, post, registration
from stompkit import unique

CONFIG = """
[address_settings."dl.#"]
dead_letter_address = "dead.letters"
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(
        tmp_path_factory.mktemp("rest-push"), extra_config=CONFIG, http=HTTP_PUSH_LOOPBACK
    ).start()
    yield n
    n.stop()


async def _register(s: aiohttp.ClientSession, factory: str, doc: str) -> str:
    async with s.post(factory, data=doc, headers={"Content-Type": "application/xml"}) as r:
        assert r.status == 201, (r.status, await r.text())
        return r.headers["Location"]


async def _quiet(sink: Sink, n: int, seconds: float) -> None:
    await asyncio.sleep(seconds)
    assert len(sink.hits) == n, [h.body for h in sink.hits]


def test_push_sends_body_type_properties_credentials_and_headers(node, run):
    q = unique()

    async def go():
        sink = await Sink().start()
        base = f"{node.http_url}/queues/{q}"
        doc = registration(
            f"{sink.url}/hook",
            method="PUT",
            type="application/json",
            authentication="<basic-auth><username>hook</username><password>s3cret</password></basic-auth>",
        ).replace(
            "</push-registration>",
            '<header name="X-Api-Token">tok-123</header></push-registration>',
        )
        try:
            async with aiohttp.ClientSession() as s:
                loc = await _register(s, f"{base}/push-consumers", doc)
                assert loc.startswith(f"{base}/push-consumers/")
                await post(
                    s,
                    f"{base}/create",
                    b"plain",
                    headers={"Content-Type": "text/plain", "X-Order": "7"},
                )
                await post(
                    s, f"{base}/create", b'{"json": true}', skip_auto_headers=["Content-Type"]
                )
                hits = await sink.wait_hits(2)
                first, second = hits
                assert (first.method, first.path, first.body) == ("PUT", "/hook", b"plain")
                assert first.headers["Content-Type"] == "text/plain"
                assert first.headers["X-Order"] == "7"
                assert first.headers["X-Api-Token"] == "tok-123"
                creds = base64.b64encode(b"hook:s3cret").decode()
                assert first.headers["Authorization"] == f"Basic {creds}"
                assert second.headers["Content-Type"] == "application/json"  # link@type
                async with s.get(loc) as r:
                    assert r.status == 200 and r.content_type == "application/xml"
                    xml = await r.text()
                assert "<enabled>true</enabled>" in xml and "s3cret" not in xml
                assert f'href="{sink.url}/hook"' in xml
                async with s.delete(loc) as r:
                    assert r.status == 204
                async with s.get(loc) as r:
                    assert r.status == 404
                await post(s, f"{base}/create", b"after delete")
                await _quiet(sink, 2, 0.5)
                assert await drain(s, base) == [b"after delete"]
        finally:
            await sink.stop()

    run(go())


def test_server_errors_are_retried_until_the_webhook_succeeds(node, run):
    q = unique()

    async def go():
        sink = await Sink(plan=[500, 503]).start()
        base = f"{node.http_url}/queues/{q}"
        try:
            async with aiohttp.ClientSession() as s:
                doc = registration(f"{sink.url}/in", maxRetries="5", retryWaitMillis="150")
                await _register(s, f"{base}/push-consumers", doc)
                await post(s, f"{base}/create", b"eventually")
                hits = await sink.wait_hits(3)
                assert [h.body for h in hits] == [b"eventually"] * 3
                assert all(b.at - a.at >= 0.13 for a, b in zip(hits, hits[1:], strict=False))
                await _quiet(sink, 3, 0.4)
                assert await drain(s, base) == []  # acknowledged after the 200
        finally:
            await sink.stop()

    run(go())


def test_connection_refused_then_the_webhook_comes_up(node, run):
    q = unique()
    port = free_port()

    async def go():
        base = f"{node.http_url}/queues/{q}"
        async with aiohttp.ClientSession() as s:
            doc = registration(
                f"http://127.0.0.1:{port}/late", maxRetries="100", retryWaitMillis="100"
            )
            await _register(s, f"{base}/push-consumers", doc)
            await post(s, f"{base}/create", b"waited for you")
            await asyncio.sleep(0.6)  # a few refused connections
            sink = await Sink(port=port).start()
            try:
                hits = await sink.wait_hits(1)
                assert hits[0].body == b"waited for you" and hits[0].path == "/late"
            finally:
                await sink.stop()

    run(go())


def test_disable_on_failure_after_exactly_max_retries(node, run):
    q = unique()

    async def go():
        sink = await Sink(default=503).start()
        base = f"{node.http_url}/queues/{q}"
        try:
            async with aiohttp.ClientSession() as s:
                doc = registration(
                    f"{sink.url}/x", maxRetries="3", retryWaitMillis="200", disableOnFailure="true"
                )
                loc = await _register(s, f"{base}/push-consumers", doc)
                await post(s, f"{base}/create", b"undeliverable")
                hits = await sink.wait_hits(3)
                await _quiet(sink, 3, 0.8)
                gaps = [b.at - a.at for a, b in zip(hits, hits[1:], strict=False)]
                assert all(0.18 <= g < 1.5 for g in gaps), gaps
                async with s.get(loc) as r:
                    assert "<enabled>false</enabled>" in await r.text()
                # the message was given back, not lost
                assert await drain(s, base) == [b"undeliverable"]
        finally:
            await sink.stop()

    run(go())


def test_without_disable_on_failure_it_keeps_retrying(node, run):
    q = unique()

    async def go():
        sink = await Sink(default=502).start()
        base = f"{node.http_url}/queues/{q}"
        try:
            async with aiohttp.ClientSession() as s:
                doc = registration(f"{sink.url}/x", maxRetries="2", retryWaitMillis="100")
                loc = await _register(s, f"{base}/push-consumers", doc)
                await post(s, f"{base}/create", b"stubborn")
                await sink.wait_hits(5)  # more than maxRetries: new rounds
                sink.default = 200
                n = len(sink.hits)
                await sink.wait_hits(n + 1)
                await asyncio.sleep(0.3)
                assert await drain(s, base) == []
                async with s.get(loc) as r:
                    assert "<enabled>true</enabled>" in await r.text()
        finally:
            await sink.stop()

    run(go())


def test_a_refused_message_is_dead_lettered_and_pushing_goes_on(node, run):
    q = f"dl.{unique()}"

    async def go():
        sink = await Sink(plan=[400]).start()
        base = f"{node.http_url}/queues/{q}"
        try:
            async with aiohttp.ClientSession() as s:
                loc = await _register(s, f"{base}/push-consumers", registration(f"{sink.url}/h"))
                await post(s, f"{base}/create", b"rejected")
                await sink.wait_hits(1)
                await post(s, f"{base}/create", b"accepted")
                hits = await sink.wait_hits(2)
                assert [h.body for h in hits] == [b"rejected", b"accepted"]
                async with s.post(f"{node.http_url}/queues/dead.letters/pull-consumers") as r:
                    nxt = r.headers["msg-consume-next"]
                got = await consume(s, nxt, wait=2)
                assert got.body == b"rejected"
                assert got.headers["_WS_DLQ_REASON"] == "remote-rejected"
                assert "400" in got.headers["_WS_DLQ_DETAIL"]
                assert got.headers["_WS_ORIG_ADDRESS"] == q
                async with s.get(loc) as r:
                    assert "<enabled>true</enabled>" in await r.text()
        finally:
            await sink.stop()

    run(go())


def test_template_fills_a_stable_id_per_message(node, run):
    q = unique()

    async def go():
        sink = await Sink(plan=[500]).start()
        base = f"{node.http_url}/queues/{q}"
        try:
            async with aiohttp.ClientSession() as s:
                doc = registration(
                    f"{sink.url}/things/{{id}}/messages", rel="template", method="PUT",
                    retryWaitMillis="50",
                )  # fmt: skip
                await _register(s, f"{base}/push-consumers", doc)
                await post(s, f"{base}/create", b"a")
                await post(s, f"{base}/create", b"b")
                hits = await sink.wait_hits(3)
                paths = [h.path for h in hits]
                assert paths[0] == paths[1] != paths[2]  # the retry kept its id
                assert all(p.startswith("/things/") and p.endswith("/messages") for p in paths)
                assert [h.method for h in hits] == ["PUT"] * 3
                bad = registration(f"{sink.url}/no-parameter", rel="template")
                async with s.post(f"{base}/push-consumers", data=bad) as r:
                    assert r.status == 400
                    assert "exactly one {...} parameter" in await r.text()
        finally:
            await sink.stop()

    run(go())


def test_bad_registrations_get_400(node, run):
    base = f"{node.http_url}/queues/{unique()}/push-consumers"
    cases = [
        ("<push-registration>", "malformed push registration XML"),
        ("<push-registration/>", '<link href="..."/> is required'),
        ('<push-registration><link href="ftp://x/y"/></push-registration>', "absolute http(s) URL"),
        (
            registration("http://127.0.0.1:1/x", maxRetries="many"),
            "<maxRetries> must be an integer",
        ),
        (registration("http://127.0.0.1:1/x", method="BREW"), "link method 'BREW'"),
        (
            registration("http://127.0.0.1:1/x", durable="perhaps"),
            "<durable> must be true or false",
        ),
        (
            registration("http://127.0.0.1:1/x", authentication="<digest-auth/>"),
            "digest-auth is not supported",
        ),
        (registration("http://127.0.0.1:1/x", selector="a = = b"), "invalid selector"),
        (
            registration("http://127.0.0.1:1/x", root="push-topic-registration"),
            "expected a <push-registration>",
        ),
    ]

    async def go():
        async with aiohttp.ClientSession() as s:
            for doc, why in cases:
                async with s.post(base, data=doc) as r:
                    assert r.status == 400, doc
                    assert why in await r.text(), (doc, await r.text())

    run(go())


def test_topic_push_subscriptions(node, run):
    t = unique("t")

    async def go():
        sink = await Sink().start()
        base = f"{node.http_url}/topics/{t}"
        try:
            async with aiohttp.ClientSession() as s:
                doc = registration(f"{sink.url}/a", root="push-topic-registration")
                loc = await _register(s, f"{base}/push-subscriptions", doc)
                assert loc.startswith(f"{base}/push-subscriptions/")
                doc = registration(
                    f"{sink.url}/b", root="push-topic-registration", selector="http_kind = 'b'"
                )
                await _register(s, f"{base}/push-subscriptions", doc)
                await post(s, f"{base}/create", b"to all", headers={"kind": "a"})
                await post(s, f"{base}/create", b"to b too", headers={"kind": "b"})
                hits = await sink.wait_hits(3)
                got = sorted((h.path, h.body) for h in hits)
                assert got == [("/a", b"to all"), ("/a", b"to b too"), ("/b", b"to b too")]
                async with s.delete(loc) as r:
                    assert r.status == 204
                await post(s, f"{base}/create", b"only b", headers={"kind": "b"})
                await sink.wait_hits(4)
                await _quiet(sink, 4, 0.3)
                assert sink.hits[3].path == "/b"
        finally:
            await sink.stop()

    run(go())


def test_durable_registrations_survive_a_restart(tmp_path, run):
    node = NodeProcess(tmp_path, http=HTTP_PUSH_LOOPBACK).start()
    q, t = unique(), unique("t")
    sink = Sink()
    locs: dict[str, str] = {}

    async def register():
        await sink.start()
        async with aiohttp.ClientSession() as s:
            qbase, tbase = f"{node.http_url}/queues/{q}", f"{node.http_url}/topics/{t}"
            locs["q"] = await _register(
                s, f"{qbase}/push-consumers", registration(f"{sink.url}/q", durable="true")
            )
            locs["t"] = await _register(
                s, f"{tbase}/push-subscriptions",
                registration(f"{sink.url}/t", root="push-topic-registration", durable="true"),
            )  # fmt: skip
            locs["tmp"] = await _register(
                s, f"{qbase}/push-consumers", registration(f"{sink.url}/tmp")
            )
            await post(s, f"{qbase}/create", b"before")
            await sink.wait_hits(1)  # /q and /tmp share the queue: one of them got it
        await sink.stop()

    async def after_restart():
        async with aiohttp.ClientSession() as s:
            await post(
                s,
                f"{node.http_url}/topics/{t}/create",
                b"published while the hook was down",
                params={"durable": "true"},
            )
            await post(
                s,
                f"{node.http_url}/queues/{q}/create",
                b"queued while the hook was down",
                params={"durable": "true"},
            )
            await sink.start()
            hits = await sink.wait_hits(2)
            assert sorted((h.path, h.body) for h in hits) == [
                ("/q", b"queued while the hook was down"),
                ("/t", b"published while the hook was down"),
            ]
            async with s.get(locs["tmp"]) as r:
                assert r.status == 404  # not durable: gone with the restart
            for key in ("q", "t"):
                async with s.delete(locs[key]) as r:
                    assert r.status == 204
            await sink.stop()

    try:
        run(register())
        store = tmp_path / "data" / "rest-push"
        files = sorted(p.name for p in store.glob("*.xml"))
        assert files == sorted(f"{locs[k].rsplit('/', 1)[1]}.xml" for k in ("q", "t"))
        node.restart()
        sink.hits.clear()
        run(after_restart())
        assert list(store.glob("*.xml")) == []
    finally:
        node.stop()


def test_rel_destination_forwards_to_another_rest_server(node, tmp_path, run):
    other = NodeProcess(tmp_path / "other", http=HTTP_PUSH_LOOPBACK).start()
    q = unique()

    async def go():
        async with aiohttp.ClientSession() as s:
            target = f"{other.http_url}/queues/inbox"
            doc = registration(target, rel="destination", retryWaitMillis="100")
            await _register(s, f"{node.http_url}/queues/{q}/push-consumers", doc)
            for i in range(3):
                await post(
                    s,
                    f"{node.http_url}/queues/{q}/create",
                    f"fwd{i}",
                    headers={"Content-Type": "text/x-fwd"},
                )
            got: list[bytes] = []
            t0 = time.monotonic()
            async with s.post(f"{target}/pull-consumers") as r:
                nxt = r.headers["msg-consume-next"]
            while len(got) < 3:
                assert time.monotonic() - t0 < 10
                m = await consume(s, nxt, wait=1)
                if m.status == 200:
                    got.append(m.body)
                    assert m.headers["Content-Type"] == "text/x-fwd"
                nxt = m.next
            assert got == [b"fwd0", b"fwd1", b"fwd2"]
            assert (await consume(s, nxt, wait=0.3)).status == 503

    try:
        run(go())
    finally:
        other.stop()
