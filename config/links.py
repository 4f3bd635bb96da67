"""``[[bridges]]``: links draining a local queue into a remote node (or a foreign STOMP or
AMQP 1.0 broker), and inbound links consuming a foreign broker's destination into a local
address."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from waystation.config import defaults
from waystation.config.errors import Loc, Problems
from waystation.config.fields import (
    BRIDGE_SCHEMES,
    AddressName,
    BridgeUrl,
    ConfigPath,
    DottedPath,
    Duration,
    Endpoint,
    FilterText,
    Name,
    NodeName,
    ProxyUrl,
    Section,
    choice,
    node_name,
    parse_url,
)
from waystation.config.units import duration, format_duration


class BridgeConfig(Section):
    name: Name = Field(description="Unique bridge name.")
    remote_node: NodeName = Field(description="Name of the node at the other end.")
    queue: AddressName = Field(
        description="Local source queue; defaults to the store-and-forward queue 'sf.<remote_node>'."
    )
    forwarding_address: AddressName | None = Field(
        default=None,
        description="Remote address (for a foreign broker its STOMP destination such as "
        "'/queue/x', or its AMQP address such as '/amq/queue/x' on RabbitMQ); unset keeps each "
        "message's address.  Inbound bridges: the local address.",
    )
    filter: FilterText = Field(
        default=None, description="Only matching messages are forwarded; others stay queued."
    )
    transformer: DottedPath | None = Field(
        default=None, description="'pkg.module:function' applied before forwarding."
    )
    urls: list[BridgeUrl] = Field(
        default_factory=list,
        description='Remote endpoints in failover order (none for direction = "accept"): '
        "tcp://, tls://, ws:// and wss:// (path default /stomp), http:// and https:// for the "
        "HTTP tunnel (path default /tunnel) speak STOMP; amqp:// and amqps:// (TLS) speak AMQP 1.0.",
    )
    proxy: ProxyUrl | None = Field(
        default=None,
        description="HTTP proxy for every url, http://user:pass@host:port: tcp/tls and wss/https "
        "go through CONNECT, ws:// is an HTTP request with an Upgrade, the tunnel plain requests.",
    )
    tls_ca: ConfigPath | None = Field(
        default=None,
        description="PEM CA bundle that verifies tls://, wss:// and https:// remotes "
        "(default: the system's CAs).",
    )
    tls_cert: ConfigPath | None = Field(
        default=None,
        description="PEM client certificate (chain) the bridge presents on TLS links; a remote "
        "that maps its subject to a user logs the bridge in by it (no user or password).",
    )
    tls_key: ConfigPath | None = Field(
        default=None, description="PEM private key of tls_cert (unset: it is in tls_cert)."
    )
    user: str | None = Field(default=None, description="User on the remote node.")
    password: str | None = Field(
        default=None,
        description='Password on the remote node ("${ENV_VAR}" keeps it out of the file).',
    )
    retry_interval: Duration = Field(
        default=duration("2s"), description="First wait between reconnect attempts."
    )
    retry_multiplier: float = Field(
        default=2.0, ge=1.0, description="Backoff factor per failed attempt."
    )
    max_retry_interval: Duration = Field(
        default=duration("60s"), description="Cap on the wait between attempts."
    )
    reconnect_attempts: int = Field(
        default=-1, ge=-1, description="Attempts before giving up; -1 = forever."
    )
    confirmation_window: int = Field(
        default=1000, ge=1, description="Messages sent but not yet confirmed."
    )
    duplicate_detection: bool = Field(
        default=True, description="Stamp duplicate ids so resends are dropped remotely."
    )
    heartbeat: Duration = Field(
        default=duration("10s"),
        description="Link heart-beat interval (0 = none); an AMQP link "
        "uses liveness_timeout as its idle-timeout instead.",
    )
    liveness_timeout: Duration = Field(
        default=duration("30s"), description="Silence after which the link is considered dead."
    )
    routing_timeout: Duration | None = Field(
        default=None, description="Dead-letter messages not forwarded within this time."
    )
    in_doubt_timeout: Duration = Field(
        default=duration("5m"),
        description="How long unconfirmed messages are retried after reconnects.",
    )
    foreign: Annotated[Literal["stomp", "amqp"], choice("stomp", "amqp")] | None = Field(
        default=None,
        description='"stomp" for a foreign STOMP broker (ActiveMQ, RabbitMQ), "amqp" for a '
        "foreign AMQP 1.0 broker (RabbitMQ's AMQP 1.0 plugin); false/unset for Waystation.",
    )
    direction: Annotated[
        Literal["outbound", "inbound", "both", "accept"],
        choice("outbound", "inbound", "both", "accept"),
    ] = Field(
        default="outbound",
        description='"outbound": drain `queue` into the remote.  "both": also take the '
        "remote's store-and-forward traffic for this node back over the same link (a site "
        'behind a proxy or NAT dials out; the remote has an "accept" entry).  "accept": the '
        "remote node dials in (no urls); `queue` is forwarded back over its link.  "
        '"inbound" (foreign only): consume `source` on the remote into forwarding_address.',
    )
    receive_as: str | None = Field(
        default=None,
        description='direction = "both": the local user (a [[users]] name) whose permissions '
        "apply to what the remote sends back, as they would to a bridge logging in here; "
        "unset: the node's own, unchecked (the remote is trusted like this node's own parts).",
    )
    source: str | None = Field(
        default=None,
        description='Inbound: the foreign destination to consume: STOMP "/queue/orders", '
        'AMQP (RabbitMQ) "/amq/queue/orders" or "/queue/orders".',
    )

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("foreign") is False:
            del data["foreign"]
        if "queue" not in data:
            # A bad or missing remote_node is reported once, there; "_" only fills the gap.
            try:
                data["queue"] = defaults.sf_queue(node_name(data.get("remote_node")))
            except ValueError:
                data["queue"] = "_"
        return data

    @model_validator(mode="after")
    def _consistent(self) -> BridgeConfig:
        problems: list[tuple[Loc, str]] = []
        if self.max_retry_interval < self.retry_interval:
            problems.append(
                (
                    ("max_retry_interval",),
                    f"must be at least retry_interval ({format_duration(self.retry_interval)})",
                )
            )
        if self.heartbeat and self.liveness_timeout <= self.heartbeat:
            problems.append(
                (
                    ("liveness_timeout",),
                    f"must be longer than heartbeat ({format_duration(self.heartbeat)})",
                )
            )
        if self.password is not None and self.user is None:
            problems.append((("password",), "a password needs a user"))
        if self.tls_key is not None and self.tls_cert is None:
            problems.append((("tls_key",), "a tls_key needs a tls_cert"))
        for i, ep in enumerate(self.endpoints()):
            if ep.scheme in ("tcp", "tls", "amqp", "amqps") and ep.path not in ("", "/"):
                problems.append(
                    (("urls", i), f"a {ep.scheme}:// url must not have a path, got {ep.path!r}")
                )
            if self.foreign and ep.scheme in ("http", "https"):
                problems.append(
                    (("urls", i), "a foreign broker cannot be reached over the HTTP tunnel")
                )
            amqp_url = ep.scheme in ("amqp", "amqps")
            if self.foreign == "amqp" and not amqp_url:
                problems.append(
                    (("urls", i), 'a foreign "amqp" bridge needs amqp:// or amqps:// urls')
                )
            if self.foreign == "stomp" and amqp_url:
                problems.append((("urls", i), 'a foreign "stomp" bridge cannot use an amqp url'))
        problems += self._direction_problems()
        if self.direction == "inbound":
            if not self.foreign:
                problems.append((("direction",), 'only a foreign bridge can be "inbound"'))
            if (
                not self.source
                or not self.source.strip()
                or any(c in self.source for c in "\r\n\0")
            ):
                problems.append(
                    (
                        ("source",),
                        "an inbound bridge needs a STOMP destination or AMQP address to consume",
                    )
                )
            if self.forwarding_address is None:
                problems.append(
                    (
                        ("forwarding_address",),
                        "an inbound bridge needs a local address to deliver to",
                    )
                )
        elif self.source is not None:
            problems.append((("source",), 'only an "inbound" bridge has a source'))
        if self.foreign == "amqp" and self.direction == "outbound" and not self.forwarding_address:
            problems.append(
                (
                    ("forwarding_address",),
                    'a foreign "amqp" bridge needs the broker\'s address, e.g. "/amq/queue/orders"',
                )
            )
        if problems:
            raise Problems(problems)
        return self

    def _direction_problems(self) -> list[tuple[Loc, str]]:
        """urls are needed except to accept; links that go both ways are Waystation's own,
        over STOMP (tcp, tls, ws, wss or the tunnel)."""
        problems: list[tuple[Loc, str]] = []
        if self.receive_as is not None and self.direction != "both":
            problems.append((("receive_as",), 'only a bridge going "both" ways receives'))
        if self.direction == "accept":
            for key in ("proxy", "tls_ca", "tls_cert", "user"):
                if getattr(self, key) is not None:
                    problems.append(((key,), f'an "accept" bridge dials nothing: remove {key}'))
            if self.urls:
                problems.append(
                    (("urls",), 'an "accept" bridge has no urls: the remote node dials in')
                )
            if self.foreign:
                problems.append(
                    (("foreign",), 'only a link between Waystation nodes can be "accept"')
                )
            return problems
        if not self.urls:
            problems.append((("urls",), 'must not be empty (only an "accept" bridge has no urls)'))
        if self.direction == "both":
            if self.foreign:
                problems.append(
                    (("direction",), 'only a link between Waystation nodes goes "both" ways')
                )
            for i, ep in enumerate(self.endpoints()):
                if ep.scheme in ("amqp", "amqps"):
                    problems.append(
                        (
                            ("urls", i),
                            'a link going "both" ways speaks STOMP: use tcp, tls, ws, wss, '
                            "http or https",
                        )
                    )
        return problems

    def endpoints(self) -> list[Endpoint]:
        return [parse_url(u, BRIDGE_SCHEMES, path_allowed=True) for u in self.urls]

    def proxy_endpoint(self) -> Endpoint | None:
        return (
            None
            if self.proxy is None
            else parse_url(self.proxy, ("http",), credentials_allowed=True)
        )
