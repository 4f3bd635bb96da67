"""Push targets (issue 10, SSRF): loopback, private and link-local targets are refused unless
listed in ``push_allow``; host names are checked on every address they resolve to; the check
is made again when a delivery connects, so a URL learnt later (a remote's
``msg-create-with-id``, a redirect) cannot reach what registration would have refused.
On a node without the rule every registration below is accepted and the sink is hit."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from nodekit import NodeProcess, free_port
from restkit import Sink, post, registration

XML = {"Content-Type": "application/xml"}


@pytest.fixture
def default_node(tmp_path):
    n = NodeProcess(tmp_path, http=True).start()
    yield n
    n.stop()


def test_loopback_private_and_link_local_targets_are_refused_by_default(default_node, run):
    async def go():
        base = default_node.http_url
        factory = f"{base}/queues/ssrf.q/push-consumers"
        async with aiohttp.ClientSession() as s:
            for href in (
                "http://127.0.0.1:9/hook",
                "http://localhost:9/hook",  # a name: checked on what it resolves to
                "http://[::1]:9/hook",
                "http://[::ffff:127.0.0.1]:9/hook",
                "http://10.1.2.3/hook",
                "http://192.168.0.1/hook",
                "http://169.254.169.254/latest/meta-data",  # cloud metadata
                "http://0.0.0.0:9/hook",
            ):
                async with s.post(factory, data=registration(href), headers=XML) as r:
                    text = await r.text()
                    assert r.status == 400, (href, r.status, text)
                    assert "push_allow" in text, text
            doc = registration("http://127.0.0.1:9/x-{id}", rel="template")
            async with s.post(factory, data=doc, headers=XML) as r:
                assert r.status == 400

    run(go())


def test_delivery_to_a_refused_address_is_dead_lettered_not_sent(tmp_path, run):
    """The registered target (127.0.0.2, allowed) names a create link on 127.0.0.1 (not
    allowed), and redirects there: neither request reaches 127.0.0.1."""
    http = '[acceptors.http.rest]\npush_allow = ["127.0.0.2/32"]\n'
    node = NodeProcess(tmp_path, http=http).start()
    sink = Sink()  # on 127.0.0.1: must never be hit

    async def go():
        await sink.start()
        remote_port = free_port()
        hits: list[str] = []

        async def head(request: web.Request) -> web.Response:
            hits.append(request.method + " " + request.path)
            return web.Response(headers={"msg-create-with-id": f"{sink.url}/create/{{id}}"})

        async def redirect(request: web.Request) -> web.Response:
            hits.append(request.method + " " + request.path)
            raise web.HTTPTemporaryRedirect(f"{sink.url}/redirected")

        app = web.Application()
        app.router.add_route("HEAD", "/queues/far", head)
        app.router.add_route("*", "/hop", redirect)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.2", remote_port).start()
        try:
            base = node.http_url
            async with aiohttp.ClientSession() as s:
                for q, doc in (
                    ("ssrf.a", registration(f"http://127.0.0.2:{remote_port}/queues/far",
                                            rel="destination")),
                    ("ssrf.b", registration(f"http://127.0.0.2:{remote_port}/hop")),
                ):  # fmt: skip
                    factory = f"{base}/queues/{q}/push-consumers"
                    async with s.post(factory, data=doc, headers=XML) as r:
                        assert r.status == 201, await r.text()
                    await post(s, f"{base}/queues/{q}/create", b"secret payload")
                for _ in range(300):  # both messages dead-lettered (loaded machines: slow)
                    if len(hits) >= 2 and node.log().count("dead-lettered (remote-rejected)") >= 2:
                        break
                    await asyncio.sleep(0.1)
                await asyncio.sleep(0.5)
            assert sorted(hits) == ["HEAD /queues/far", "POST /hop"], hits
            assert sink.hits == [], [h.path for h in sink.hits]
            log = node.log()
            assert "push_allow" in log and "dead-lettered" in log
        finally:
            await runner.cleanup()
            await sink.stop()

    try:
        run(go(), 60)
    finally:
        node.stop()
