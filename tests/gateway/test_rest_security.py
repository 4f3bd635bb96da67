"""REST with security on: HTTP Basic against the node's users, 401 without or with wrong
credentials, 403 for a missing permission, the same rules as STOMP."""

from __future__ import annotations

import aiohttp
import pytest
from nodekit import SECURITY_USERS, NodeProcess
from restkit import HTTP_PUSH_LOOPBACK, post, registration
from stompkit import connect, unique

USERS = (
    SECURITY_USERS
    + """
[[permissions]]
match = "shared.#"
send = ["lim", "rw"]
consume = ["lim", "rw"]
browse = ["ro", "rw"]
create_durable_queue = ["rw"]
create_non_durable_queue = ["rw"]
delete_durable_queue = ["rw"]

[[queues]]
name = "shared.box"
"""
)

APP = {"Authorization": aiohttp.encode_basic_auth("app", "secret")}
READER = {"Authorization": aiohttp.encode_basic_auth("reader", "r")}
LIMITED = {"Authorization": aiohttp.encode_basic_auth("limited", "l")}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(
        tmp_path_factory.mktemp("rest-sec"), extra_config=USERS, http=HTTP_PUSH_LOOPBACK
    ).start()
    yield n
    n.stop()


def test_missing_or_wrong_credentials_get_401(node, run):
    async def go():
        base = node.http_url
        async with aiohttp.ClientSession() as s:
            for headers, why in [
                ({}, "login required"),
                (
                    {"Authorization": aiohttp.encode_basic_auth("app", "wrong")},
                    "bad credentials for user 'app'",
                ),
                ({"Authorization": aiohttp.encode_basic_auth("nobody", "x")}, "bad credentials"),
                ({"Authorization": "Basic !!notbase64"}, "unusable Authorization header"),
                ({"Authorization": "Bearer abc"}, "unusable Authorization header"),
            ]:
                async with s.post(
                    f"{base}/queues/shared.box/create", data=b"x", headers=headers
                ) as r:
                    assert r.status == 401, headers
                    assert r.headers["WWW-Authenticate"].startswith('Basic realm="waystation"')
                    assert why in await r.text()
            async with s.head(f"{base}/queues/shared.box") as r:
                assert r.status == 401
            async with s.post(f"{base}/queues/shared.box/pull-consumers") as r:
                assert r.status == 401

    run(go())


def test_permissions_decide_each_resource(node, run):
    q = f"shared.{unique()}"

    async def go():
        base = node.http_url
        async with aiohttp.ClientSession() as s:

            async def status(
                method: str, url: str, auth: dict[str, str], **kw: object
            ) -> tuple[int, str]:
                async with s.request(method, url, headers=auth, **kw) as r:  # type: ignore[arg-type]
                    return r.status, await r.text()

            box = f"{base}/queues/shared.box"
            # reader: may look (browse) but not send or consume
            assert (await status("HEAD", box, READER))[0] == 200
            code, text = await status("POST", f"{box}/create", READER, data=b"x")
            assert code == 403 and "user 'reader' may not send on 'shared.box'" in text
            code, text = await status("POST", f"{box}/pull-consumers", READER)
            assert code == 403 and "may not consume" in text
            assert (await status("HEAD", f"{base}/queues/private", READER))[0] == 403
            # limited: send and consume on the declared queue, but create nothing
            assert (await status("POST", f"{box}/create", LIMITED, data=b"hello"))[0] == 201
            code, text = await status("POST", f"{base}/queues/{q}/create", LIMITED, data=b"x")
            assert code == 403 and "may not create durable queue" in text
            async with s.post(f"{box}/pull-consumers", headers=LIMITED) as r:
                assert r.status == 201
                nxt = r.headers["msg-consume-next"]
            code, text = await status("POST", nxt, LIMITED)
            assert (code, text) == (200, "hello")
            assert (await status("POST", nxt, READER))[0] == 403  # another user's consumer
            code, text = await status("POST", f"{base}/topics/shared.t/pull-subscriptions", LIMITED)
            assert code == 403 and "may not create non durable queue" in text
            doc = registration("http://127.0.0.1:9/x", root="push-topic-registration")
            code, _ = await status(
                "POST", f"{base}/topics/shared.t/push-subscriptions", LIMITED, data=doc
            )
            assert code == 403
            code, _ = await status("POST", f"{base}/queues", LIMITED, data=f'<queue name="{q}"/>')
            assert code == 403
            # app may do all of it
            assert (await status("POST", f"{base}/queues", APP, data=f'<queue name="{q}"/>'))[
                0
            ] == 201
            await post(s, f"{base}/queues/{q}/create", b"by app", headers=APP)
            async with s.post(
                f"{base}/topics/shared.t/pull-subscriptions",
                headers=APP,
                data={"durable": "true", "name": "shared.sub"},
            ) as r:
                assert r.status == 201
                sub = r.headers["Location"]
            # deleting a durable subscription needs delete_durable_queue
            assert (await status("DELETE", sub, LIMITED))[0] == 403
            assert (await status("DELETE", sub, APP))[0] == 204

    run(go())
    # the same users and rules hold over STOMP: what limited posted, app reads there too
    conn, lst = connect(node.stomp_port, login="app", passcode="secret")
    try:
        conn.subscribe(f"/queue/{q}", id="s")
        assert [m.body for m in lst.wait_messages(1)] == ["by app"]
    finally:
        conn.disconnect()
