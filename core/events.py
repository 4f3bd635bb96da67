"""Lifecycle events: one fixed, versioned record per hop of a message (DESIGN §8).

This module is the single definition of the record that the event log writes and the PySpark
pipeline reads: :data:`FIELDS` (names, types, meaning), :func:`arrow_schema` (the same as a
pyarrow schema, imported lazily so a node without the event log never loads pyarrow) and
:func:`spark_ddl`.  The engine calls :meth:`EventSink.emit` (for a message, through
:func:`emit_message`, which fills the fields every hop shares); with no sink configured the
engine holds ``None`` and pays one test per hop.  The writers (JSON Lines, Parquet; rolling,
off the event loop, bounded) live in :mod:`waystation.core.eventlog`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

    from waystation.core.message import Message

#: Bumped whenever a field is added, removed or changes meaning; readers select on it.
SCHEMA_VERSION = 1

# --- event names -------------------------------------------------------------------------------

ACCEPTED = "accepted"
ROUTED = "routed"
DIVERTED = "diverted"
STORED = "stored"
FORWARDED = "forwarded"
DELIVERED = "delivered"
ACKED = "acked"
RELEASED = "released"
REDELIVERED = "redelivered"
DEAD_LETTERED = "dead_lettered"
EXPIRED = "expired"
DROPPED = "dropped"

#: Every event name of schema version 1, in the order of a message's life.
EVENTS: tuple[str, ...] = (
    ACCEPTED,
    ROUTED,
    DIVERTED,
    STORED,
    FORWARDED,
    DELIVERED,
    ACKED,
    RELEASED,
    REDELIVERED,
    DEAD_LETTERED,
    EXPIRED,
    DROPPED,
)

#: Names written by older call sites, mapped to (event, reason if the record has none).
LEGACY_EVENTS: dict[str, tuple[str, str | None]] = {
    "dead-lettered": (DEAD_LETTERED, None),
    "duplicate": (DROPPED, "duplicate"),
}

# --- the record --------------------------------------------------------------------------------


class Field(NamedTuple):
    name: str
    type: str  # "int16" | "int32" | "int64" | "string" | "bool" (pyarrow type names)
    nullable: bool
    doc: str


#: The record, in column order.  JSON Lines objects carry every key (``null`` when unknown);
#: Parquet files have exactly this schema.
FIELDS: tuple[Field, ...] = (
    Field("v", "int16", False, "schema version (SCHEMA_VERSION)"),
    Field("ts_us", "int64", False, "event time, microseconds since the epoch (UTC)"),
    Field("node", "string", False, "the node that wrote it"),
    Field("event", "string", False, "one of EVENTS"),
    Field("trace_id", "string", True, "global id, 'origin node/origin message id'"),
    Field("message_id", "int64", False, "this node's message id"),
    Field("address", "string", False, "the address the message is on"),
    Field("queue", "string", True, "the queue, for queue-level events"),
    Field("protocol", "string", True, "protocol of the producing or consuming session"),
    Field("session", "string", True, "id of the producing or consuming session"),
    Field("size", "int64", False, "encoded message size in bytes"),
    Field("durable", "bool", True, "durable message"),
    Field("delivery_count", "int32", True, "deliveries so far, for delivery events"),
    Field("reason", "string", True, "dead-letter or drop reason"),
    Field("peer", "string", True, "the remote node of a forwarded message"),
)

FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)

#: Keys ``emit`` accepts in ``**extra``; any other key is ignored (not written anywhere).
EXTRA_FIELDS: frozenset[str] = frozenset(
    ("trace_id", "durable", "delivery_count", "protocol", "session", "reason", "peer")
)

_SPARK_TYPES = {
    "int16": "SMALLINT",
    "int32": "INT",
    "int64": "BIGINT",
    "string": "STRING",
    "bool": "BOOLEAN",
}


def arrow_schema() -> pa.Schema:
    """:data:`FIELDS` as a pyarrow schema (the Parquet files' schema), with the version in
    its metadata."""
    import pyarrow as pa

    types = {
        "int16": pa.int16(),
        "int32": pa.int32(),
        "int64": pa.int64(),
        "string": pa.string(),
        "bool": pa.bool_(),
    }
    return pa.schema(
        [pa.field(f.name, types[f.type], nullable=f.nullable) for f in FIELDS],
        metadata={"waystation.events.v": str(SCHEMA_VERSION)},
    )


def spark_ddl() -> str:
    """:data:`FIELDS` as a Spark DDL schema string, for reading JSON Lines with a fixed
    schema (``spark.read.schema(spark_ddl()).json(...)``)."""
    return ", ".join(
        f"{f.name} {_SPARK_TYPES[f.type]}{'' if f.nullable else ' NOT NULL'}" for f in FIELDS
    )


# --- the sink the engine calls -------------------------------------------------------------------


class EventSink(Protocol):
    def emit(
        self,
        kind: str,
        message_id: int,
        address: str,
        size: int,
        queue: str | None = None,
        **extra: object,
    ) -> None:
        """Record one event; never blocks and never raises.  ``extra`` keys are among
        :data:`EXTRA_FIELDS`; others are ignored."""
        ...

    def close(self) -> None:
        """Write what is buffered, fsync, and make the last file complete."""
        ...


class NullEventSink:
    """A sink that records nothing (for code that wants a sink object rather than ``None``)."""

    __slots__ = ()

    def emit(
        self,
        kind: str,
        message_id: int,
        address: str,
        size: int,
        queue: str | None = None,
        **extra: object,
    ) -> None:
        return None

    def close(self) -> None:
        return None


def emit_message(
    sink: EventSink | None,
    kind: str,
    msg: Message,
    queue: str | None = None,
    *,
    address: str | None = None,
    **extra: object,
) -> None:
    """One event about ``msg``: id, address (``address`` when it is elsewhere now), size,
    trace id and durability filled in, so no call site writes them again."""
    if sink is None:
        return
    if extra:
        sink.emit(
            kind,
            msg.id,
            msg.address if address is None else address,
            msg.size(),
            queue,
            trace_id=msg.trace_id,
            durable=msg.durable,
            **extra,
        )
    else:  # the common case, without merging an empty dict (this runs on the loop per hop)
        sink.emit(
            kind,
            msg.id,
            msg.address if address is None else address,
            msg.size(),
            queue,
            trace_id=msg.trace_id,
            durable=msg.durable,
        )
