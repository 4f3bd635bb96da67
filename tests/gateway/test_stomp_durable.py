"""Durable subscriptions over STOMP survive a node restart and collect while away."""

from __future__ import annotations

import time

from nodekit import NodeProcess
from stompkit import connect


def test_durable_subscription_survives_restart(tmp_path):
    node = NodeProcess(tmp_path).start()
    try:
        sub, slst = connect(node.stomp_port, **{"client-id": "app"})
        sub.subscribe(
            "/topic/news",
            id="d",
            ack="client-individual",
            headers={"activemq.subscriptionName": "news", "receipt": "s1"},
        )
        slst.wait_receipt("s1")
        sub.disconnect()  # detached: the subscription keeps collecting
        prod, plst = connect(node.stomp_port)
        prod.send("/topic/news", "while-away", headers={"persistent": "true", "receipt": "p1"})
        plst.wait_receipt("p1")
        prod.disconnect()
        node.restart()
        prod, plst = connect(node.stomp_port)
        prod.send("/topic/news", "after-restart", headers={"persistent": "true", "receipt": "p2"})
        plst.wait_receipt("p2")
        sub, slst = connect(node.stomp_port, **{"client-id": "app"})
        sub.subscribe(
            "/topic/news",
            id="d",
            ack="client-individual",
            headers={"durable-subscription-name": "news"},
        )
        msgs = slst.wait_messages(2)
        assert [m.body for m in msgs] == ["while-away", "after-restart"]
        for m in msgs:
            sub.ack(m.headers["ack"])
        # a non-durable subscriber that was not there saw none of it; unsubscribing with the
        # durable name removes the subscription for good
        sub.unsubscribe("d", headers={"durable-subscription-name": "news"})
        time.sleep(0.2)
        sub.disconnect()
        prod.send("/topic/news", "nobody-listens", headers={"persistent": "true", "receipt": "p3"})
        plst.wait_receipt("p3")
        prod.disconnect()
        node.restart()
        sub, slst = connect(node.stomp_port, **{"client-id": "app"})
        sub.subscribe("/topic/news", id="d", headers={"durable-subscription-name": "news"})
        time.sleep(0.5)
        assert slst.messages == []
        sub.disconnect()
    finally:
        node.stop()
