"""``node::queue`` wherever a destination is named: REST producers store and forward to
another node as STOMP senders do, and consuming from one is a clear error in every protocol
(REST pull, push and subscriptions, STOMP SUBSCRIBE, AMQP source, MQTT subscription) instead
of a dead local queue of that name."""

from __future__ import annotations

import threading

import aiohttp
import paho.mqtt.client as mqtt
import pytest
from nodekit import NodeProcess
from paho.mqtt.enums import CallbackAPIVersion
from proton.utils import BlockingConnection, LinkDetached
from restkit import discover, post
from sitekit import bridge_toml, collect, dead_letters
from stompkit import connect, unique

REFUSED = "can only be sent to"


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    root = tmp_path_factory.mktemp("rest-remote")
    b = NodeProcess(root / "site-b", name="site-b").start()
    a = NodeProcess(
        root / "site-a",
        name="site-a",
        http=True,
        amqp=True,
        mqtt=True,
        extra_config=bridge_toml("to-b", "site-b", [b.stomp_port]),
    )
    try:
        a.start()
    except BaseException:
        b.stop()
        raise
    yield a, b
    a.stop()
    b.stop()


def test_rest_producer_stores_and_forwards_to_another_node(sites, run):
    a, b = sites
    q = unique("orders")
    url = f"{a.http_url}/queues/site-b::{q}"

    async def go() -> None:
        async with aiohttp.ClientSession() as s:
            links = await discover(s, url)
            assert set(links) == {"create", "create-with-id"}, links  # nothing to consume
            nxt = await post(s, links["create"], b"m0")
            assert nxt == links["create"]
            await post(s, links["create"], b"m1")
            await post(s, links["create"] + "/order-42", b"m2")  # create-with-id
            async with s.get(url) as r:
                assert r.status == 200 and "pull-consumers" not in await r.text()

    run(go())
    assert collect(b.stomp_port, q, ["m0", "m1", "m2"], timeout=20) == ["m0", "m1", "m2"]


def test_rest_repeated_create_with_id_arrives_once_at_the_remote(sites, run):
    a, b = sites
    q = unique("dup")
    url = f"{a.http_url}/queues/site-b::{q}/create/order-42"

    async def go() -> None:
        async with aiohttp.ClientSession() as s:
            await post(s, url, b"once")
            await post(s, url, b"once")  # a repeat (the answer was lost): dropped

    run(go())
    assert collect(b.stomp_port, q, ["once"], timeout=20) == ["once"]


def test_rest_send_to_a_node_without_a_bridge_is_dead_lettered(sites, run):
    a, _ = sites
    q = unique("lost")

    async def go() -> None:
        async with aiohttp.ClientSession() as s:
            await post(s, f"{a.http_url}/queues/nowhere::{q}/create", b"no route")

    run(go())
    (dead,) = dead_letters(a.stomp_port, "invalid-remote-node")
    assert dead["body"] == "no route"


def test_rest_consuming_or_creating_a_remote_queue_is_refused(sites, run):
    a, _ = sites
    base = a.http_url

    async def go() -> None:
        async with aiohttp.ClientSession() as s:
            for method, path, data in [
                ("POST", "/queues/site-b::orders/pull-consumers", None),
                ("POST", "/queues/site-b::orders/push-consumers", b"<push-registration/>"),
                ("POST", "/queues", b'<queue name="site-b::orders"/>'),
                ("POST", "/topics", b'<topic name="site-b::prices"/>'),
            ]:
                async with s.request(method, base + path, data=data) as r:
                    text = await r.text()
                    assert r.status == 400 and REFUSED in text, (path, r.status, text)
            for path in ("/topics/site-b::prices", "/topics/site-b::prices/pull-subscriptions"):
                method = "GET" if path.endswith("prices") else "POST"
                async with s.request(method, base + path) as r:
                    text = await r.text()
                    assert r.status == 400 and "/queues/site-b::prices/create" in text, text

    run(go())


def test_stomp_subscribe_to_a_remote_queue_is_an_error(sites):
    a, _ = sites
    for dest in ("/queue/site-b::orders", "site-b::orders"):
        conn, got = connect(a.stomp_port)
        conn.subscribe(dest, id="s")
        err = got.wait_error()
        assert "names another node" in err.body and "only a send" in err.body, err.body
        conn.transport.stop()  # the node closes the connection after an ERROR: wait for it


def test_amqp_source_naming_a_remote_queue_is_refused(sites):
    a, _ = sites
    c = BlockingConnection(f"amqp://127.0.0.1:{a.amqp_port}", timeout=10)
    try:
        with pytest.raises(LinkDetached, match="names another node"):
            c.create_receiver("site-b::orders")
        c.create_sender("site-b::orders")  # sending there is store-and-forward: fine
    finally:
        c.close()


def test_mqtt_cannot_subscribe_to_a_remote_queue(sites):
    a, _ = sites
    codes: list[object] = []
    done = threading.Event()
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=unique("paho"))

    def on_subscribe(client, userdata, mid, reason_codes, properties) -> None:  # noqa: ANN001
        codes.extend(reason_codes)
        done.set()

    c.on_subscribe = on_subscribe
    c.connect("127.0.0.1", a.mqtt_port)
    c.loop_start()
    try:
        c.subscribe("site-b::orders", qos=1)
        assert done.wait(10)
        assert [getattr(rc, "is_failure", True) for rc in codes] == [True], codes
    finally:
        c.disconnect()
        c.loop_stop()
