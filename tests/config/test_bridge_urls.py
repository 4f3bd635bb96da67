"""``[[bridges]] urls``: every transport's form, and a precise error for what is not one."""

from __future__ import annotations

import pytest

from waystation.config import ConfigError, parse_config


def bridge(urls: str, extra: str = "") -> str:
    return f'[[bridges]]\nname = "b"\nremote_node = "x"\nurls = [{urls}]\n{extra}'


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "site.toml")
    return info.value.problems


def test_every_transport_with_default_ports_and_paths():
    cfg = parse_config(
        bridge(
            '"tcp://h:61613", "tls://h:61614/", "ws://h", "wss://h:8443/stomp", '
            '"http://h/tunnel", "https://h:8443"'
        ),
        "site.toml",
    )
    assert [(e.scheme, e.port, e.path) for e in cfg.bridges[0].endpoints()] == [
        ("tcp", 61613, ""),
        ("tls", 61614, "/"),
        ("ws", 80, ""),
        ("wss", 8443, "/stomp"),
        ("http", 80, "/tunnel"),
        ("https", 8443, ""),
    ]


def test_a_stream_url_with_a_path_is_refused():
    assert problems(bridge('"ws://h/stomp", "tcp://h:61613/stomp"')) == [
        "site.toml: [[bridges]][0].urls[1]: a tcp:// url must not have a path, got '/stomp' (line 4)"
    ]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "mqtt://h:1883",
            "URL scheme must be one of tcp, tls, ws, wss, http, https, amqp, amqps, "
            "got 'mqtt' in 'mqtt://h:1883'",
        ),
        ("tcp://h", "URL 'tcp://h' has no port"),
        ("ws://h/stomp?x=1", "URL 'ws://h/stomp?x=1' must not have a query or fragment"),
        ("wss://u:p@h/stomp", "URL 'wss://u:p@h/stomp' must not carry credentials"),
    ],
)
def test_bad_urls_say_what_is_wrong(url, message):
    assert problems(bridge(f'"{url}"')) == [
        f"site.toml: [[bridges]][0].urls[0]: {message} (line 4)"
    ]


def test_a_foreign_broker_takes_websocket_but_not_the_tunnel():
    ok = parse_config(bridge('"ws://h:15674/ws"', 'foreign = "stomp"'), "site.toml")
    assert ok.bridges[0].foreign == "stomp"
    assert problems(bridge('"https://h/tunnel"', 'foreign = "stomp"')) == [
        "site.toml: [[bridges]][0].urls[0]: a foreign broker cannot be reached over the HTTP "
        "tunnel (line 4)"
    ]
