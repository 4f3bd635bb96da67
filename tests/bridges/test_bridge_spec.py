"""From ``[[bridges]]`` urls to dialable targets: scheme, path, proxy and TLS per url."""

from __future__ import annotations

import pytest

from waystation.bridges.dial import Target
from waystation.bridges.spec import SUPPORTED_SCHEMES, spec_from_config
from waystation.config import parse_config
from waystation.config.fields import BRIDGE_SCHEMES


def targets(urls: str, extra: str = "") -> list[Target]:
    cfg = parse_config(
        f'[[bridges]]\nname = "b"\nremote_node = "site-b"\nurls = [{urls}]\n{extra}', "a.toml"
    )
    spec = spec_from_config(cfg.bridges[0])
    assert spec.skipped == []
    return spec.targets


def test_every_config_scheme_can_be_dialled():
    assert set(SUPPORTED_SCHEMES) == set(BRIDGE_SCHEMES)


def test_targets_keep_scheme_and_path_and_default_them():
    got = targets(
        '"tcp://10.0.0.1:61613", "tls://b.example:61614", "ws://b.example:8161/stomp", '
        '"wss://b.example", "http://b.example:8161/tunnel", "https://b.example/api/tunnel"'
    )
    assert [str(t) for t in got] == [
        "tcp://10.0.0.1:61613",
        "tls://b.example:61614",
        "ws://b.example:8161/stomp",
        "wss://b.example:443/stomp",  # no path: the node's default /stomp
        "http://b.example:8161/tunnel",
        "https://b.example:443/api/tunnel",
    ]
    assert [t.tls for t in got] == [False, True, False, True, False, True]
    assert [t.proxy_url for t in got] == [None] * 6


def test_the_proxy_applies_to_every_url_with_its_credentials_apart():
    t1, t2 = targets(
        '"ws://127.0.0.1:8161/", "http://127.0.0.1:8161"',
        'proxy = "http://me:p%40ss@127.0.0.1:3128"',
    )
    assert t1.url == "ws://127.0.0.1:8161/stomp" and t2.url == "http://127.0.0.1:8161/tunnel"
    for t in (t1, t2):
        assert t.proxy_url == "http://127.0.0.1:3128"  # no password in what gets logged
        assert t.proxy_auth == ("me", "p@ss")
        assert str(t).endswith(" via proxy 127.0.0.1:3128") and "p@ss" not in str(t)


def test_tls_ca_verifies_wss_and_https(tmp_path):
    from test_stomp_tls import self_signed

    cert, _ = self_signed(tmp_path)
    wss, https, tcp = targets(
        '"wss://127.0.0.1:8443/stomp", "https://127.0.0.1:8443/tunnel", "tcp://127.0.0.1:1"',
        f'tls_ca = "{cert}"',
    )
    assert wss.tls_ca == https.tls_ca == str(cert)
    assert wss.ssl_context() is not None and https.ssl_context() is not None
    assert tcp.ssl_context() is None


@pytest.mark.parametrize(
    ("host", "url"),
    [("::1", "ws://[::1]:8161/stomp"), ("127.0.0.1", "ws://127.0.0.1:8161/stomp")],
)
def test_ipv6_hosts_are_bracketed(host, url):
    assert Target(host, 8161, scheme="ws", path="/stomp").url == url
