"""A bridge over tls:// to a node whose STOMP listener speaks TLS, verified against a CA."""

from __future__ import annotations

from nodekit import NodeProcess
from sitekit import FAST_LINK, toml_value
from stompkit import connect
from test_stomp_tls import self_signed


def test_bridge_over_tls(tmp_path):
    cert, key = self_signed(tmp_path)
    b = NodeProcess(
        tmp_path / "b",
        name="site-b",
        stomp_scheme="tls",
        stomp=f'tls = {{ cert = "{cert}", key = "{key}" }}',
    )
    tls_port = b.stomp_port
    opts = "".join(f"{k} = {toml_value(v)}\n" for k, v in FAST_LINK.items())
    a = NodeProcess(
        tmp_path / "a",
        name="site-a",
        extra_config=f"""
[[bridges]]
name = "to-b"
remote_node = "site-b"
urls = ["tls://127.0.0.1:{tls_port}"]
tls_ca = "{cert}"
{opts}""",
    )
    b.start()
    a.start()
    try:
        prod, plst = connect(a.stomp_port)
        for i in range(50):
            prod.send(
                "/queue/site-b::orders", f"m{i}", headers={"persistent": "true", "receipt": f"r{i}"}
            )
        plst.wait_receipt("r49")
        prod.disconnect()
        import stomp
        from stompkit import Collect

        conn = stomp.Connection12([("127.0.0.1", tls_port)])
        conn.set_ssl(for_hosts=[("127.0.0.1", tls_port)], ca_certs=str(cert))
        lst = Collect()
        conn.set_listener("c", lst)
        conn.connect("guest", "guest", wait=True)
        conn.subscribe("/queue/orders", id="s")
        assert [m.body for m in lst.wait_messages(50, timeout=20)] == [f"m{i}" for i in range(50)]
        conn.disconnect()
        assert "tls://127.0.0.1" in a.log()
    finally:
        a.stop()
        b.stop()
