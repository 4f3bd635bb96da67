"""Issue 27, finding 7, against real nodes: ``node::queue`` is checked on where it really
goes, never on the text as written.  Send rights on ``orders.#`` no longer reach
``orders.x::anything`` (an unknown node: the dead-letter queue) over STOMP, AMQP or REST;
``site-a::q`` at site-a is the local ``q`` with its own rights (creating it too); a send to
another node needs ``send`` on the remote address and on the store-and-forward queue it waits
in (``sf.<node>``), never a create right: that queue is the node's own."""

from __future__ import annotations

import base64

import aiohttp
import pytest
from nodekit import NodeProcess
from proton.utils import BlockingConnection, LinkDetached
from sitekit import bridge_toml, collect
from stompkit import connect, unique

pytestmark = pytest.mark.timeout(120)

SITE_A = """
[[users]]
name = "app"
password = "p"
roles = ["app"]

[[users]]
name = "remote"
password = "r"
roles = ["remote"]

[[users]]
name = "wide"
password = "w"
roles = ["wide"]

[[permissions]]
match = "#"
send = ["wide"]
consume = ["wide"]

[[permissions]]
match = "orders.#"
send = ["app", "remote", "wide"]
consume = ["app"]
create_durable_queue = ["app"]

[[permissions]]
match = "sf.site-b"
send = ["remote", "wide"]

[[permissions]]
match = "DLQ"
consume = ["wide"]

[address_settings."#"]
dead_letter_address = "DLQ"
"""


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    root = tmp_path_factory.mktemp("remote-perms")
    b = NodeProcess(root / "site-b", name="site-b").start()
    a = NodeProcess(
        root / "site-a",
        name="site-a",
        http=True,
        amqp=True,
        extra_config=SITE_A + bridge_toml("to-b", "site-b", [b.stomp_port]),
    )
    try:
        a.start()
    except BaseException:
        b.stop()
        raise
    yield a, b
    a.stop()
    b.stop()


def refused(port: int, login: str, passcode: str, destination: str) -> str:
    conn, got = connect(port, login=login, passcode=passcode)
    conn.send(destination, "x", headers={"receipt": "r"})
    err = got.wait_error()
    assert "r" not in got.receipts
    return str(err.headers.get("message", ""))


def accepted(port: int, login: str, passcode: str, destination: str, body: str) -> None:
    conn, got = connect(port, login=login, passcode=passcode)
    conn.send(destination, body, headers={"receipt": "r"})
    got.wait_receipt("r")
    conn.disconnect()


@pytest.mark.parametrize(
    "destination, target",
    [
        ("/queue/orders.x::anything", "anything"),  # another (unknown) node: not orders.#
        ("/queue/site-a::secret", "secret"),  # this node: the local name decides
        ("/queue/site-b::orders.far", "sf.site-b"),  # may not use site-b's queue
    ],
)
def test_stomp_send_is_checked_on_the_real_targets(sites, destination, target):
    a, _ = sites
    message = refused(a.stomp_port, "app", "p", destination)
    assert "may not send" in message and repr(target) in message, message


def test_amqp_sender_is_checked_on_the_real_targets(sites):
    a, _ = sites
    c = BlockingConnection(f"amqp://127.0.0.1:{a.amqp_port}", user="app", password="p", timeout=10)
    try:
        with pytest.raises(LinkDetached, match="may not send on 'anything'"):
            c.create_sender("orders.x::anything")
        c.create_sender("orders.fine")  # what app may use still opens
    finally:
        c.close()


def test_rest_destination_is_checked_on_the_real_targets(sites, run):
    a, _ = sites
    auth = {"Authorization": "Basic " + base64.b64encode(b"app:p").decode()}

    async def go() -> None:
        async with aiohttp.ClientSession(headers=auth) as s:
            base = f"{a.http_url}/queues/orders.x::anything"
            async with s.get(base) as r:
                assert r.status == 403, (r.status, await r.text())
            async with s.post(base + "/create/m1", data=b"x") as r:
                text = await r.text()
                assert r.status == 403 and "may not send on 'anything'" in text, text

    run(go())


def test_this_nodes_name_is_the_local_queue_with_its_own_rights(sites):
    a, _ = sites
    q = f"orders.{unique('local')}"
    accepted(a.stomp_port, "app", "p", f"/queue/site-a::{q}", "here")
    assert collect(a.stomp_port, q, ["here"], timeout=10, login="app", passcode="p") == ["here"]
    # "remote" may send on orders.# but not create there: site-a::x is no way around that
    message = refused(a.stomp_port, "remote", "r", f"/queue/site-a::orders.{unique('new')}")
    assert "may not create durable queue" in message, message


def test_a_send_to_another_node_needs_send_on_its_store_and_forward_queue_only(sites):
    a, b = sites
    q = f"orders.{unique('far')}"
    accepted(a.stomp_port, "remote", "r", f"/queue/site-b::{q}", "over")  # no create right
    assert collect(b.stomp_port, q, ["over"], timeout=20) == ["over"]


def test_a_node_with_no_bridge_is_checked_on_the_dead_letter_queue(sites):
    a, _ = sites
    message = refused(a.stomp_port, "wide", "w", "/queue/nowhere::orders.x")
    assert "may not send on 'DLQ'" in message, message
