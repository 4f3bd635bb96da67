"""``[acceptors]``: the listeners of each protocol, each a URL, a table, or ``false``.

A protocol's table is its main listener; ``[[acceptors.<protocol>.extra]]`` tables add more
(``url`` and their own ``tls``) that share everything else in it (limits, timeouts, and for
HTTP the REST, WebSocket, tunnel and SockJS settings): e.g. STOMP on 61613 and STOMP over
TLS on 61614.  Two listeners on one port are refused here, not at bind time.
"""

from __future__ import annotations

import ipaddress
from typing import Any, ClassVar

from pydantic import BaseModel, Field, model_validator

from waystation.config import defaults
from waystation.config.errors import Problems, format_loc
from waystation.config.fields import (
    HTTP_SCHEMES,
    STREAM_SCHEMES,
    ConfigPath,
    Duration,
    Endpoint,
    HttpListenUrl,
    Section,
    Size,
    StreamListenUrl,
    parse_url,
)
from waystation.config.units import duration, size

ANY_HOST = frozenset(("0.0.0.0", "::", "*"))  # listens on every address

# -- limits every listener and session table has: one default, one wording ---------------
# (the fields stay on each table, so the TOML keys are where they were; docs/security.md)


def _connect_timeout(description: str) -> Any:
    return Field(default=duration("10s"), description=description)


def _max_connections(refusal: str, counted: str = "") -> Any:
    return Field(
        default=10000,
        ge=1,
        description=f"Most open connections on this listener{counted}; more get {refusal} "
        "naming max_connections and are closed.",
    )


def _max_connections_per_address() -> Any:
    return Field(
        default=1000,
        ge=0,
        description="Most open connections from one source address (0 = no limit).",
    )


def _max_sessions(what: str) -> Any:
    return Field(
        default=10000, ge=1, description=f"Most {what} at once; more are refused with 503."
    )


def _max_sessions_per_address(what: str, made: str) -> Any:
    return Field(
        default=100,
        ge=1,
        description=f"Most {what} {made} from one source address and open at once; more are "
        "refused with 503.",
    )


class TlsConfig(Section):
    cert: ConfigPath = Field(description="PEM certificate chain.")
    key: ConfigPath = Field(description="PEM private key.")
    ca: ConfigPath | None = Field(
        default=None, description="PEM CA bundle to verify client certificates."
    )
    require_client_cert: bool = Field(
        default=False, description="Mutual TLS: refuse clients without a certificate signed by ca."
    )

    @model_validator(mode="after")
    def _mutual_needs_ca(self) -> TlsConfig:
        if self.require_client_cert and self.ca is None:
            raise Problems([(("ca",), "require_client_cert needs a ca bundle")])
        return self


class ExtraListener(Section):
    """One more listener of a protocol: only where it listens and its TLS are its own."""

    url: str = Field(description="Where to listen (the protocol's schemes); port 0: any.")
    tls: TlsConfig | None = Field(
        default=None,
        description="TLS for this listener ({cert, key, ca?}); not inherited from the main one.",
    )


class AcceptorConfig(Section):
    """One protocol's listeners.  In TOML: a URL string, a table with ``url`` and more, or
    ``false``; ``extra`` adds listeners sharing the table's settings."""

    schemes: ClassVar[tuple[str, ...]] = STREAM_SCHEMES
    tls_schemes: ClassVar[tuple[str, ...]] = ("tls", "https")
    enabled: bool = Field(default=True, description="false turns the listener off.")
    url: str = Field(description="Where to listen; port 0 picks a free port.")
    tls: TlsConfig | None = Field(
        default=None, description="TLS for this listener: {cert, key, ca?}."
    )
    extra: list[ExtraListener] = Field(
        default_factory=list,
        description="More listeners of this protocol ([[acceptors.<name>.extra]]: url, tls), "
        "with this table's limits and settings.",
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"url": data}
        if isinstance(data, bool):
            return {"enabled": data}
        if not isinstance(data, dict | BaseModel):
            raise ValueError("expected a URL string, a table or false")
        return data

    @model_validator(mode="after")
    def _tls_scheme(self) -> AcceptorConfig:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if self.endpoint.scheme in self.tls_schemes and self.tls is None:
            problems.append(
                (("tls",), f"URL scheme {self.endpoint.scheme!r} needs a tls table {{cert, key}}")
            )
        for i, more in enumerate(self.extra):
            try:
                ep = parse_url(more.url, self.schemes, path_allowed=True)
            except ValueError as e:
                problems.append((("extra", i, "url"), str(e)))
                continue
            if ep.scheme in self.tls_schemes and more.tls is None:
                why = f"URL scheme {ep.scheme!r} needs a tls table {{cert, key}} of its own"
                problems.append((("extra", i, "tls"), why))
        if problems:
            raise Problems(problems)
        return self

    @property
    def endpoint(self) -> Endpoint:
        return parse_url(self.url, self.schemes, path_allowed=True)

    def listeners(self) -> list[tuple[Endpoint, TlsConfig | None]]:
        """Where to listen, with which TLS: the main listener first, then the extras."""
        out = [(self.endpoint, self.tls)]
        out += [(parse_url(m.url, self.schemes, path_allowed=True), m.tls) for m in self.extra]
        return out


class StompAcceptor(AcceptorConfig):
    url: StreamListenUrl = Field(
        default=defaults.STOMP_URL, description="tcp://host:port (or tls:// with a tls table)."
    )
    max_frame_size: Size = Field(
        default=size("16MiB"), description="Largest frame (headers and body) accepted."
    )
    max_body_size: Size = Field(default=size("10MiB"), description="Largest message body accepted.")
    max_headers: int = Field(default=1000, ge=1, description="Most headers in one frame.")
    max_header_length: Size = Field(
        default=size("10KiB"), description="Longest single header line."
    )
    heartbeat_send: Duration = Field(
        default=duration("10s"),
        description="Interval the server offers to send heart-beats (0 = never).",
    )
    heartbeat_receive: Duration = Field(
        default=duration("10s"),
        description="Interval the server asks clients to send heart-beats (0 = none).",
    )
    heartbeat_min: Duration = Field(
        default=duration("500ms"),
        description="Non-zero heart-beat intervals below this are raised to it.",
    )
    connection_ttl: Duration = Field(
        default=duration("60s"),
        description="Idle time after which a connection without heart-beats is closed.",
    )
    connect_timeout: Duration = _connect_timeout(
        "A connection that has not completed CONNECT (login included) within this is sent "
        "an ERROR naming connect_timeout and closed (0 = never)."
    )
    max_connections: int = _max_connections("an ERROR")
    max_connections_per_address: int = _max_connections_per_address()

    @model_validator(mode="after")
    def _body_fits(self) -> StompAcceptor:
        if self.max_body_size > self.max_frame_size:
            raise Problems([(("max_body_size",), "must not exceed max_frame_size")])
        return self


class RestConfig(Section):
    """REST messaging (HornetQ REST chapter): ``/queues/{name}`` and ``/topics/{name}``."""

    enabled: bool = Field(default=True, description="false removes /queues and /topics.")
    default_durable_send: bool = Field(
        default=False, description="Whether a POST without ?durable= is persisted."
    )
    dups_ok: bool = Field(
        default=True,
        description="false: a POST to msg-create answers 307 to a unique create URL "
        "(duplicate-safe posting).",
    )
    use_link_headers: bool = Field(
        default=False,
        description="true: links go in one standard Link header instead of msg-* headers.",
    )
    producer_time_to_live: Duration = Field(
        default=duration("0s"), description="Default time to live of posted messages (0 = none)."
    )
    consumer_session_timeout: Duration = Field(
        default=duration("300s"), description="Idle pull consumers older than this are removed."
    )
    session_timeout_task_interval: Duration = Field(
        default=duration("1s"), description="How often idle pull consumers are looked for."
    )
    max_accept_wait: Duration = Field(
        default=duration("60s"),
        description="Longest Accept-Wait honoured; keep it below proxies' idle timeouts.",
    )
    retry_after: Duration = Field(
        default=duration("5s"), description="Retry-After sent with 503 when no message waits."
    )
    max_body_size: Size = Field(default=size("10MiB"), description="Largest posted body.")
    push_store_dir: str = Field(
        default="rest-push",
        description="Folder for durable push registrations; relative paths are under "
        "node.data_dir.",
    )
    push_timeout: Duration = Field(
        default=duration("30s"),
        description="Longest one push (webhook) request may take before it counts as a "
        "connection failure and is retried.",
    )
    max_consumers: int = Field(
        default=10000,
        ge=1,
        description="Most pull consumers and push registrations at once; more are refused "
        "with 503.",
    )
    max_consumers_per_user: int = Field(
        default=500,
        ge=1,
        description="Most pull consumers and push registrations one user holds (security "
        "on; anonymous counts as one user); more are refused with 503.",
    )
    max_consumers_per_address: int = Field(
        default=500,
        ge=1,
        description="Most pull consumers and push registrations created from one source "
        "address and live at once; more are refused with 503.",
    )
    push_allow: list[str] = Field(
        default_factory=list,
        description="Networks (CIDR, e.g. 10.1.0.0/16 or 127.0.0.1/32) push targets may be "
        "in although they are loopback, private, link-local or otherwise not public; every "
        "address a target's host resolves to is checked, at registration and before each "
        "delivery.",
    )

    @model_validator(mode="after")
    def _networks(self) -> RestConfig:
        for i, net in enumerate(self.push_allow):
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError as e:
                raise Problems([(("push_allow", i), f"not a network: {e}")]) from None
        return self


class WebSocketConfig(Section):
    enabled: bool = Field(default=True, description="false refuses WebSocket upgrades.")
    stomp_path: str = Field(
        default="/stomp", description="Path for STOMP over WebSocket (v10/v11/v12.stomp)."
    )
    max_message_size: Size = Field(
        default=size("16MiB"), description="Largest WebSocket message accepted."
    )
    connect_timeout: Duration = _connect_timeout(
        "A WebSocket whose STOMP CONNECT has not completed within this gets an ERROR naming "
        "connect_timeout and is closed (0 = never)."
    )


class TunnelConfig(Section):
    """The HTTP tunnel: a stream protocol carried over plain HTTP/1.1 requests."""

    enabled: bool = Field(default=True, description="false removes the tunnel endpoint.")
    path: str = Field(default="/tunnel", description="Path prefix of the tunnel.")
    response_time: Duration = Field(
        default=duration("10s"),
        description="Longest a downstream poll is held before an empty answer; keep it "
        "below proxies' idle timeouts.",
    )
    session_timeout: Duration = Field(
        default=duration("60s"),
        description="A session with no request for this long is closed.",
    )
    max_request_size: Size = Field(
        default=size("1MiB"),
        description="Largest upstream POST body (413 beyond; the client then sends smaller ones).",
    )
    max_sessions: int = _max_sessions("tunnel sessions")
    max_sessions_per_address: int = _max_sessions_per_address("tunnel sessions", "opened")
    max_unauthenticated_sessions: int = Field(
        default=1000,
        ge=1,
        description="Most tunnel sessions not logged in yet (the rest of max_sessions is "
        "kept for logged-in ones); when full, a new one replaces the oldest of the address "
        "holding the most, else 503.",
    )
    connect_timeout: Duration = _connect_timeout(
        "A session whose protocol has not completed its login (STOMP CONNECT) within this "
        "is ended (0 = never); so are sessions that never send a byte."
    )

    @model_validator(mode="after")
    def _timing_positive(self) -> TunnelConfig:
        # open's answer carries both; the client refuses 0 (a tight poll loop, or sessions
        # that end at once), so the node must not start with it
        for key in ("response_time", "session_timeout"):
            if not getattr(self, key):
                raise Problems([((key,), "must be more than 0")])
        return self


class SockJsConfig(Section):
    enabled: bool = Field(default=True, description="false removes the SockJS endpoint.")
    stomp_path: str = Field(
        default="/sockjs/stomp",
        description="SockJS prefix for STOMP (WebSocket, xhr-streaming and polling).",
    )
    heartbeat: Duration = Field(
        default=duration("25s"), description="SockJS heart-beat frame interval (0 = none)."
    )
    disconnect_delay: Duration = Field(
        default=duration("5s"),
        description="A polling session with no open request for this long is closed.",
    )
    response_limit: Size = Field(
        default=size("128KiB"),
        description="A streaming response ends after this many bytes (the client opens "
        "the next), so browsers can free what they have read; also bounds one poll answer.",
    )
    client_url: str = Field(
        default="",
        description="Where /iframe.html loads sockjs-client from (only browsers without "
        "CORS use it); empty: /iframe.html is not served.",
    )
    max_send_size: Size = Field(
        default=size("1MiB"),
        description="Largest xhr_send / jsonp_send body (413 beyond); bigger STOMP frames "
        "need the WebSocket transport.",
    )
    max_sessions: int = _max_sessions("HTTP (polling and streaming) SockJS sessions")
    max_sessions_per_address: int = _max_sessions_per_address("HTTP SockJS sessions", "created")
    max_unauthenticated_sessions: int = Field(
        default=1000,
        ge=1,
        description="Most HTTP SockJS sessions whose STOMP CONNECT has not succeeded yet "
        "(the rest of max_sessions is kept for logged-in ones); when full, a new one "
        "replaces the oldest of the address holding the most, else 503.",
    )
    connect_timeout: Duration = _connect_timeout(
        "A session whose STOMP CONNECT has not completed within this is closed (0 = never)."
    )


class AdminConfig(Section):
    """``[acceptors.http.admin]``: which names the admin API and console answer to (they
    refuse any other ``Host``, and a browser request from any other ``Origin``)."""

    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="More Host names the admin API and console answer to besides the "
        "listener's own (its address and port; localhost, 127.0.0.1 and [::1] on loopback; "
        "the machine's host name when listening on every address): 'name' (any port) or "
        "'name:port', e.g. a DNS alias, a load balancer's or a proxy's name.",
    )
    allowed_origins: list[str] = Field(
        default_factory=list,
        description="More browser origins ('https://ops.example.com[:port]') allowed to "
        "call the admin API besides the listener's own (a console behind a proxy).",
    )

    @model_validator(mode="after")
    def _names(self) -> AdminConfig:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for i, h in enumerate(self.allowed_hosts):
            if not h or any(c in h for c in "/@ \t") or h.count(":") > 1 and "]" not in h:
                problems.append((("allowed_hosts", i), f"not a host or host:port: {h!r}"))
        for i, o in enumerate(self.allowed_origins):
            scheme, sep, rest = o.partition("://")
            if scheme not in ("http", "https") or not sep or not rest or "/" in rest:
                why = f"not an origin (http[s]://host[:port], no path): {o!r}"
                problems.append((("allowed_origins", i), why))
        if problems:
            raise Problems(problems)
        return self


class MetricsConfig(Section):
    """``[acceptors.http.metrics]``: who may scrape ``/metrics`` and how many series it has."""

    login: bool = Field(
        default=True,
        description="With security on, /metrics needs HTTP Basic of a user holding manage "
        "on '#' or one of `roles` (false: open to whoever reaches the port). With security "
        "off there are no users and it is open.",
    )
    roles: list[str] = Field(
        default_factory=list,
        description="Roles that may scrape /metrics without manage on '#' (e.g. "
        "['monitoring'] for Prometheus's user).",
    )
    max_queue_series: int = Field(
        default=500,
        ge=0,
        description="Queues with series of their own (the deepest first); the rest are "
        'summed in one series labelled queue="_other".',
    )
    max_address_series: int = Field(
        default=500,
        ge=0,
        description="Addresses with a memory series of their own (the most bytes first); "
        'the rest are summed in address="_other".',
    )


class HttpAcceptor(AcceptorConfig):
    schemes: ClassVar[tuple[str, ...]] = HTTP_SCHEMES
    url: HttpListenUrl = Field(
        default=defaults.HTTP_URL,
        description="http://host:port: REST, WebSocket, tunnel and SockJS.",
    )
    header_timeout: Duration = Field(
        default=duration("10s"),
        description="A connection must complete a request's headers within this of "
        "connecting or of starting to send them; else 408 and closed (slowloris).",
    )
    keepalive_timeout: Duration = Field(
        default=duration("60s"),
        description="An idle keep-alive connection is closed after this.",
    )
    max_connections: int = _max_connections("503", " (WebSockets and held polls included)")
    max_connections_per_address: int = _max_connections_per_address()
    rest: RestConfig = Field(default_factory=RestConfig, description="REST messaging.")
    websocket: WebSocketConfig = Field(
        default_factory=WebSocketConfig, description="STOMP over WebSocket."
    )
    tunnel: TunnelConfig = Field(default_factory=TunnelConfig, description="HTTP tunnel.")
    sockjs: SockJsConfig = Field(
        default_factory=SockJsConfig, description="SockJS endpoint for browsers."
    )
    admin: AdminConfig = Field(
        default_factory=AdminConfig, description="Admin API and web console."
    )
    metrics: MetricsConfig = Field(
        default_factory=MetricsConfig, description="GET /metrics (Prometheus)."
    )


class AmqpAcceptor(AcceptorConfig):
    url: StreamListenUrl = Field(
        default=defaults.AMQP_URL,
        description="tcp://host:port for AMQP 1.0 (or tls:// with a tls table).",
    )
    max_frame_size: Size = Field(
        default=size("1MiB"),
        description="Largest AMQP frame the node accepts (offered in open); bigger messages "
        "come in several transfer frames.",
    )
    max_message_size: Size = Field(
        default=size("10MiB"),
        description="Largest message (all its sections) accepted; a bigger one is refused with "
        "amqp:link:message-size-exceeded and its link detached.",
    )
    idle_timeout: Duration = Field(
        default=duration("60s"),
        description="A connection silent for this long is closed (the peer is asked to send "
        "empty frames at half of it; 0 = never).",
    )
    max_sessions: int = Field(
        default=32, ge=1, le=65536, description="Most AMQP sessions (channels) on one connection."
    )
    credit_window: int = Field(
        default=5000,
        ge=1,
        description="Link credit the node grants a producer link at a time (refilled as "
        "messages are settled; withheld while the address is full under BLOCK).",
    )
    connect_timeout: Duration = _connect_timeout(
        "A connection that has not completed SASL and open within this is closed with an "
        "error naming connect_timeout (0 = never)."
    )
    max_connections: int = _max_connections("a close")
    max_connections_per_address: int = _max_connections_per_address()


class MqttAcceptor(AcceptorConfig):
    url: StreamListenUrl = Field(
        default=defaults.MQTT_URL,
        description="tcp://host:port for MQTT 3.1.1 and 5 (or tls:// with a tls table).",
    )
    max_packet_size: Size = Field(
        default=size("10MiB"),
        description="Largest MQTT packet accepted (told to v5 clients in CONNACK); a bigger "
        "one closes the connection (v5: reason 0x95).",
    )
    receive_maximum: int = Field(
        default=1000,
        ge=1,
        le=65535,
        description="QoS 1 and 2 publishes a client may have unacknowledged towards the node "
        "(told to v5 clients in CONNACK).",
    )
    max_inflight: int = Field(
        default=100,
        ge=1,
        le=65535,
        description="QoS 1 and 2 messages the node sends a client before it waits for their "
        "acknowledgements (a v5 client's smaller receive maximum wins).",
    )
    max_keepalive: Duration = Field(
        default=duration("65535s"),
        description="Longest keep-alive a client may ask for; v5 clients asking for more are "
        "told this one (server keep alive), 3.1.1 clients are refused.",
    )
    max_session_expiry: Duration = Field(
        default=duration("7d"),
        description="Longest time a persistent session is kept while its client is away "
        "(v5 session expiry interval; 3.1.1 persistent sessions get this).",
    )
    max_topic_aliases: int = Field(
        default=100, ge=0, le=65535, description="Topic aliases a v5 client may set up (0 = none)."
    )
    send_topic_aliases: bool = Field(
        default=True,
        description="Alias the topics the node sends to v5 clients that accept aliases.",
    )
    max_client_id: int = Field(
        default=256, ge=23, le=65535, description="Longest client id accepted (bytes)."
    )
    max_subscriptions: int = Field(
        default=100, ge=1, description="Topic filters one client may subscribe to."
    )
    max_qos: int = Field(
        default=2, ge=0, le=2, description="Highest QoS granted (told to v5 clients in CONNACK)."
    )
    connect_timeout: Duration = _connect_timeout(
        "A connection that has not sent CONNECT (and passed login) within this is closed "
        "(0 = never)."
    )
    max_connections: int = _max_connections("a CONNACK 'server unavailable'")
    max_connections_per_address: int = _max_connections_per_address()


class AcceptorsConfig(Section):
    stomp: StompAcceptor = Field(
        default_factory=StompAcceptor, description="STOMP 1.0-1.2 listener."
    )
    http: HttpAcceptor = Field(default_factory=HttpAcceptor, description="HTTP listener.")
    amqp: AmqpAcceptor = Field(default_factory=AmqpAcceptor, description="AMQP 1.0 listener.")
    mqtt: MqttAcceptor = Field(default_factory=MqttAcceptor, description="MQTT listener.")

    def enabled(self) -> dict[str, AcceptorConfig]:
        """The listeners to open, by protocol name."""
        all_: dict[str, AcceptorConfig] = {
            "stomp": self.stomp,
            "http": self.http,
            "amqp": self.amqp,
            "mqtt": self.mqtt,
        }
        return {k: v for k, v in all_.items() if v.enabled}

    @model_validator(mode="after")
    def _distinct_ports(self) -> AcceptorsConfig:
        """Two enabled listeners may not share a port (on one host, or where either listens
        on every address); port 0 is a free port each time."""
        seen: list[tuple[str, int, tuple[str | int, ...]]] = []
        problems: list[tuple[tuple[str | int, ...], str]] = []
        for name, acceptor in self.enabled().items():
            for i, (ep, _) in enumerate(acceptor.listeners()):
                loc: tuple[str | int, ...] = (
                    (name, "url") if i == 0 else (name, "extra", i - 1, "url")
                )
                if ep.port == 0:
                    continue
                for host, port, other in seen:
                    if port == ep.port and (host == ep.host or ANY_HOST & {host, ep.host}):
                        where = format_loc(("acceptors", *other))
                        problems.append((loc, f"port {ep.port} is already used by {where}"))
                        break
                seen.append((ep.host, ep.port, loc))
        if problems:
            raise Problems(problems)
        return self


__all__ = [
    "AcceptorConfig",
    "AcceptorsConfig",
    "AdminConfig",
    "AmqpAcceptor",
    "ExtraListener",
    "HttpAcceptor",
    "MetricsConfig",
    "MqttAcceptor",
    "RestConfig",
    "SockJsConfig",
    "StompAcceptor",
    "TlsConfig",
    "TunnelConfig",
    "WebSocketConfig",
]
