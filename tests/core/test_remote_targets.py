"""Issue 27, finding 7, in process: what a ``node::queue`` permission is checked against
(``PostOffice.permission_targets``), as every protocol's session and the admin API use it."""

from __future__ import annotations

import pytest
from enginekit import make_engine

from waystation.core.security import NotAuthorized, Permission, Principal, SecurityManager
from waystation.core.settings import AddressSettings

APP = Principal("app", frozenset({"app"}))


def test_targets_of_a_destination(run):
    async def go():
        eng = await make_engine(
            None,
            {"#": AddressSettings(dead_letter_address="DLQ")},
            node_name="site-a",
            remote_nodes={"site-b"},
            routes={"site-c": "site-b", "site-d": "site-x"},
        )
        targets = eng.post.permission_targets
        assert targets("orders") == ("orders",)
        assert targets("site-a::orders") == ("orders",)  # this node: the local queue
        assert targets("site-b::orders") == ("orders", "sf.site-b")
        assert targets("site-c::orders") == ("orders", "sf.site-b")  # routed via site-b
        # no bridge (or a route through a node with none): dead-lettered
        assert targets("orders.x::DLQ") == ("DLQ", "sf.orders.x")
        assert targets("site-d::orders") == ("orders", "sf.site-d", "DLQ")
        await eng.stop()

    run(go())


def test_the_session_checks_every_target_and_names_the_one_refused(run):
    async def go():
        eng = await make_engine(None, node_name="site-a", remote_nodes={"site-b"})
        eng.security = SecurityManager(
            enabled=True,
            permissions={
                "orders.#": {Permission.SEND: frozenset({"app"})},
                "sf.site-b": {Permission.SEND: frozenset({"app"})},
            },
        )
        s = eng.open_session(APP, "t", "here")
        assert s.allowed(Permission.SEND, "site-b::orders.x")
        assert not s.allowed(Permission.SEND, "orders.x::anything")
        with pytest.raises(NotAuthorized, match="'anything' \\(where 'orders.x::anything' goes"):
            s.check_send("orders.x::anything")
        s.check_send("site-b::orders.x")  # the node's sf queue: no create right asked
        s.send(eng.make_message("site-b::orders.x", b"x"))
        assert eng.queue("sf.site-b").depth == 1
        with pytest.raises(NotAuthorized, match="may not create durable queue on 'orders.y'"):
            s.check_send("site-a::orders.y")  # the local queue, with the local rights
        await eng.stop()

    run(go())
