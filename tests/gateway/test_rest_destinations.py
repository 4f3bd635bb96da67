"""REST discovery (HEAD/GET with link headers), creating queues and topics over HTTP, the
names REST refuses to serve, and XML documents with DTDs in any encoding."""

from __future__ import annotations

import aiohttp
import pytest
from nodekit import NodeProcess
from restkit import HTTP_PUSH_LOOPBACK, PUSH_LOOPBACK, discover, drain, link, post
from stompkit import connect, unique

CONFIG = """
[address_settings."fixed.#"]
auto_create_queues = false
auto_create_addresses = false
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(
        tmp_path_factory.mktemp("rest-dest"), extra_config=CONFIG, http=HTTP_PUSH_LOOPBACK
    ).start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def link_node(tmp_path_factory):
    n = NodeProcess(
        tmp_path_factory.mktemp("rest-link"),
        http=f"[acceptors.http.rest]\nuse_link_headers = true\n{PUSH_LOOPBACK}",
    ).start()
    yield n
    n.stop()


def test_queue_and_topic_links(node, run):
    async def go():
        base = node.http_url
        async with aiohttp.ClientSession() as s:
            q = await discover(s, f"{base}/queues/orders")
            assert q == {
                "create": f"{base}/queues/orders/create",
                "create-with-id": f"{base}/queues/orders/create/{{id}}",
                "pull-consumers": f"{base}/queues/orders/pull-consumers",
                "push-consumers": f"{base}/queues/orders/push-consumers",
            }
            t = await discover(s, f"{base}/topics/news")
            assert t == {
                "create": f"{base}/topics/news/create",
                "create-with-id": f"{base}/topics/news/create/{{id}}",
                "pull-subscriptions": f"{base}/topics/news/pull-subscriptions",
                "push-subscriptions": f"{base}/topics/news/push-subscriptions",
            }
            # GET gives the same headers and an XML body listing the links
            async with s.get(f"{base}/queues/orders") as r:
                assert r.status == 200
                assert r.headers["msg-create"] == q["create"]
                assert r.content_type == "application/xml"
                text = await r.text()
                assert text.startswith('<queue name="orders">')
                assert f'<link rel="pull-consumers" href="{q["pull-consumers"]}"/>' in text

    run(go())


def test_links_follow_forwarded_host_and_proto(node, run):
    async def go():
        async with aiohttp.ClientSession() as s:
            headers = {"X-Forwarded-Host": "gw.example:8443", "X-Forwarded-Proto": "https"}
            async with s.head(f"{node.http_url}/queues/orders", headers=headers) as r:
                assert r.headers["msg-create"] == "https://gw.example:8443/queues/orders/create"
            async with s.head(
                f"{node.http_url}/queues/orders", headers={"Host": "alias.local:1234"}
            ) as r:
                assert r.headers["msg-create"] == "http://alias.local:1234/queues/orders/create"

    run(go())


def test_standard_link_header_style(link_node, run):
    async def go():
        async with aiohttp.ClientSession() as s:
            async with s.head(f"{link_node.http_url}/topics/news") as r:
                assert r.status == 200
                assert not any(k.lower().startswith("msg-") for k in r.headers)
                assert str(r.links["create"]["url"]) == f"{link_node.http_url}/topics/news/create"
                assert r.links["pull-subscriptions"]["title"] == "pull-subscriptions"
                create = link(r, "create")
            # the whole protocol works with Link headers too
            nxt = await post(s, create, b"x")
            assert nxt == create
            async with s.post(f"{link_node.http_url}/queues/lq/create", data=b"m") as r:
                assert r.status == 201
                assert "msg-create-next" not in r.headers
                assert link(r, "create-next").endswith("/queues/lq/create")

    run(go())


def test_unknown_and_mismatched_destinations_are_404(node, run):
    c, _ = connect(node.stomp_port)  # make "events" a topic (multicast address)
    c.subscribe("/topic/events", id="1")
    c.disconnect()

    async def go():
        base = node.http_url
        async with aiohttp.ClientSession() as s:
            for url, why in [
                (f"{base}/queues/fixed.nothing", "does not exist"),
                (f"{base}/topics/fixed.nothing", "does not exist"),
                (f"{base}/queues/events", "is a topic"),
            ]:
                async with s.get(url) as r:
                    assert r.status == 404, url
                    assert why in await r.text()
            async with s.post(f"{base}/queues/fixed.nothing/create", data=b"x") as r:
                assert r.status == 404
            async with s.get(f"{base}/nothing/here") as r:
                assert r.status == 404
            async with s.delete(f"{base}/queues/orders") as r:
                assert r.status == 405
            async with s.get(f"{base}/queues/orders/create") as r:
                assert r.status == 405

    run(go())


def test_create_queue_and_topic_with_xml(node, run):
    name = unique("fixed.made")  # auto-create is off here: only POST /queues makes it

    async def go():
        base = node.http_url
        ct = {"Content-Type": "application/hornetq.jms.queue+xml"}
        async with aiohttp.ClientSession() as s:
            async with s.head(f"{base}/queues/{name}") as r:
                assert r.status == 404
            body = f'<queue name="{name}"><durable>true</durable></queue>'
            async with s.post(f"{base}/queues", data=body, headers=ct) as r:
                assert r.status == 201, await r.text()
                assert r.headers["Location"] == f"{base}/queues/{name}"
            async with s.post(f"{base}/queues", data=body, headers=ct) as r:
                assert r.status == 200  # idempotent
            await post(s, f"{base}/queues/{name}/create?durable=true", b"kept")
            # a queue with a selector only keeps matching messages
            sel = f"{name}.red"
            doc = (
                f"<queue name=\"{sel}\"><selector><![CDATA[http_color = 'red']]></selector></queue>"
            )
            async with s.post(f"{base}/queues", data=doc) as r:
                assert r.status == 201
            await post(s, f"{base}/queues/{sel}/create", b"no", headers={"color": "blue"})
            await post(s, f"{base}/queues/{sel}/create", b"yes", headers={"color": "red"})
            assert await drain(s, f"{base}/queues/{sel}") == [b"yes"]
            topic = unique("fixed.t")
            async with s.post(f"{base}/topics", data=f'<topic name="{topic}"></topic>') as r:
                assert r.status == 201
                assert r.headers["Location"] == f"{base}/topics/{topic}"
            async with s.head(f"{base}/topics/{topic}") as r:
                assert r.status == 200
            async with s.post(f"{base}/topics", data=f'<topic name="{topic}"/>') as r:
                assert r.status == 200
            async with s.post(f"{base}/topics", data=f'<topic name="{name}"/>') as r:
                assert r.status == 409
                assert "already a queue" in await r.text()
            async with s.post(f"{base}/queues", data=f'<queue name="{topic}"/>') as r:
                assert r.status == 409
            for bad, why in [
                (b"<queue name='x'>", "malformed queue XML"),
                (b"<topic name='x'/>", "expected a <queue> document"),
                (b"<queue/>", "needs a name attribute"),
                (b"<queue name='a..b'/>", "empty word"),
                (b"<queue name='q'><durable>maybe</durable></queue>", "true or false"),
                (b'<!DOCTYPE q [<!ENTITY a "aaaa">]><queue name="&a;"/>', "DTDs and entities"),
            ]:
                async with s.post(f"{base}/queues", data=bad) as r:
                    assert r.status == 400, bad
                    assert why in await r.text(), (bad, await r.text())

    run(go())
    node.restart()  # the queue was durable: it and its durable message are still there

    async def after():
        async with aiohttp.ClientSession() as s:
            assert await drain(s, f"{node.http_url}/queues/{name}") == [b"kept"]

    run(after())


def test_names_rest_does_not_serve(node, run):
    """node::address is for sending only (test_rest_remote_queues.py): consuming or creating
    one is refused, and /topics names it never; sf.* queues belong to bridges; odd names are
    refused as the config does."""

    async def go():
        base = node.http_url
        sf = "can only be sent to"
        async with aiohttp.ClientSession() as s:
            for path, why in [
                ("/topics/a::b", "/queues/a::b/create"),
                ("/queues/sf.other-node", "store-and-forward queues"),
                ("/queues/a..b", "empty word"),
                ("/queues/a.*", "wildcard"),
                ("/queues/a%20b", "white space"),
                (f"/queues/{'x' * 300}", "longer than 255"),
            ]:
                for method in ("HEAD", "GET", "POST"):
                    url = base + path + ("/create" if method == "POST" else "")
                    async with s.request(method, url, data=b"x") as r:
                        assert r.status == 400, (method, path, r.status)
                        if method != "HEAD":
                            assert why in await r.text(), (path, await r.text())
            for name, why in [
                ("a::b", sf),
                ("a b", "white space"),
                ("a\tb", "white space"),
                ("x" * 3000, "longer than 255"),
                ("sf.x", "store-and-forward queues"),
                ("a/b", "'/'"),
            ]:
                for tag in ("queue", "topic"):
                    doc = f'<{tag} name="{name}"/>'.replace("\t", "&#9;")
                    async with s.post(f"{base}/{tag}s", data=doc) as r:
                        assert r.status == 400, (tag, name)
                        assert f"invalid {tag} name" in await r.text()
                        assert why in await r.text(), await r.text()
            t = unique("t")
            form = {"durable": "true", "name": "a b"}
            async with s.post(f"{base}/topics/{t}/pull-subscriptions", data=form) as r:
                assert r.status == 400
                assert "invalid subscription name" in await r.text()
            assert await drain(s, f"{base}/queues/DLQ") == []  # nothing went astray

    run(go())


def test_dtds_are_refused_in_every_encoding(node, run):
    """The check happens in the parser, after decoding: a UTF-16 document cannot hide its
    DOCTYPE (a byte search for b"<!DOCTYPE" did not see it and the entity was expanded)."""
    entity = '<!DOCTYPE q [<!ENTITY h "http://127.0.0.1:1/evil">]>'
    docs = {
        "queue": f'<?xml version="1.0"?>{entity}<queue name="{unique("dtd")}"/>',
        "push": f'<?xml version="1.0"?>{entity}<push-registration><link href="&h;"/>'
        "</push-registration>",
        "doctype only": f'<!DOCTYPE queue><queue name="{unique("dtd")}"/>',
    }

    async def go():
        base = node.http_url
        async with aiohttp.ClientSession() as s:
            for what, text in docs.items():
                url = (
                    f"{base}/queues/{unique()}/push-consumers"
                    if what == "push"
                    else base + "/queues"
                )
                for encoding in ("UTF-8", "UTF-16", "UTF-16BE"):  # (BE: no BOM)
                    body = text.replace('version="1.0"', f'version="1.0" encoding="{encoding}"')
                    async with s.post(url, data=body.encode(encoding.replace("BE", "-BE"))) as r:
                        assert r.status == 400, (what, encoding, r.status, await r.text())
                        assert "DTDs and entities are not accepted" in await r.text()
            name = unique("utf16")  # UTF-16 itself is fine
            body = f'<?xml version="1.0" encoding="utf-16"?><queue name="{name}"/>'
            async with s.post(f"{base}/queues", data=body.encode("utf-16")) as r:
                assert r.status == 201, await r.text()

    run(go())
