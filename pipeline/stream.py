"""``spark.readStream.format("waystation")`` / ``writeStream.format("waystation")``: a queue
as a Spark streaming source whose acknowledgements follow Spark's commits, and a streaming
sink whose micro-batch commits only after the node confirmed every message.

Read (exactly once into a checkpointed sink).  The driver's source process holds one STOMP
``client-individual`` subscription (:mod:`.stomp_client`).  ``latestOffset`` takes what has
arrived into a new batch; the offset names the batch (``seq``) and the node's ``message-id``
of every message in it.  The rows travel to the task inside the partition; nothing is
acknowledged until Spark says the batch is committed: it asks for the next offset from the
batch's end (which it does only once the batch is in its commit log) or calls
``commit(end)`` (not with ``asyncProgressTrackingEnabled``, which writes that log late).  A
killed driver drops the connection, so the node gives every unacknowledged message back to
the queue.  On restart Spark either replays the last planned batch (``partitions(start,
end)`` for a batch this process never saw: its messages are collected again by id) or asks
for a new one from the last committed offset; in both cases the redelivered messages named
by ``start`` (committed into the sink, not yet acknowledged) are acknowledged and dropped.
Message ids are the node's, stable across redelivery.

Write.  Each task opens a connection and SENDs every row with a receipt; ``write`` returns
only once every receipt came, so the micro-batch commits after the node confirmed every
message (durable ones on disk).  Rows: ``body`` (binary or string), optional ``destination``
(``/queue/x``, ``/topic/x``; default the ``queue`` option), ``content_type``, ``properties``
(a struct or a map; a value keeps its Spark type: boolean, int/short/byte -> int, long, float,
double, binary, timestamp, string) and ``types`` (a map ``name -> type`` naming the type of
text values, as the reader gives them, so a read-and-write copy keeps every type).

Exactly once: every message carries a duplicate id (``_WS_DUPL_ID``) that a re-run of the
same micro-batch reproduces: ``spark/<query id>/<batch id>/<partition>/<row index>`` (the
query id is kept in the checkpoint), or the row's own ``duplicate_id`` column when it has
one.  A batch re-run after a crash or a retried task sends the same ids again and the node's
duplicate detection drops what it already has (and still confirms it), so each row is one
message.  That holds while the re-run produces a partition's rows in the same order (a
replayable source without a non-deterministic shuffle: files, this source, Kafka) and while
the first attempt's ids are still in the address's duplicate cache (``duplicate_cache_size``,
20,000 ids per address by default).  A row's own ``_WS_DUPL_ID`` property travels on as
``_WS_SRC_DUPL_ID``, as a bridge does.

Options: ``host`` (127.0.0.1), ``port`` (the STOMP acceptor), ``queue``, ``user``,
``password``; read: ``maxBatch`` (messages per micro-batch, 10000; the
node's ``[limits] max_window``, 1000 by default, caps it), ``wait`` (seconds to wait
for a first message, 0.2), ``linger`` (a batch closes after this long without a new message,
0.05), ``replayTimeout`` (seconds to collect a replayed batch, 60);
write: ``durable`` (true).
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pyspark import TaskContext
from pyspark.sql import types as T
from pyspark.sql.datasource import (
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)

from waystation.core.message import (
    DUPLICATE_ID,
    Float32,
    Int32,
    Timestamp,
    type_name,
    typed_text,
)
from waystation.gateway.stomp.mapping import (
    CONTROL_HEADERS,
    OWN_HEADERS,
    SOURCE_DUPLICATE_ID,
    TYPES_HEADER,
    parse_types,
)
from waystation.pipeline.stomp_client import StompClient, StompFailure
from waystation.wire.stomp import Frame

STREAM_SCHEMA = (
    "message_id STRING, destination STRING, body BINARY, content_type STRING, "
    "properties MAP<STRING, STRING>, types MAP<STRING, STRING>, redelivered BOOLEAN"
)
#: MESSAGE headers that are not application properties
_NOT_PROPERTIES = CONTROL_HEADERS | OWN_HEADERS | {"content-type"}

Row = tuple[Any, ...]


def _connect(options: dict[str, str]) -> StompClient:
    if not options.get("port"):
        raise ValueError("option 'port' (the node's STOMP port) is required")
    return StompClient(
        options.get("host", "127.0.0.1"),
        int(options["port"]),
        login=options.get("user", ""),
        passcode=options.get("password", ""),
        timeout=float(options.get("timeout", "30")),
    )


def _destination(options: dict[str, str]) -> str:
    q = options.get("queue")
    if not q:
        raise ValueError("option 'queue' is required")
    return q if q.startswith("/") else f"/queue/{q}"


def frame_row(frame: Frame) -> Row:
    """A MESSAGE frame as a row of :data:`STREAM_SCHEMA` (property values as text, their
    types in ``types`` when not string)."""
    h = frame.headers
    props = {k: v for k, v in h.items() if k not in _NOT_PROPERTIES}
    types = dict(parse_types(h[TYPES_HEADER])) if TYPES_HEADER in h else {}
    return (
        h["message-id"],
        h.get("destination"),
        frame.body,
        h.get("content-type"),
        props,
        {k: t for k, t in types.items() if k in props},
        h.get("redelivered") == "true",
    )


@dataclass
class Batch(InputPartition):
    """One micro-batch's rows, carried from the driver to the task that emits them."""

    rows: list[Row] = field(default_factory=list)


class QueueStreamReader(DataSourceStreamReader):
    """Offsets ``{"seq": n, "ids": [message ids of batch n]}``; see the module doc."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.max_batch = int(options.get("maxBatch", "10000"))
        self.wait = float(options.get("wait", "0.2"))
        self.linger = float(options.get("linger", "0.05"))
        self.replay_timeout = float(options.get("replayTimeout", "60"))
        self.client: StompClient | None = None
        self.pending: dict[str, tuple[str, Row]] = {}  # id -> (ack id, row), arrival order
        self.planned: dict[int, list[tuple[str, str, Row]]] = {}  # seq -> (id, ack id, row)
        self.skip: set[str] = set()  # committed into the sink before a restart

    # -- the connection ------------------------------------------------------------------
    def _client(self) -> StompClient:
        if self.client is None:
            self.client = _connect(self.options)
            # a batch is at most what the node lets one consumer hold unacknowledged: its
            # [limits] max_window (1000 by default) caps maxBatch
            self.client.subscribe(_destination(self.options), "spark", self.max_batch)
        return self.client

    def _take(self, wait: float, want: int) -> None:
        """Move arrived messages into ``pending`` (waiting up to ``wait`` for the first),
        acknowledging and dropping those already in the sink."""
        c = self._client()
        got = 0
        stale: list[str] = []
        frame = c.receive(wait)
        while True:
            if frame is None:
                if not stale:
                    break
                c.ack(stale)  # they held the window: acknowledged, more may come now
                stale = []
                frame = c.receive(self.linger)
                continue
            mid, ack_id = frame.headers["message-id"], frame.headers["ack"]
            if mid in self.skip:
                stale.append(ack_id)
            elif mid not in self.pending:
                self.pending[mid] = (ack_id, frame_row(frame))
                got += 1
            if got >= want:
                break
            frame = c.receive(self.linger)  # while messages keep coming: fewer, fuller batches
        c.ack(stale)

    # -- Spark's calls (driver) ------------------------------------------------------------
    def initialOffset(self) -> dict:
        return {"seq": 0, "ids": []}

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:
        if start is None:  # pyspark < 4.2 does not pass it: continue from the last plan
            seq = max(self.planned, default=0)
            start = {"seq": seq, "ids": [m[0] for m in self.planned.get(seq, [])]}
        nxt = start["seq"] + 1
        if nxt in self.planned:  # asked again before the batch ran
            return {"seq": nxt, "ids": [m[0] for m in self.planned[nxt]]}
        if start["seq"] not in self.planned:
            self.skip.update(start["ids"])  # a restart: that batch is in the sink
        # Spark asks from ``start`` only once that batch is in its commit log; its own
        # ``commit`` comes later (when a next batch is planned), so an idle query would
        # otherwise hold its last batch unacknowledged
        self._ack_through(start["seq"])
        want = self.max_batch - len(self.pending)
        if want > 0:
            self._take(self.wait if not self.pending else 0, want)
        if not self.pending:
            return start
        ids = list(self.pending)[: self.max_batch]
        self.planned[nxt] = [(i, *self.pending.pop(i)) for i in ids]
        return {"seq": nxt, "ids": ids}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        seq = end["seq"]
        if seq == start["seq"]:
            return []
        if seq not in self.planned:
            self._replay(start, end)
        return [Batch([m[2] for m in self.planned[seq]])]

    def _replay(self, start: dict, end: dict) -> None:
        """Collect a batch planned before a restart: its messages come back unacknowledged."""
        self.skip.update(start["ids"])
        want = end["ids"]
        deadline = time.monotonic() + self.replay_timeout
        while any(i not in self.pending for i in want):
            if time.monotonic() > deadline:
                missing = [i for i in want if i not in self.pending]
                raise RuntimeError(
                    f"batch {end['seq']}: {len(missing)} message(s) planned before the "
                    f"restart did not come back (first: {missing[0]}); expired or "
                    "dead-lettered meanwhile?"
                )
            self._take(0.5, 1 << 30)
        self.planned[end["seq"]] = [(i, *self.pending.pop(i)) for i in want]

    def read(self, partition: InputPartition) -> Iterator[Row]:
        assert isinstance(partition, Batch)
        yield from partition.rows

    def commit(self, end: dict) -> None:
        self._ack_through(end["seq"])

    def _ack_through(self, seq: int) -> None:
        done = sorted(s for s in self.planned if s <= seq)
        if done:
            self._client().ack([m[1] for s in done for m in self.planned[s]])
            for s in done:
                del self.planned[s]

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()  # whatever was not committed goes back to the queue
            self.client = None


# -- the sink ----------------------------------------------------------------------------------
_SPARK_TYPES: dict[type, str] = {
    T.BooleanType: "bool",
    T.ByteType: "int",
    T.ShortType: "int",
    T.IntegerType: "int",
    T.LongType: "long",
    T.FloatType: "float",
    T.DoubleType: "double",
    T.StringType: "string",
    T.BinaryType: "binary",
    T.TimestampType: "timestamp",
    T.TimestampNTZType: "timestamp",
}


def property_types(schema: T.StructType) -> dict[str, str]:
    """The declared property type per name of the ``properties`` column (``*``: every key of
    a map); empty when the column is missing or its types say nothing."""
    if "properties" not in schema.fieldNames():
        return {}
    col = schema["properties"].dataType
    if isinstance(col, T.StructType):
        return {f.name: t for f in col.fields if (t := _SPARK_TYPES.get(type(f.dataType)))}
    if isinstance(col, T.MapType) and (t := _SPARK_TYPES.get(type(col.valueType))):
        return {"*": t}
    return {}


def _typed_headers(
    props: dict[str, Any], types: dict[str, str], declared: dict[str, str]
) -> dict[str, str]:
    """Property headers plus ``ws-types`` for the values that are not strings."""
    out: dict[str, str] = {}
    named: list[str] = []
    for k, v in props.items():
        k = str(k)
        t = types.get(k) or declared.get(k) or declared.get("*")
        if t is not None and (t == "string" or k in types):  # text with its type
            text = "" if v is None else str(v)
        elif v is None:
            continue  # a struct's missing field: no property
        else:
            v = _property(v, t)
            t, text = type_name(v), typed_text(v)
        out[k] = text
        if t != "string":
            named.append(f"{_esc(k)}={t}")
    if named:
        out[TYPES_HEADER] = ",".join(named)
    return out


def _esc(name: str) -> str:
    return name.replace("%", "%25").replace(",", "%2C").replace("=", "%3D")


def _property(v: Any, declared: str | None) -> Any:
    """A Spark value as a message property value of the ``declared`` type (datetime ->
    timestamp, bytearray -> bytes; undeclared, a Python int is an int when it fits 32 bits)."""
    if declared == "int":
        return Int32(v)
    if declared == "long":
        return int(v)
    if declared == "float":
        return Float32(v)
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.UTC)
        return Timestamp(int(v.timestamp() * 1000))
    if isinstance(v, bytearray):
        return bytes(v)
    if isinstance(v, int) and not isinstance(v, bool | Int32 | Timestamp):
        return Int32(v) if -(2**31) <= v < 2**31 else v
    if isinstance(v, float) and not isinstance(v, Float32):
        return v
    if isinstance(v, uuid.UUID | str | bytes | bool) or v is None:
        return v
    return str(v)


def row_frame(
    row: Any,
    default_destination: str,
    durable: bool,
    declared: dict[str, str],
    duplicate_id: str | None = None,
) -> tuple[dict[str, str], bytes]:
    """One row as a SEND frame's headers and body; ``duplicate_id`` (unless the row has its
    own ``duplicate_id`` column) becomes ``_WS_DUPL_ID``."""
    d = row.asDict() if hasattr(row, "asDict") else dict(row)
    body = d.get("body")
    if isinstance(body, str):
        body = body.encode()
    props = d.get("properties") or {}
    props = props.asDict() if hasattr(props, "asDict") else dict(props)
    types = dict(d.get("types") or {})
    if duplicate_id is not None and DUPLICATE_ID in props:  # the row's own travels on
        props[SOURCE_DUPLICATE_ID] = props.pop(DUPLICATE_ID)
        if DUPLICATE_ID in types:
            types[SOURCE_DUPLICATE_ID] = types.pop(DUPLICATE_ID)
    headers = _typed_headers(props, types, declared)
    if duplicate_id is not None:
        headers[DUPLICATE_ID] = str(d.get("duplicate_id") or duplicate_id)
    headers["destination"] = str(d.get("destination") or default_destination)
    headers["persistent"] = "true" if durable else "false"
    if d.get("content_type"):
        headers["content-type"] = str(d["content_type"])
    return headers, bytes(body or b"")


def batch_prefix() -> str:
    """``spark/<query id>/<batch id>/<partition>/`` of the running task: what a re-run of
    the same micro-batch (after a restart from the checkpoint, or a task retry) repeats.
    The query id is the checkpoint's (not the run id, which changes on restart)."""
    ctx = TaskContext.get()
    query = ctx.getLocalProperty("sql.streaming.queryId") if ctx else None
    batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
    if ctx is None or query is None or batch is None:
        raise RuntimeError("no streaming query id or batch id in the task's context")
    return f"spark/{query}/{batch}/{ctx.partitionId()}/"


@dataclass
class Confirmed(WriterCommitMessage):
    messages: int


class QueueStreamWriter(DataSourceStreamWriter):
    """Each task sends its rows, each with a duplicate id its re-run repeats, and returns
    once the node confirmed all of them (see the module doc)."""

    def __init__(self, options: dict[str, str], schema: T.StructType) -> None:
        self.options = options
        self.declared = property_types(schema)
        self.committed: list[tuple[int, int]] = []  # (batch id, messages), for the driver

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        o = self.options
        default = _destination(o) if o.get("queue") else ""
        durable = o.get("durable", "true").lower() == "true"
        chunk = int(o.get("chunk", "500"))  # receipts awaited per chunk: bounded memory
        prefix = batch_prefix()
        client = _connect(o)
        n = 0
        try:
            frames: list[tuple[dict[str, str], bytes]] = []
            for i, row in enumerate(iterator):
                frames.append(row_frame(row, default, durable, self.declared, f"{prefix}{i}"))
                if not frames[-1][0]["destination"]:
                    raise ValueError("a row has no destination and no 'queue' option is set")
                if len(frames) >= chunk:
                    client.send_many(frames)
                    n += len(frames)
                    frames = []
            if frames:
                client.send_many(frames)
                n += len(frames)
        except StompFailure as e:
            raise RuntimeError(f"message {n} and later not confirmed: {e}") from e
        finally:
            client.close()
        return Confirmed(n)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        n = sum(m.messages for m in messages if isinstance(m, Confirmed))
        self.committed.append((batchId, n))
