"""What one bridge needs to run, in plain types (seconds as floats), built from ``[[bridges]]``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from waystation.bridges.backoff import RetryPolicy
from waystation.bridges.dial import Target

if TYPE_CHECKING:
    from waystation.config.links import BridgeConfig

SUPPORTED_SCHEMES = ("tcp", "tls", "ws", "wss", "http", "https", "amqp", "amqps")


@dataclass(slots=True)
class BridgeSpec:
    name: str
    remote_node: str
    queue: str
    targets: list[Target]
    forwarding_address: str | None = None
    filter: str | None = None
    transformer: str | None = None
    user: str | None = None
    password: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    window: int = 1000
    duplicate_detection: bool = True
    heartbeat: float = 10.0
    liveness_timeout: float = 30.0
    routing_timeout: float | None = None
    in_doubt_timeout: float | None = 300.0
    foreign: str | None = None  # "stomp"/"amqp": the remote is a foreign broker
    inbound: bool = False  # foreign only: consume ``source`` there into forwarding_address
    two_way: bool = False  # also take the remote's store-and-forward traffic back (STOMP)
    accept: bool = False  # the remote dials in; forward ``queue`` over its link
    receive_as: str | None = None  # two-way: the local user what comes back is sent as
    source: str | None = None
    # urls given in the config that this version cannot dial, with the reason
    skipped: list[str] = field(default_factory=list)


def _seconds(td: timedelta | None) -> float | None:
    return None if td is None else td.total_seconds()


def spec_from_config(cfg: BridgeConfig) -> BridgeSpec:
    """Translate one ``[[bridges]]`` entry; URLs with schemes not supported yet are listed in
    ``skipped`` (the bridge logs them and uses the rest)."""
    proxy = cfg.proxy_endpoint()
    targets: list[Target] = []
    skipped: list[str] = []
    for url, ep in zip(cfg.urls, cfg.endpoints(), strict=True):
        if ep.scheme not in SUPPORTED_SCHEMES:
            skipped.append(f"{url}: {ep.scheme}:// bridge transports are not supported yet")
            continue
        targets.append(
            Target(
                ep.host,
                ep.port,
                proxy.host if proxy else None,
                proxy.port if proxy else 0,
                proxy.username if proxy else None,
                proxy.password if proxy else None,
                scheme=ep.scheme,
                tls_ca=str(cfg.tls_ca) if cfg.tls_ca is not None else None,
                tls_cert=str(cfg.tls_cert) if cfg.tls_cert is not None else None,
                tls_key=str(cfg.tls_key) if cfg.tls_key is not None else None,
                path=ep.path,
            )
        )
    in_doubt = cfg.in_doubt_timeout.total_seconds()
    return BridgeSpec(
        name=cfg.name,
        remote_node=cfg.remote_node,
        queue=cfg.queue,
        targets=targets,
        forwarding_address=cfg.forwarding_address,
        filter=cfg.filter,
        transformer=cfg.transformer,
        user=cfg.user,
        password=cfg.password,
        retry=RetryPolicy(
            cfg.retry_interval.total_seconds(),
            cfg.retry_multiplier,
            cfg.max_retry_interval.total_seconds(),
            cfg.reconnect_attempts,
        ),
        window=cfg.confirmation_window,
        duplicate_detection=cfg.duplicate_detection,
        heartbeat=cfg.heartbeat.total_seconds(),
        liveness_timeout=cfg.liveness_timeout.total_seconds(),
        routing_timeout=_seconds(cfg.routing_timeout),
        in_doubt_timeout=in_doubt if in_doubt > 0 else None,
        skipped=skipped,
        foreign=cfg.foreign,
        inbound=cfg.direction == "inbound",
        two_way=cfg.direction == "both",
        accept=cfg.direction == "accept",
        receive_as=cfg.receive_as,
        source=cfg.source,
    )
