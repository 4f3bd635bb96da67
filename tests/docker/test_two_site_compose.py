"""The two-site compose setup, started with testcontainers where a Docker engine exists.

Opt-in (`scripts/test -m docker`, with `pip install -e ".[docker]"`): these machines have no
Docker engine, so the default suite runs the same scenario with local processes
(tests/bridges/). Without an engine this test fails loudly rather than skipping.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from stompkit import connect

pytestmark = pytest.mark.docker
COMPOSE_DIR = Path(__file__).resolve().parents[2] / "docker" / "two-site"


def test_eu_orders_cross_from_site_a_to_site_b():
    from testcontainers.compose import DockerCompose

    with DockerCompose(str(COMPOSE_DIR), compose_file_name="compose.yaml", build=True) as compose:
        port_a = int(compose.get_service_port("site-a", 61613))
        port_b = int(compose.get_service_port("site-b", 61613))
        deadline = time.monotonic() + 60
        while True:
            try:
                a, alst = connect(port_a)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        for i in range(100):
            region = "EU" if i % 2 == 0 else "US"
            a.send(
                "/queue/orders",
                f"o{i}",
                headers={"region": region, "persistent": "true", "receipt": f"r{i}"},
            )
        alst.wait_receipt("r99", timeout=30)
        b, blst = connect(port_b)
        b.subscribe("/queue/orders", id="s")
        msgs = blst.wait_messages(50, timeout=60)
        assert [m.body for m in msgs] == [f"o{i}" for i in range(0, 100, 2)]
        a.disconnect()
        b.disconnect()
