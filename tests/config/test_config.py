"""Config loading: defaults, every table, cross checks, and the operator's error messages."""

from __future__ import annotations

import typing
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel

from waystation.config import ConfigError, default_config, load_config, parse_config
from waystation.config.errors import format_loc
from waystation.config.locate import key_lines
from waystation.config.passwords import hash_password, parse_hash, verify_password
from waystation.config.schema import Config
from waystation.config.units import format_duration, format_size, parse_duration, parse_size, to_ms
from waystation.core.settings import AddressSettings, FullPolicy

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "config" / "examples").glob("*.toml"))
FAST_HASH = hash_password("s3cret", iterations=1000)


def problems(text: str, source: str = "site.toml", **kw: object) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, source, **kw)  # type: ignore[arg-type]
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


def one_problem(text: str) -> str:
    found = problems(text)
    assert len(found) == 1, found
    return found[0]


# --- defaults and examples -----------------------------------------------------------------------


def test_examples_exist_and_load_cleanly() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"single-node.toml", "two-site-a.toml", "two-site-b.toml", "secure.toml"} <= names
    for path in EXAMPLES:
        cfg = load_config(path)
        assert cfg.source == str(path)
        assert cfg.warnings() == [], path
        assert cfg.node.data_dir.is_relative_to(path.parent)


def test_two_site_examples_link_a_to_b() -> None:
    a = load_config(next(p for p in EXAMPLES if p.name == "two-site-a.toml"))
    b = load_config(next(p for p in EXAMPLES if p.name == "two-site-b.toml"))
    assert (a.node.name, b.node.name) == ("site-a", "site-b")
    ports_a = {e.port for e in (x.endpoint for x in a.acceptors.enabled().values())}
    ports_b = {e.port for e in (x.endpoint for x in b.acceptors.enabled().values())}
    assert not ports_a & ports_b
    (bridge,) = a.bridges
    assert bridge.remote_node == "site-b" and bridge.queue == "sf.site-b"
    assert bridge.endpoints()[0].port == b.acceptors.stomp.endpoint.port
    assert a.diverts[0].remote_node == "site-b"


def test_secure_example_passwords_verify() -> None:
    cfg = load_config(next(p for p in EXAMPLES if p.name == "secure.toml"))
    assert cfg.security.enabled and not cfg.security.allow_anonymous
    admin = next(u for u in cfg.users if u.name == "admin")
    assert admin.check_password("admin-pw") and not admin.check_password("wrong")


def test_embedded_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None)
    assert cfg == default_config()
    assert cfg.source is None
    assert cfg.node.name == "waystation" and cfg.node.data_dir == tmp_path / "data"
    assert cfg.node.persistence and cfg.node.journal.file_size == 10 * 1024 * 1024
    assert cfg.node.event_log_dir == tmp_path / "data" / "events"
    ports = {
        name: (a.endpoint.host, a.endpoint.port) for name, a in cfg.acceptors.enabled().items()
    }
    assert ports == {
        "stomp": ("127.0.0.1", 61613),
        "http": ("127.0.0.1", 8161),
        "amqp": ("127.0.0.1", 5672),
        "mqtt": ("127.0.0.1", 1883),
    }
    assert all(a.endpoint.is_loopback for a in cfg.acceptors.enabled().values())
    assert [q.name for q in cfg.queues] == ["DLQ", "ExpiryQueue"]
    assert cfg.engine_address_settings() == {
        "#": AddressSettings(
            dead_letter_address="DLQ", expiry_address="ExpiryQueue", max_delivery_attempts=10
        )
    }
    assert not cfg.security.enabled and cfg.warnings() == []


def test_empty_file_equals_default_and_paths_resolve_against_the_file(tmp_path: Path) -> None:
    (tmp_path / "site.toml").write_text("")
    cfg = load_config(tmp_path / "site.toml")
    assert cfg.node.data_dir == tmp_path / "data"
    (tmp_path / "abs.toml").write_text(f'[node]\ndata_dir = "{tmp_path / "elsewhere"}"\n')
    assert load_config(tmp_path / "abs.toml").node.data_dir == tmp_path / "elsewhere"


def test_every_field_is_documented() -> None:
    seen: set[type[BaseModel]] = set()

    def walk(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no description"
            for arg in typing.get_args(field.annotation) or (field.annotation,):
                for inner in typing.get_args(arg) or (arg,):
                    if isinstance(inner, type) and issubclass(inner, BaseModel):
                        walk(inner)
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
                walk(field.annotation)

    walk(Config)
    assert len(seen) > 10
    assert "properties" in Config.model_json_schema()


# --- tables ----------------------------------------------------------------------------------------


def test_acceptor_forms_and_tls(tmp_path: Path) -> None:
    cfg = parse_config(
        """
        [acceptors]
        http = "http://0.0.0.0:0"
        mqtt = false
        amqp = { url = "tls://[::1]:5671", tls = { cert = "c.pem", key = "k.pem" } }
        [acceptors.stomp]
        url = "tcp://localhost:61613"
        max_frame_size = "1MiB"
        max_body_size = 1000
        heartbeat_min = 0.25
        """,
        base_dir=tmp_path,
    )
    assert set(cfg.acceptors.enabled()) == {"stomp", "http", "amqp"}
    assert cfg.acceptors.http.endpoint.port == 0 and not cfg.acceptors.http.endpoint.is_loopback
    amqp = cfg.acceptors.amqp
    assert amqp.endpoint.host == "::1" and amqp.endpoint.is_loopback
    assert amqp.tls is not None and amqp.tls.cert == tmp_path / "c.pem"
    stomp = cfg.acceptors.stomp
    assert (stomp.max_frame_size, stomp.max_body_size) == (1024 * 1024, 1000)
    assert stomp.heartbeat_min == timedelta(milliseconds=250)
    assert cfg.warnings() == ["<string>: acceptors.http: listens on 0.0.0.0 with security disabled"]


def test_acceptor_consistency_errors() -> None:
    found = problems(
        """
        [acceptors]
        stomp = { url = "tcp://127.0.0.1:1", max_body_size = "2MiB", max_frame_size = "1MiB" }
        amqp = "tls://127.0.0.1:5671"
        http = { url = "https://127.0.0.1:1", tls = { cert = "c", key = "k", require_client_cert = true } }
        mqtt = 1883
        """
    )
    assert any("acceptors.stomp.max_body_size: must not exceed max_frame_size" in p for p in found)
    assert any("acceptors.amqp.tls: URL scheme 'tls' needs a tls table" in p for p in found)
    assert any("acceptors.http.tls.ca: require_client_cert needs a ca bundle" in p for p in found)
    assert any("acceptors.mqtt: expected a URL string, a table or false" in p for p in found)


def test_queues_and_topics() -> None:
    cfg = parse_config(
        """
        [[queues]]
        name = "orders"
        [[queues]]
        name = "orders.priority"
        address = "orders"
        routing = "ANYCAST"
        filter = "JMSPriority > 6"
        max_consumers = 1
        [[queues]]
        name = "blank-filter"
        filter = "  "
        [[topics]]
        name = "prices"
        subscriptions = [{ name = "eu", filter = "market = 'EU'", durable = false }]
        """
    )
    orders, prio, blank = cfg.queues[:3]
    assert (orders.address, orders.routing, orders.durable, orders.max_consumers) == (
        "orders",
        "anycast",
        True,
        -1,
    )
    assert (prio.address, prio.routing, prio.filter) == ("orders", "anycast", "JMSPriority > 6")
    assert blank.filter is None
    sub = cfg.topics[0].subscriptions[0]
    assert (sub.name, sub.filter, sub.durable) == ("eu", "market = 'EU'", False)


def test_address_settings_convert_to_engine_types() -> None:
    cfg = parse_config(
        """
        [address_settings."orders.#"]
        dead_letter_address = "orders.dlq"
        redelivery_delay = "500ms"
        max_redelivery_delay = 30
        redelivery_multiplier = 2
        expiry_delay = "off"
        max_size_bytes = "64MiB"
        page_size_bytes = 4096
        full_policy = "page"
        last_value_key = "symbol"
        [address_settings."prices"]
        expiry_delay = "1h"
        max_size_bytes = -1
        full_policy = "Drop"
        """
    )
    engine = cfg.engine_address_settings()
    assert set(engine) == {"#", "orders.#", "prices"}
    orders = engine["orders.#"]
    assert orders.redelivery_delay_ms == 500 and orders.max_redelivery_delay_ms == 30_000
    assert orders.redelivery_multiplier == 2.0 and orders.expiry_delay_ms == -1
    assert orders.max_size_bytes == 64 * 1024 * 1024 and orders.page_size_bytes == 4096
    assert orders.full_policy is FullPolicy.PAGE and orders.last_value_key == "symbol"
    assert orders.max_delivery_attempts is None  # inherited from "#" by the engine
    prices = engine["prices"]
    assert (prices.expiry_delay_ms, prices.max_size_bytes, prices.full_policy) == (
        3_600_000,
        -1,
        FullPolicy.DROP,
    )
    assert [q.name for q in cfg.queues] == ["DLQ", "ExpiryQueue", "orders.dlq"]


def test_declaring_catch_all_replaces_the_builtin_one() -> None:
    cfg = parse_config('[address_settings."#"]\nmax_delivery_attempts = -1\n')
    assert cfg.engine_address_settings() == {"#": AddressSettings(max_delivery_attempts=-1)}
    assert cfg.queues == []


def test_diverts_chain_and_remote_targets() -> None:
    cfg = parse_config(
        """
        [node]
        name = "site-a"
        [[diverts]]
        name = "a-to-b"
        address = "a"
        target = "b"
        [[diverts]]
        name = "b-to-c"
        address = "b"
        target = "c"
        exclusive = true
        transformer = "pkg.mod:func"
        [[diverts]]
        name = "remote"
        address = "orders.#"
        target = "site-b::orders"
        filter = "region = 'EU'"
        [[diverts]]
        name = "to-self"
        address = "x"
        target = "site-a::y"
        [[bridges]]
        name = "to-b"
        remote_node = "site-b"
        urls = ["tcp://127.0.0.1:61623"]
        """
    )
    assert [d.remote_node for d in cfg.diverts] == [None, None, "site-b", "site-a"]
    assert cfg.diverts[1].transformer == "pkg.mod:func" and cfg.diverts[1].exclusive
    assert cfg.warnings() == []


def test_bridges() -> None:
    cfg = parse_config(
        """
        [[queues]]
        name = "outbox"
        [[bridges]]
        name = "to-b"
        remote_node = "site-b"
        urls = ["tcp://b.example:61613", "wss://b.example/stomp", "http://b.example:8080/tunnel"]
        proxy = "http://me:p%40ss@proxy.example:3128"
        user = "bridge"
        password = "pw"
        retry_interval = "100ms"
        max_retry_interval = 1
        routing_timeout = "1h"
        foreign = false
        [[bridges]]
        name = "to-rabbit"
        remote_node = "rabbit"
        queue = "outbox"
        forwarding_address = "inbox"
        urls = ["tcp://127.0.0.1:61613"]
        foreign = "STOMP"
        """
    )
    b, rabbit = cfg.bridges
    assert b.queue == "sf.site-b" and b.foreign is None
    assert [(e.scheme, e.port, e.path) for e in b.endpoints()] == [
        ("tcp", 61613, ""),
        ("wss", 443, "/stomp"),
        ("http", 8080, "/tunnel"),
    ]
    proxy = b.proxy_endpoint()
    assert proxy is not None and (proxy.username, proxy.password, proxy.port) == (
        "me",
        "p@ss",
        3128,
    )
    assert b.retry_interval == timedelta(milliseconds=100) and b.max_retry_interval == timedelta(
        seconds=1
    )
    assert (b.retry_multiplier, b.reconnect_attempts, b.confirmation_window) == (2.0, -1, 1000)
    assert b.duplicate_detection and b.routing_timeout == timedelta(hours=1)
    assert (b.heartbeat, b.liveness_timeout, b.in_doubt_timeout) == (
        timedelta(seconds=10),
        timedelta(seconds=30),
        timedelta(minutes=5),
    )
    assert (rabbit.queue, rabbit.forwarding_address, rabbit.foreign) == ("outbox", "inbox", "stomp")


def test_bridge_consistency_errors() -> None:
    found = problems(
        """
        [[bridges]]
        name = "b"
        remote_node = "x"
        urls = ["http://127.0.0.1:1/tunnel"]
        retry_interval = "5s"
        max_retry_interval = "1s"
        heartbeat = "30s"
        password = "p"
        foreign = "stomp"
        """
    )
    text = "\n".join(found)
    assert "[[bridges]][0].max_retry_interval: must be at least retry_interval (5s)" in text
    assert "[[bridges]][0].liveness_timeout: must be longer than heartbeat (30s)" in text
    assert "[[bridges]][0].password: a password needs a user" in text
    assert "[[bridges]][0].urls[0]: a foreign broker cannot be reached over the HTTP tunnel" in text


def test_bridge_cross_checks() -> None:
    found = problems(
        """
        [node]
        name = "a"
        [[bridges]]
        name = "self"
        remote_node = "a"
        urls = ["tcp://127.0.0.1:1"]
        [[bridges]]
        name = "missing-queue"
        remote_node = "b"
        queue = "nope"
        urls = ["tcp://127.0.0.1:1"]
        """
    )
    assert any("[[bridges]][0].remote_node: 'a' is this node's own name" in p for p in found)
    assert any(
        "[[bridges]][1].queue: queue 'nope' is not declared in [[queues]]" in p for p in found
    )


def test_divert_to_unbridged_node_warns() -> None:
    cfg = parse_config('[[diverts]]\nname = "d"\naddress = "a"\ntarget = "far::a"\n')
    assert cfg.warnings() == [
        "<string>: [[diverts]][0].target: no [[bridges]] entry for node 'far': messages will wait in 'sf.far'"
    ]


# --- security -------------------------------------------------------------------------------------


def test_passwords_hash_and_verify() -> None:
    assert verify_password("s3cret", FAST_HASH)
    assert not verify_password("s3cret!", FAST_HASH)
    assert not verify_password("s3cret", "plain-text")
    assert parse_hash(FAST_HASH).iterations == 1000
    assert hash_password("x", iterations=1000) != hash_password("x", iterations=1000)  # salted
    assert hash_password("x", iterations=1000, salt=b"0" * 16) == hash_password(
        "x", iterations=1000, salt=b"0" * 16
    )
    for bad in ("pbkdf2_sha256$10$AA==$AA==", "md5$1000$AA==$AA==", "pbkdf2_sha256$1000$!!$AA=="):
        with pytest.raises(ValueError):
            parse_hash(bad)


def test_users_permissions_and_security_default() -> None:
    cfg = parse_config(
        f"""
        [[users]]
        name = "app"
        password_hash = "{FAST_HASH}"
        roles = ["producer"]
        [[users]]
        name = "dev"
        password = "plain"
        roles = ["consumer"]
        [[permissions]]
        match = "orders.#"
        send = ["producer"]
        consume = ["consumer"]
        """
    )
    assert cfg.security.enabled  # users declared, enabled not given
    app, dev = cfg.users
    assert app.check_password("s3cret") and not app.check_password("nope")
    assert dev.check_password("plain") and not dev.check_password("plain ")
    grants = cfg.permissions[0].grants()
    assert grants["send"] == ["producer"] and grants["manage"] == []
    assert cfg.warnings() == [
        "<string>: [[users]][1].password: plain-text password; prefer password_hash (python -m waystation.config.passwords)"
    ]
    off = parse_config(
        f'[security]\nenabled = false\n[[users]]\nname = "a"\npassword_hash = "{FAST_HASH}"\n'
    )
    assert not off.security.enabled


def test_security_errors() -> None:
    assert "[[users]][0]: give exactly one of password or password_hash" in one_problem(
        f'[[users]]\nname = "a"\npassword = "x"\npassword_hash = "{FAST_HASH}"\n'
    )
    assert "[[users]][0].password_hash: expected a hash of the form" in one_problem(
        '[[users]]\nname = "a"\npassword_hash = "$argon2id$v=19$..."\n'
    )
    assert "security.enabled: security is on but there are no [[users]]" in one_problem(
        "[security]\nenabled = true\n"
    )
    parse_config(
        "[security]\nenabled = true\nallow_anonymous = true\nanonymous_roles = ['guest']\n"
        "[[permissions]]\nmatch = '#'\nsend = ['guest']\n"
    )


# --- environment substitution ----------------------------------------------------------------------


def test_environment_substitution() -> None:
    text = """
    [node]
    name = "${NODE:fallback}"
    [acceptors]
    stomp = "tcp://127.0.0.1:${PORT}"
    [[users]]
    name = "a"
    password = "$${literal}"
    """
    cfg = parse_config(text, env={"PORT": "1234"})
    assert cfg.node.name == "fallback" and cfg.acceptors.stomp.endpoint.port == 1234
    assert cfg.users[0].password == "${literal}"
    found = problems(text, env={})
    assert found == [
        "site.toml: acceptors.stomp: environment variable 'PORT' is not set (write ${PORT:default} for a fallback)"
    ]


# --- units -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("500ms", 500),
        ("2s", 2000),
        ("5m", 300_000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
        ("1m30s", 90_000),
        ("1.5s", 1500),
        (2, 2000),
        (0.25, 250),
        (0, 0),
        ("0s", 0),
    ],
)
def test_parse_duration(text: object, ms: int) -> None:
    assert to_ms(parse_duration(text)) == ms


@pytest.mark.parametrize(
    "bad", ["5", "5 parsecs", "-1s", -1, True, "", "ms", float("nan"), "99999999d"]
)
def test_parse_duration_refuses(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("64MiB", 64 * 1024**2),
        ("10MB", 10_000_000),
        ("512KiB", 524_288),
        ("1GiB", 1024**3),
        ("100B", 100),
        (4096, 4096),
        ("1.5KiB", 1536),
        ("2 kb", 2000),
    ],
)
def test_parse_size(text: object, size: int) -> None:
    assert parse_size(text) == size


def test_parse_size_unlimited_and_refusals() -> None:
    assert (
        parse_size(-1, allow_unlimited=True) == -1 == parse_size("unlimited", allow_unlimited=True)
    )
    for bad in (-1, "-1", "12XB", "1.3B", True, 1.5):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_format_round_trips() -> None:
    for ms in (0, 1, 500, 1500, 2000, 90_000, 3_600_000, 86_400_000):
        assert to_ms(parse_duration(format_duration(timedelta(milliseconds=ms)))) == ms
    for n in (0, 1, 1000, 1024, 64 * 1024**2, 5 * 1024**4):
        assert parse_size(format_size(n)) == n
    assert format_size(-1) == "unlimited" and format_duration(timedelta(seconds=90)) == "90s"


# --- broken configs: the message names file, key and problem ---------------------------------------


def test_invalid_toml_gives_line() -> None:
    msg = one_problem('[node]\nname = "a"\n\n[acceptors\nstomp = 1\n')
    assert msg.startswith("site.toml line 4: invalid TOML: ")


def test_unknown_key_top_level_and_nested() -> None:
    assert (
        one_problem('acceptor = "x"\n')
        == "site.toml: unknown key 'acceptor' (did you mean 'acceptors'?) (line 1)"
    )
    assert (
        one_problem("[acceptors.stomp]\nstmp = 1\n")
        == "site.toml: acceptors.stomp: unknown key 'stmp' (line 2)"
    )
    assert one_problem(
        '[[diverts]]\nname = "d"\naddress = "a"\ntarget = "b"\nexlusive = true\n'
    ) == ("site.toml: [[diverts]][0]: unknown key 'exlusive' (did you mean 'exclusive'?) (line 5)")


def test_wrong_type() -> None:
    assert one_problem('[[queues]]\nname = "q"\ndurable = "yes"\n') == (
        "site.toml: [[queues]][0].durable: expected true or false, got 'yes' (line 3)"
    )
    assert "node.id_cache_size: expected an integer, got '10'" in one_problem(
        '[node]\nid_cache_size = "10"\n'
    )
    assert one_problem('[queues]\nname = "q"\n') == (
        "site.toml: queues: expected an array of tables, got a table (write [[queues]] for each entry) (line 1)"
    )


def test_bad_filter() -> None:
    msg = one_problem(
        '[[diverts]]\nname = "d"\naddress = "a"\ntarget = "b"\nfilter = "region == \'EU\'"\n'
    )
    assert msg.startswith(
        "site.toml: [[diverts]][0].filter: filter syntax error at position 8 near '='"
    )
    assert msg.endswith("(line 5)")


def test_divert_loops() -> None:
    msg = one_problem(
        '[[diverts]]\nname = "d1"\naddress = "a"\ntarget = "b"\n'
        '[[diverts]]\nname = "d2"\naddress = "b"\ntarget = "a"\n'
    )
    assert (
        msg
        == "site.toml: [[diverts]][0].target: divert loop: a -> b -> a via diverts d1, d2 (line 4)"
    )
    assert "divert loop: orders.# -> orders.copy via divert self" in one_problem(
        '[[diverts]]\nname = "self"\naddress = "orders.#"\ntarget = "orders.copy"\n'
    )
    assert "divert loop: sf.# -> far::x (queue sf.far) via divert sf" in one_problem(
        '[[diverts]]\nname = "sf"\naddress = "sf.#"\ntarget = "far::x"\n'
    )


def test_bad_urls() -> None:
    found = problems(
        """
        [acceptors]
        stomp = "tcp://127.0.0.1:99999"
        http = "ftp://127.0.0.1:21"
        amqp = "tcp://:5672"
        mqtt = "127.0.0.1:1883"
        [[bridges]]
        name = "b"
        remote_node = "x"
        urls = ["tcp://host"]
        proxy = "socks5://p:1"
        """
    )
    text = "\n".join(found)
    assert (
        "acceptors.stomp.url: URL 'tcp://127.0.0.1:99999' has an invalid port (expected 0-65535)"
        in text
    )
    assert "acceptors.http.url: URL scheme must be one of http, https, got 'ftp'" in text
    assert "acceptors.amqp.url: URL 'tcp://:5672' has no host" in text
    assert (
        "acceptors.mqtt.url: expected a URL like 'tcp://127.0.0.1:61613', got '127.0.0.1:1883'"
        in text
    )
    assert "[[bridges]][0].urls[0]: URL 'tcp://host' has no port" in text
    assert "[[bridges]][0].proxy: URL scheme must be one of http, got 'socks5'" in text
    assert "[[bridges]][0].urls: must not be empty" in one_problem(
        '[[bridges]]\nname = "b"\nremote_node = "x"\nurls = []\n'
    )


def test_bad_duration_and_size() -> None:
    found = problems(
        '[address_settings."orders.#"]\nredelivery_delay = "5 parsecs"\nmax_size_bytes = "12XB"\nfull_policy = "SPILL"\n',
        source="broken.toml",
    )
    assert found == [
        'broken.toml: address_settings."orders.#".redelivery_delay: expected a duration like "500ms", "2s", "5m", '
        "\"1h\" (units ms, s, m, h, d), got '5 parsecs' (line 2)",
        'broken.toml: address_settings."orders.#".max_size_bytes: expected a size like "64MiB", "512KiB", "10MB" '
        "or a number of bytes (-1 for unlimited), got '12XB' (line 3)",
        "broken.toml: address_settings.\"orders.#\".full_policy: expected one of BLOCK, FAIL, DROP, PAGE, got 'SPILL' (line 4)",
    ]


def test_bad_names_and_patterns() -> None:
    found = "\n".join(
        problems(
            '[node]\nname = "a::b"\n[address_settings."bad..x"]\n[[queues]]\nname = "q.*"\n'
            '[[diverts]]\nname = "d"\naddress = "a"\ntarget = "b"\ntransformer = "not a path"\n'
        )
    )
    assert "node.name: a node name must not contain '::', got 'a::b'" in found
    assert (
        "address_settings.\"bad..x\": invalid key: address name 'bad..x' has an empty word" in found
    )
    assert "[[queues]][0].name: 'q.*' contains a wildcard" in found
    assert (
        "[[diverts]][0].transformer: expected a Python path like 'package.module:function'" in found
    )


def test_duplicate_names() -> None:
    msg = one_problem(
        '[[diverts]]\nname = "d"\naddress = "a"\ntarget = "b"\n'
        '[[diverts]]\nname = "d"\naddress = "c"\ntarget = "e"\n'
    )
    assert (
        msg
        == "site.toml: [[diverts]][1].name: duplicate name 'd' (first used at [[diverts]][0]) (line 6)"
    )
    assert "[[queues]][1].name: duplicate name 'q'" in one_problem(
        '[[queues]]\nname = "q"\n[[queues]]\nname = "q"\n'
    )


def test_unknown_role() -> None:
    msg = one_problem(
        f'[[users]]\nname = "a"\npassword_hash = "{FAST_HASH}"\nroles = ["producer"]\n'
        '[[permissions]]\nmatch = "orders.#"\nsend = ["producer"]\nconsume = ["ghost"]\n'
    )
    assert msg == (
        "site.toml: [[permissions]][0].consume[0]: unknown role 'ghost': no user has it "
        "(known roles: producer) (line 8)"
    )


def test_missing_key_and_all_problems_at_once() -> None:
    found = problems(
        '[[queues]]\ndurable = true\n[[topics]]\nname = 1\n[node]\nlog_level = "LOUD"\n'
    )
    assert found == [
        "site.toml: node.log_level: expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got 'LOUD' (line 6)",
        "site.toml: [[queues]][0]: missing required key 'name' (line 1)",
        "site.toml: [[topics]][0].name: expected a string, got 1 (line 4)",
    ]


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope.toml: cannot read: No such file"):
        load_config(tmp_path / "nope.toml")
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match=r"bin.toml: not UTF-8 text"):
        load_config(tmp_path / "bin.toml")


# --- helpers ----------------------------------------------------------------------------------------


def test_format_loc_and_key_lines() -> None:
    assert format_loc(("diverts", 0, "filter")) == "[[diverts]][0].filter"
    assert (
        format_loc(("address_settings", "orders.#", "full_policy"))
        == 'address_settings."orders.#".full_policy'
    )
    assert (
        format_loc(("topics", 1, "subscriptions", 0, "name"))
        == "[[topics]][1].subscriptions[0].name"
    )
    lines = key_lines(
        '[node]\nname = "a"\n[[topics]]\nname = "t"\n[[topics]]\nname = "u"\n'
        '[[topics.subscriptions]]\nname = "s"\n[address_settings."x.#"]\nfull_policy = "PAGE"\n'
        'text = """\nfake = 1\n"""\n'
    )
    assert lines[("node", "name")] == 2
    assert lines[("topics", 1, "name")] == 6
    assert lines[("topics", 1, "subscriptions", 0, "name")] == 8
    assert lines[("address_settings", "x.#", "full_policy")] == 10
    assert ("address_settings", "x.#", "fake") not in lines


def test_node_config_passes_id_cache_size_to_the_engine():
    from waystation.config.loader import parse_config
    from waystation.gateway.core_config import engine_config

    assert engine_config(parse_config("[node]\nid_cache_size = 5\n")).duplicate_cache_size == 5
