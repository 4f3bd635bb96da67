"""Two real nodes, site-a bridged to site-b through a fault-injecting proxy: store-and-forward
delivery once and only once, in order, through cuts, crashes, black holes and failover."""

from __future__ import annotations

import time

import pytest
from sitekit import (
    Drain,
    Repeater,
    Sites,
    check_once_in_order,
    collect,
    send_all,
    two_sites,
    wait_log,
)

pytestmark = pytest.mark.timeout(180)


def test_store_and_forward_arrives_once_in_order(tmp_path):
    sites = two_sites(tmp_path)
    try:
        bodies = [f"m{i:05d}" for i in range(1000)]
        confirmed = send_all(sites.a.stomp_port, "site-b::orders", bodies)
        assert confirmed == bodies
        d = Drain(sites.b.stomp_port, "orders")
        try:
            got = d.wait_all(bodies, 30)
            time.sleep(0.3)
            check_once_in_order(bodies, confirmed, d.bodies())
            assert len(d.bodies()) == len(bodies)
            first = d.messages[0].headers
        finally:
            d.close()
        # the remote sees the bridge's stable duplicate id and a durable message
        assert first["_WS_DUPL_ID"].startswith("site-a/to-site-b/")
        assert first.get("persistent") == "true"
        assert "_WS_ROUTE_TO_NODE" not in first
        assert got
        wait_log(sites.a, r"bridge to-site-b: connected to tcp://127\.0\.0\.1:\d+", 5)
    finally:
        sites.stop()


def chaos(
    sites: Sites, total: int, batch: int, *, kill_a: set[int], kill_b: set[int]
) -> tuple[list[str], list[str]]:
    """Send ``total`` messages to ``site-b::orders`` in batches; the nodes are kill -9'ed
    after the batches numbered in ``kill_a`` / ``kill_b`` were sent (before their receipts
    came back).  Returns (sent, confirmed)."""
    bodies = [f"m{i:06d}" for i in range(total)]
    sent: list[str] = []
    confirmed: list[str] = []
    for n, i in enumerate(range(0, total, batch)):
        chunk = bodies[i : i + batch]

        def fault(_: int, n: int = n) -> None:
            if n in kill_b:
                sites.b.kill9()
                sites.b.start()
            if n in kill_a:
                sites.a.kill9()

        confirmed += send_all(
            sites.a.stomp_port, "site-b::orders", chunk, batch=batch, between=fault
        )
        sent += chunk
        if n in kill_a:
            sites.a.start()
    return sent, confirmed


def test_cuts_and_crashes_lose_and_duplicate_nothing(tmp_path):
    sites = two_sites(tmp_path, bridge={"confirmation_window": 200})
    sites.proxy.set_bandwidth(150_000)  # slow enough that cuts land mid-transfer
    cutter = Repeater(0.2, sites.proxy.cut)
    cutter.start()
    try:
        sent, confirmed = chaos(sites, 3000, 250, kill_a={3, 8}, kill_b={5})
        assert len(confirmed) >= 3000 - 2 * 250  # only the batches of the two crashes may be lost
        received = collect(sites.b.stomp_port, "orders", confirmed, timeout=60)
        cutter.stop()
        check_once_in_order(sent, confirmed, received)
        assert sites.proxy.stats()["connections_cut"] >= 5
        assert "dead-lettered" not in sites.a.log()
    finally:
        cutter.stop()
        sites.stop()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_soak_50000_messages_cuts_and_crashes(tmp_path):
    """The issue's acceptance run: 50,000 durable messages, at least 20 cuts, each node
    kill -9'ed at least twice."""
    sites = two_sites(tmp_path, bridge={"confirmation_window": 1000})
    sites.proxy.set_bandwidth(600_000)  # about 20 s of transfer, cut 4 times a second
    cutter = Repeater(0.25, sites.proxy.cut)
    cutter.start()
    try:
        sent, confirmed = chaos(sites, 50_000, 1000, kill_a={8, 24, 40}, kill_b={4, 16, 32})
        received = collect(sites.b.stomp_port, "orders", confirmed, timeout=900, settle=2)
        cuts = cutter.stop()
        check_once_in_order(sent, confirmed, received)
        assert len(confirmed) >= 50_000 - 3 * 1000
        assert cuts >= 20 and sites.proxy.stats()["connections_cut"] >= 20
        assert "dead-lettered" not in sites.a.log()
        print(
            f"soak: {len(sent)} sent, {len(confirmed)} confirmed, {len(received)} received "
            f"once and in order; {sites.proxy.stats()['connections_cut']} connections cut"
        )
    finally:
        cutter.stop()
        sites.stop()


def test_black_hole_detected_within_liveness_and_traffic_resumes(tmp_path):
    sites = two_sites(tmp_path, bridge={"liveness_timeout": "2s", "heartbeat": "500ms"})
    d = Drain(sites.b.stomp_port, "orders")
    try:
        first = [f"a{i}" for i in range(50)]
        assert send_all(sites.a.stomp_port, "site-b::orders", first) == first
        d.wait_all(first, 20)
        mark = len(sites.a.log())
        t0 = time.monotonic()
        sites.proxy.blackhole(True)
        second = [f"b{i}" for i in range(50)]
        assert send_all(sites.a.stomp_port, "site-b::orders", second) == second
        wait_log(sites.a, r"bridge to-site-b: link to .* lost: nothing received", 10, mark)
        detected = time.monotonic() - t0
        assert detected <= 2.0 + 1.5, f"black hole detected after {detected:.1f}s"
        time.sleep(1.0)  # reconnect attempts vanish into the hole too
        sites.proxy.blackhole(False)
        t1 = time.monotonic()
        d.wait_all(first + second, 20)
        resumed = time.monotonic() - t1
        time.sleep(0.3)
        check_once_in_order(first + second, first + second, d.bodies())
        assert resumed < 10
    finally:
        d.close()
        sites.stop()


def test_failover_to_the_second_url_when_the_first_refuses(tmp_path):
    sites = two_sites(tmp_path, proxies=2, start=False)
    try:
        primary, backup = sites.proxies
        primary.refuse(True)
        sites.b.start()
        sites.a.start()
        bodies = [f"f{i}" for i in range(100)]
        assert send_all(sites.a.stomp_port, "site-b::orders", bodies) == bodies
        received = collect(sites.b.stomp_port, "orders", bodies, timeout=20)
        check_once_in_order(bodies, bodies, received)
        wait_log(sites.a, rf"bridge to-site-b: connected to tcp://127\.0\.0\.1:{backup.port}\b", 5)
        assert primary.stats()["refused"] >= 1
        assert backup.stats()["connections_total"] >= 1
    finally:
        sites.stop()


def test_restart_of_the_source_resumes_without_loss_or_duplicates(tmp_path):
    """Messages stored while the remote is down are forwarded after both sides restart."""
    sites = two_sites(tmp_path)
    try:
        sites.b.stop()
        bodies = [f"r{i:04d}" for i in range(500)]
        assert send_all(sites.a.stomp_port, "site-b::orders", bodies) == bodies
        sites.a.restart()
        sites.b.start()
        received = collect(sites.b.stomp_port, "orders", bodies, timeout=30)
        check_once_in_order(bodies, bodies, received)
        assert len(received) == len(bodies)
    finally:
        sites.stop()
