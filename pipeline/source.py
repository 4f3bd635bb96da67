"""``spark.read.format("waystation")`` / ``df.write.format("waystation")``: a node's queue as
a Spark batch source and sink, through the node's REST API (Python Data Source API).

Read: one pull consumer (``POST /queues/{q}/pull-consumers``) drained with
``consume-next`` until the queue stays empty for ``wait`` seconds or ``max`` messages came.
The consumer is auto-acknowledging: a message is gone from the queue once read, so a failed
Spark task loses what it had read (at most once).  Streaming (``readStream``/``writeStream``, acknowledgements tied to Spark's
commits) goes over STOMP instead: :mod:`waystation.pipeline.stream`; a ``port`` option (the
STOMP acceptor's) selects it and its schema.

Write: each row is one ``POST /queues/{q}/create`` (``body``; ``properties`` become HTTP
headers, hence string properties on the message; ``durable`` per the ``durable`` option).
The node answers a durable message only once it is on disk, and any answer other than 201
fails the task, so a write that commits had every message confirmed.  Each row is POSTed to
``create/{id}`` with ``id = spark-<write id>-<partition>-<row index>`` (or the row's own
``duplicate_id`` column): the write id is drawn once per write on the driver, so a retried or
speculative task repeats the same ids and the node's duplicate detection drops the repeats;
a second write of the same data is new messages.  Exactly once per write, as long as a
partition's rows come back in the same order on a retry and within the address's
duplicate cache (20,000 ids by default).

    from waystation.pipeline.source import register
    register(spark)
    df = spark.read.format("waystation").option("url", "http://127.0.0.1:8161")
        .option("queue", "orders").load()
    df.write.format("waystation").option("url", ...).option("queue", "copy").mode("append").save()
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote

from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from waystation.pipeline.stream import STREAM_SCHEMA, QueueStreamReader, QueueStreamWriter

SCHEMA = "body BINARY, content_type STRING, headers MAP<STRING, STRING>"
#: Response headers that are the protocol's, not the message's.
_PROTOCOL = {"content-length", "date", "server", "connection", "keep-alive", "content-type"}


def register(spark: SparkSession) -> None:
    """Make ``format("waystation")`` known to this session."""
    spark.dataSource.register(WaystationDataSource)


def _request(
    url: str, method: str, options: dict[str, str], body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
    h = dict(headers or {})
    if options.get("user"):
        cred = f"{options['user']}:{options.get('password', '')}".encode()
        h["Authorization"] = "Basic " + base64.b64encode(cred).decode()
    req = urllib.request.Request(url, data=body, method=method, headers=h)
    timeout = float(options.get("timeout", "30")) + float(options.get("wait", "1"))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


class WaystationDataSource(DataSource):
    """Options: ``url`` (the node's HTTP base URL), ``queue``; read: ``wait`` (seconds the
    queue must stay empty to end the read, default 1), ``max`` (messages, default no limit);
    write: ``durable`` (true); both: ``user``, ``password``.  Streaming: ``port`` (STOMP) and
    the options in :mod:`waystation.pipeline.stream`."""

    @classmethod
    def name(cls) -> str:
        return "waystation"

    def schema(self) -> str:
        return STREAM_SCHEMA if self.options.get("port") else SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return QueueReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ValueError("a queue cannot be overwritten: use mode('append')")
        return QueueWriter(dict(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if not self.options.get("port"):
            raise ValueError("a streaming read needs option 'port' (the node's STOMP port)")
        return QueueStreamReader(dict(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        if not self.options.get("port"):
            raise ValueError("a streaming write needs option 'port' (the node's STOMP port)")
        return QueueStreamWriter(dict(self.options), schema)


def _base(options: dict[str, str]) -> str:
    for key in ("url", "queue"):
        if not options.get(key):
            raise ValueError(f"option {key!r} is required")
    return f"{options['url'].rstrip('/')}/queues/{quote(options['queue'], safe='')}"


class QueueReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]  # one consumer: a queue's order is kept

    def read(self, partition: InputPartition) -> Iterator[tuple[object, ...]]:
        o = self.options
        status, h, body = _request(_base(o) + "/pull-consumers", "POST", o, b"")
        if status != 201:
            raise RuntimeError(f"pull consumer not created: {status} {body[:200]!r}")
        consumer, nxt = h.get("location"), h["msg-consume-next"]
        limit = int(o.get("max", "0")) or None
        n = 0
        try:
            while limit is None or n < limit:
                status, h, body = _request(nxt, "POST", o, b"", {"Accept-Wait": o.get("wait", "1")})
                if status == 503:
                    break  # nothing within `wait` seconds: the queue is drained
                if status != 200:
                    raise RuntimeError(f"consume-next: {status} {body[:200]!r}")
                nxt = h["msg-consume-next"]
                n += 1
                props = {
                    k: v for k, v in h.items() if k not in _PROTOCOL and not k.startswith("msg-")
                }
                yield (body, h.get("content-type"), props)
        finally:
            if consumer:
                _request(consumer, "DELETE", o)


@dataclass
class Sent(WriterCommitMessage):
    messages: int


class QueueWriter(DataSourceWriter):
    """Rows to messages, each under a duplicate id that a retried task repeats."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options
        self.sent = 0
        self.write_id = uuid.uuid4().hex  # on the driver: the same in every task attempt

    def write(self, iterator: Iterator[object]) -> WriterCommitMessage:
        o = self.options
        durable = o.get("durable", "true").lower()
        ctx = TaskContext.get()
        prefix = f"spark-{self.write_id}-{ctx.partitionId() if ctx else 0}-"
        n = 0
        for row in iterator:
            d = row.asDict() if hasattr(row, "asDict") else dict(row)  # type: ignore[call-overload]
            body = d.get("body")
            if isinstance(body, str):
                body = body.encode()
            headers = {str(k): str(v) for k, v in (d.get("headers") or {}).items()}
            if d.get("content_type"):
                headers["Content-Type"] = str(d["content_type"])
            dup = quote(str(d.get("duplicate_id") or f"{prefix}{n}"), safe="")
            url = f"{_base(o)}/create/{dup}?durable={durable}"
            status, _, answer = _request(url, "POST", o, bytes(body or b""), headers)
            if status != 201:
                raise RuntimeError(f"message {n} not accepted: {status} {answer[:200]!r}")
            n += 1
        return Sent(n)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.sent = sum(m.messages for m in messages if isinstance(m, Sent))
