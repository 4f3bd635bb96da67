"""The lifecycle event record (schema v1) as Spark sees it, and reading many nodes' logs.

The single definition stays :data:`waystation.core.events.FIELDS`; this module only maps it
onto Spark types, so a field added there is a field here.  Logs are read with that fixed
schema (no inference: a JSON Lines file with an odd line must not change a column's type),
and JSON Lines and Parquet files of any number of nodes end up in one DataFrame.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from waystation.core.events import FIELDS, SCHEMA_VERSION

_TYPES: dict[str, DataType] = {
    "int16": ShortType(),
    "int32": IntegerType(),
    "int64": LongType(),
    "string": StringType(),
    "bool": BooleanType(),
}

#: :data:`waystation.core.events.FIELDS` as a Spark schema, same names, order and nullability.
SCHEMA = StructType([StructField(f.name, _TYPES[f.type], f.nullable) for f in FIELDS])


def event_files(paths: Iterable[str | Path]) -> tuple[list[str], list[str]]:
    """The complete event log files under ``paths`` (files or folders, searched recursively):
    (JSON Lines files, Parquet files).  Hidden ``.part`` files being written are skipped."""
    jsonl: list[str] = []
    parquet: list[str] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(x for x in p.rglob("*") if x.is_file() and not x.name.startswith("."))
        elif p.exists():
            found = [p]
        else:
            raise FileNotFoundError(f"no event log at {p}")
        for f in found:
            if f.name.endswith((".jsonl", ".json")):
                jsonl.append(str(f.resolve()))
            elif f.name.endswith(".parquet"):
                parquet.append(str(f.resolve()))
    return jsonl, parquet


def read_events(spark: SparkSession, paths: Iterable[str | Path]) -> DataFrame:
    """Every schema-v1 record of the logs under ``paths`` as one DataFrame of :data:`SCHEMA`.
    Remote paths (``hdfs://``, ``s3a://``) are passed to Spark as given, by extension."""
    local: list[str | Path] = []
    jsonl: list[str] = []
    parquet: list[str] = []
    for p in paths:
        s = str(p)
        if "://" in s and not s.startswith("file://"):
            (parquet if s.endswith(".parquet") else jsonl).append(s)
        else:
            local.append(s.removeprefix("file://"))
    j, q = event_files(local)
    jsonl += j
    parquet += q
    if not jsonl and not parquet:
        raise FileNotFoundError("no event log files (events-*.jsonl, events-*.parquet) found")
    frames: list[DataFrame] = []
    if jsonl:
        frames.append(spark.read.schema(SCHEMA).option("mode", "PERMISSIVE").json(jsonl))
    if parquet:
        frames.append(spark.read.schema(SCHEMA).parquet(*parquet))
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    # a record of another version (or a line that did not parse) is left out, not guessed at
    return df.where((F.col("v") == SCHEMA_VERSION) & F.col("event").isNotNull())
