"""The config file's shape: ``Config`` and its ``[node]`` table; other tables have modules.

Durations are ``timedelta`` (written ``"500ms"``, ``"2s"``, ``"5m"`` or a number of seconds),
sizes are ``int`` bytes (written ``"64MiB"``, ``"10MB"`` or a number of bytes).  Relative
paths are resolved against the config file's folder (the working directory for the embedded
default).  Treat a loaded ``Config`` as read-only; reloading builds a new one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, model_validator

from waystation.config import checks, defaults
from waystation.config.errors import Problems
from waystation.config.fields import (
    AddressPattern,
    ConfigPath,
    Duration,
    NodeName,
    RelativePath,
    Section,
    Size,
    choice,
)
from waystation.config.limits import LimitsConfig
from waystation.config.links import BridgeConfig
from waystation.config.listeners import (
    AcceptorConfig,
    AcceptorsConfig,
    AmqpAcceptor,
    HttpAcceptor,
    MqttAcceptor,
    StompAcceptor,
    TlsConfig,
)
from waystation.config.routes import Routes
from waystation.config.routing import (
    AddressSettingsConfig,
    DivertConfig,
    QueueConfig,
    SubscriptionConfig,
    TopicConfig,
)
from waystation.config.security import PERMISSIONS, PermissionConfig, SecurityConfig, UserConfig
from waystation.config.units import duration, size
from waystation.core.settings import AddressSettings

# --- [node] ----------------------------------------------------------------------------------


class JournalConfig(Section):
    file_size: Size = Field(default=size("10MiB"), description="Size of each journal file.")
    min_files: int = Field(default=2, ge=1, description="Journal files pre-created and kept.")
    sync: bool = Field(
        default=True, description="fsync before acknowledging durable writes (group-committed)."
    )
    compact_min_files: int = Field(
        default=10, ge=0, description="Compaction starts only when at least this many files exist."
    )
    compact_percentage: int = Field(
        default=30,
        ge=0,
        le=100,
        description="Compact when live data is below this % of the journal.",
    )


class EventLogConfig(Section):
    """Lifecycle event log (DESIGN §8, docs/events.md): written by a background thread,
    rolled by size and age, bounded in memory (events past ``buffer_limit`` are dropped)."""

    enabled: bool = Field(
        default=False, description="Write message lifecycle events for the pipeline."
    )
    path: RelativePath = Field(
        default=Path("events"),
        description="Folder for event files; relative paths are under node.data_dir.",
    )
    format: Annotated[Literal["jsonl", "parquet"], choice("jsonl", "parquet")] = Field(
        default="jsonl", description="File format: jsonl (JSON Lines) or parquet."
    )
    max_file_size: Size = Field(
        default=size("64MiB"),
        description="Roll to a new file past this size (at least 4KiB; approximate for parquet).",
    )
    roll_interval: Duration = Field(
        default=duration("1h"),
        description="Roll a file this long after its first event (at least 1s); parquet "
        "files are readable only once rolled.",
    )
    max_files: int = Field(
        default=24, ge=1, description="Completed files kept; older ones are deleted."
    )
    buffer_limit: int = Field(
        default=100_000,
        ge=1,
        le=10_000_000,
        description="Events waiting for the writer thread (about 330 bytes each); past it "
        "new events are dropped, counted and warned about.",
    )
    publish_address: str | None = Field(
        default=None,
        min_length=1,
        description="Also publish each event, live, as a JSON message to this address "
        "(non-durable; for a STOMP client or a Spark streaming query).  Off by default; works "
        "with the files on or off.  Events about this address are never published.",
    )

    @model_validator(mode="after")
    def _limits(self) -> EventLogConfig:
        problems: list[tuple[tuple[str | int, ...], str]] = []
        if self.max_file_size < 4096:
            problems.append((("max_file_size",), "must be at least 4KiB"))
        if self.roll_interval.total_seconds() < 1:
            problems.append((("roll_interval",), "must be at least 1s"))
        if problems:
            raise Problems(problems)
        return self


class NodeConfig(Section):
    name: NodeName = Field(
        default=defaults.DEFAULT_NODE_NAME,
        description="Routing node name, as in 'name::queue'; no '::'.",
    )
    data_dir: ConfigPath = Field(
        default=Path(defaults.DEFAULT_DATA_DIR), description="Durable store folder."
    )
    persistence: bool = Field(
        default=True, description="Keep durable messages on disk; false = memory only."
    )
    journal: JournalConfig = Field(default_factory=JournalConfig, description="Journal tuning.")
    event_log: EventLogConfig = Field(
        default_factory=EventLogConfig, description="Lifecycle event log."
    )
    id_cache_size: int = Field(
        default=20000, ge=0, description="Default duplicate-id cache size per address."
    )
    wildcard_routing: bool = Field(
        default=True, description="Treat '*' and '#' in addresses as wildcards."
    )
    message_expiry_scan_period: Duration = Field(
        default=duration("1s"), description="How often queues are scanned for expired messages."
    )
    log_level: Annotated[str, choice("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")] = Field(
        default="INFO", description="DEBUG, INFO, WARNING, ERROR or CRITICAL."
    )

    @property
    def event_log_dir(self) -> Path:
        """``event_log.path`` resolved against ``data_dir``."""
        return self.data_dir / self.event_log.path


# --- [logging] ------------------------------------------------------------------------------------

LogLevel = Annotated[str, choice("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")]


class LoggingConfig(Section):
    """How the node logs (gateway/logs.py); applied at start and again on a reload."""

    format: Annotated[Literal["text", "json"], choice("text", "json")] = Field(
        default="text",
        description="text (one readable line) or json (one object per line: time, level, "
        "logger, message and any extra fields), for a log shipper.",
    )
    level: LogLevel | None = Field(
        default=None,
        description="Level of every logger not named in levels; node.log_level if unset.",
    )
    levels: dict[str, LogLevel] = Field(
        default_factory=dict,
        description='Per-logger levels, e.g. { "waystation.bridge" = "debug" }; a logger\'s '
        "children follow it unless named too.",
    )


# --- the whole file ----------------------------------------------------------------------------


class Config(Section):
    """A node's whole configuration (one TOML file)."""

    node: NodeConfig = Field(default_factory=NodeConfig, description="This node.")
    acceptors: AcceptorsConfig = Field(default_factory=AcceptorsConfig, description="Listeners.")
    queues: list[QueueConfig] = Field(
        default_factory=list,
        description="Queues created at start.  Dead-letter and expiry addresses named in address_settings get a queue automatically.",
    )
    topics: list[TopicConfig] = Field(
        default_factory=list, description="Multicast addresses created at start."
    )
    address_settings: dict[AddressPattern, AddressSettingsConfig] = Field(
        default_factory=dict,
        description='Per-pattern settings.  A built-in "#" entry (DLQ, ExpiryQueue, 10 attempts) applies unless the file declares "#".',
    )
    diverts: list[DivertConfig] = Field(
        default_factory=list, description="Divert rules; loops are refused."
    )
    bridges: list[BridgeConfig] = Field(default_factory=list, description="Links to other nodes.")
    routes: Routes = Field(
        default_factory=list,
        description="Nodes reached through a bridged node: 'node::x' goes via that node.",
    )
    users: list[UserConfig] = Field(default_factory=list, description="Accounts.")
    permissions: list[PermissionConfig] = Field(
        default_factory=list, description="Grants per address pattern."
    )
    security: SecurityConfig = Field(
        default_factory=SecurityConfig, description="Security switches."
    )
    limits: LimitsConfig = Field(
        default_factory=LimitsConfig, description="What one client may hold in the core."
    )
    logging: LoggingConfig = Field(
        default_factory=LoggingConfig, description="Log format and levels."
    )

    _source: str | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _implicit(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        data.setdefault(
            "node", {}
        )  # validated with the context, so data_dir resolves against the file
        settings = data.get("address_settings", {})
        if isinstance(settings, dict) and defaults.CATCH_ALL_PATTERN not in settings:
            data["address_settings"] = {
                defaults.CATCH_ALL_PATTERN: dict(defaults.CATCH_ALL_SETTINGS),
                **settings,
            }
        security = data.get("security", {})
        if isinstance(security, dict) and "enabled" not in security and data.get("users"):
            data["security"] = {**security, "enabled": True}
        return data

    @model_validator(mode="after")
    def _cross_checks(self, info: ValidationInfo) -> Config:
        self._source = (info.context or {}).get("source")
        self.queues.extend(checks.implicit_queues(self))
        problems = checks.problems(self)
        if problems:
            raise Problems(problems)
        return self

    @property
    def source(self) -> str | None:
        """The file this config came from (None for the embedded default or a string)."""
        return self._source

    def engine_address_settings(self) -> dict[str, AddressSettings]:
        """``address_settings`` as the engine's types (durations in milliseconds)."""
        return {pattern: s.to_engine() for pattern, s in self.address_settings.items()}

    def warnings(self) -> list[str]:
        """Things that work but an operator should know about (plain passwords, open listeners)."""
        return checks.warnings(self)


__all__ = [
    "PERMISSIONS",
    "AcceptorConfig",
    "AcceptorsConfig",
    "AddressSettingsConfig",
    "AmqpAcceptor",
    "BridgeConfig",
    "Config",
    "DivertConfig",
    "EventLogConfig",
    "HttpAcceptor",
    "JournalConfig",
    "LoggingConfig",
    "MqttAcceptor",
    "NodeConfig",
    "PermissionConfig",
    "QueueConfig",
    "SecurityConfig",
    "StompAcceptor",
    "SubscriptionConfig",
    "TlsConfig",
    "TopicConfig",
    "UserConfig",
]
