"""The lifecycle event log: the fixed schema, both writers, rolling, recovery, the drop policy."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from enginekit import Collector, settle

from waystation.core import eventlog as eventlog_mod
from waystation.core.engine import Engine, EngineConfig
from waystation.core.eventlog import (
    EventLog,
    EventLogError,
    JsonlEventLog,
    ParquetEventLog,
    open_event_log,
)
from waystation.core.events import (
    EVENTS,
    FIELD_NAMES,
    SCHEMA_VERSION,
    NullEventSink,
    arrow_schema,
    spark_ddl,
)
from waystation.core.message import Message
from waystation.core.settings import AddressSettings

FORMATS = ("jsonl", "parquet")

# DESIGN §8, verbatim
DESIGN_FIELDS = [
    "v",
    "ts_us",
    "node",
    "event",
    "trace_id",
    "message_id",
    "address",
    "queue",
    "protocol",
    "session",
    "size",
    "durable",
    "delivery_count",
    "reason",
    "peer",
]
DESIGN_EVENTS = [
    "accepted",
    "routed",
    "diverted",
    "stored",
    "forwarded",
    "delivered",
    "acked",
    "released",
    "redelivered",
    "dead_lettered",
    "expired",
    "dropped",
]


def complete_files(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name.startswith("events-"))


def part_files(d: Path) -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name.endswith(".part"))


def read_records(d: Path) -> list[dict[str, object]]:
    """Every record of every complete file, checking each file against the schema."""
    out: list[dict[str, object]] = []
    for f in complete_files(d):
        if f.suffix == ".parquet":
            table = pq.read_table(f)
            assert table.schema.equals(arrow_schema()), f.name
            out.extend(table.to_pylist())
        else:
            for line in f.read_text().splitlines():
                rec = json.loads(line)
                assert tuple(rec) == FIELD_NAMES, f.name
                out.append(rec)
    return out


def emit_many(ev: EventLog, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        ev.emit("routed", i, "orders.eu", 100 + i, "orders.eu", trace_id=f"a/{i}", durable=True)


# --- the schema ----------------------------------------------------------------------------------


def test_schema_is_design_section_8() -> None:
    assert list(FIELD_NAMES) == DESIGN_FIELDS
    assert list(EVENTS) == DESIGN_EVENTS
    schema = arrow_schema()
    assert schema.names == DESIGN_FIELDS
    assert schema.field("ts_us").type == pa.int64()
    assert schema.field("message_id").type == pa.int64()
    assert schema.field("durable").type == pa.bool_()
    assert not schema.field("node").nullable and schema.field("trace_id").nullable
    assert schema.metadata[b"waystation.events.v"] == str(SCHEMA_VERSION).encode()
    ddl = spark_ddl()
    assert ddl.startswith("v SMALLINT NOT NULL, ts_us BIGINT NOT NULL")
    assert [part.split()[0] for part in ddl.split(", ")] == DESIGN_FIELDS


def test_null_sink_accepts_anything() -> None:
    sink = NullEventSink()
    assert sink.emit("accepted", 1, "a", 3, None, anything=object()) is None
    sink.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_records_carry_every_field(tmp_path: Path, fmt: str) -> None:
    ev = open_event_log(tmp_path, "site-a", fmt)
    t0 = time.time_ns() // 1000
    ev.emit(
        "forwarded",
        7,
        "orders",
        321,
        "sf.site-b",
        trace_id="site-a/7",
        durable=True,
        delivery_count=2,
        protocol="stomp",
        session=12,
        reason=None,
        peer="site-b",
        not_a_field="ignored",  # unknown keys are dropped, never written
    )
    ev.emit("dead-lettered", 8, "orders", 5, "orders", reason="expired")  # legacy name
    ev.emit("duplicate", 9, "orders", 5)  # legacy name: a drop with reason "duplicate"
    ev.close()
    recs = read_records(tmp_path)
    t1 = time.time_ns() // 1000
    assert len(recs) == 3
    first = recs[0]
    assert t0 <= first.pop("ts_us") <= t1  # type: ignore[operator]
    assert first == {
        "v": SCHEMA_VERSION,
        "node": "site-a",
        "event": "forwarded",
        "trace_id": "site-a/7",
        "message_id": 7,
        "address": "orders",
        "queue": "sf.site-b",
        "protocol": "stomp",
        "session": "12",
        "size": 321,
        "durable": True,
        "delivery_count": 2,
        "reason": None,
        "peer": "site-b",
    }
    assert (recs[1]["event"], recs[1]["reason"]) == ("dead_lettered", "expired")
    assert (recs[2]["event"], recs[2]["reason"], recs[2]["queue"]) == ("dropped", "duplicate", None)
    assert recs[2]["durable"] is None and recs[2]["trace_id"] is None
    assert ev.stats()["written"] == 3 and ev.errors == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_bad_value_loses_only_its_record(tmp_path: Path, fmt: str) -> None:
    ev = open_event_log(tmp_path, "n", fmt)
    ev.emit("delivered", 1, "q", 1, "q", delivery_count="many")
    ev.emit("delivered", 2, "q", 1, "q", delivery_count=1 << 40)  # beyond int32
    ev.emit("delivered", 3, "q", 1, "q", delivery_count=1)
    ev.close()
    assert [r["message_id"] for r in read_records(tmp_path)] == [3]
    assert ev.errors == 2 and ev.written == 1


# --- rolling, retention, temporary names --------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_rolls_by_size_and_keeps_every_record(tmp_path: Path, fmt: str) -> None:
    ev = open_event_log(tmp_path, "n", fmt, max_file_size=8192, max_files=1000)
    emit_many(ev, 3000)
    ev.close()
    files = complete_files(tmp_path)
    assert len(files) >= 5, [f.name for f in files]
    assert [f.name for f in files] == [f"events-{i:06d}.{fmt}" for i in range(1, len(files) + 1)]
    if fmt == "jsonl":  # a file ends at the line that crossed the limit
        assert all(f.stat().st_size < 8192 + 400 for f in files)
    recs = read_records(tmp_path)
    assert [r["message_id"] for r in recs] == list(range(3000))
    assert part_files(tmp_path) == []
    assert ev.stats() == {"written": 3000, "dropped": 0, "errors": 0, "rolled": len(files),
                          "buffered": 0}  # fmt: skip


@pytest.mark.parametrize("fmt", FORMATS)
def test_keeps_at_most_max_files(tmp_path: Path, fmt: str) -> None:
    ev = open_event_log(tmp_path, "n", fmt, max_file_size=4096, max_files=3)
    emit_many(ev, 3000)
    ev.close()
    files = complete_files(tmp_path)
    assert len(files) == 3
    assert ev.rolled > 3
    # the newest survive: the last event is in the last file
    assert files[-1].name == f"events-{ev.rolled:06d}.{fmt}"
    assert read_records(tmp_path)[-1]["message_id"] == 2999


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_open_file_has_a_temporary_name_until_rolled_by_age(tmp_path: Path, fmt: str) -> None:
    ev = open_event_log(tmp_path, "n", fmt, roll_interval=1.0, flush_interval=0.05)
    try:
        emit_many(ev, 5)
        deadline = time.monotonic() + 5
        while not part_files(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [p.name for p in part_files(tmp_path)] == [f".events-000001.{fmt}.part"]
        assert complete_files(tmp_path) == []  # nothing a reader could take for complete
        while not complete_files(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.05)
        # rolled by age with the node still running: complete and readable now
        assert [r["message_id"] for r in read_records(tmp_path)] == list(range(5))
        assert part_files(tmp_path) == []  # no event since: no new file
        emit_many(ev, 1, start=5)
    finally:
        ev.close()
    assert [f.name for f in complete_files(tmp_path)] == [
        f"events-000001.{fmt}",
        f"events-000002.{fmt}",
    ]


def test_no_events_no_file(tmp_path: Path) -> None:
    EventLog(tmp_path, "n").close()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_numbering_resumes_after_a_restart(tmp_path: Path, fmt: str) -> None:
    for run in range(3):
        ev = open_event_log(tmp_path, "n", "jsonl" if run == 1 else fmt)
        emit_many(ev, 2, start=run * 2)
        ev.close()
    names = [f.name for f in complete_files(tmp_path)]
    assert names == [f"events-000001.{fmt}", "events-000002.jsonl", f"events-000003.{fmt}"]
    assert sorted(r["message_id"] for r in read_records(tmp_path)) == list(range(6))


CRASHER = """
import os, sys, time
from waystation.core.eventlog import EventLog
ev = EventLog(sys.argv[1], "n", format=sys.argv[2], flush_interval=0.01)
for i in range(50):
    ev.emit("accepted", i, "q", 10)
time.sleep(0.5)  # the writer has written (JSON Lines: handed to the OS)
os._exit(9)      # no close(): a crash
"""


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_crash_leaves_only_the_part_file_and_restart_recovers(tmp_path: Path, fmt: str) -> None:
    d = tmp_path / "ev"
    for _ in range(2):  # the second crash finds the first crash's recovered file
        subprocess.run([sys.executable, "-c", CRASHER, str(d), fmt], check=False, timeout=60)
        assert len(part_files(d)) == 1
    # the second run numbered after the first crash's leftover
    assert [p.name for p in part_files(d)] == [f".events-000002.{fmt}.part"]
    if fmt == "jsonl":
        # simulate a crash mid-line on the newest leftover
        part = part_files(d)[0]
        with open(part, "ab") as fh:
            fh.write(b'{"v":1,"ts_us":17')
    ev = open_event_log(d, "n", fmt)
    assert part_files(d) == []
    emit_many(ev, 1, start=1000)
    ev.close()
    recs = read_records(d)
    if fmt == "jsonl":
        # both crashed runs' 50 records kept, the torn line cut, numbering continued
        assert [f.name for f in complete_files(d)] == [
            "events-000001.jsonl",
            "events-000002.jsonl",
            "events-000003.jsonl",
        ]
        assert [r["message_id"] for r in recs] == [*range(50), *range(50), 1000]
    else:
        # an unclosed Parquet file is unreadable: removed, its number not reused
        assert [f.name for f in complete_files(d)] == ["events-000003.parquet"]
        assert [r["message_id"] for r in recs] == [1000]


# --- bounded buffer ----------------------------------------------------------------------------


def test_a_stalled_writer_drops_counts_and_warns_never_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stall = threading.Event()
    real_write = EventLog._write

    def stalled_write(self: EventLog, batch: list[object]) -> None:
        stall.wait(30)  # a disk that does not answer
        real_write(self, batch)  # type: ignore[arg-type]

    monkeypatch.setattr(EventLog, "_write", stalled_write)
    ev = EventLog(tmp_path, "n", buffer_limit=100, flush_interval=0.01, warn_interval=60)
    caplog.set_level(logging.WARNING, logger="waystation.events")
    ev.emit("accepted", 0, "q", 1)
    deadline = time.monotonic() + 5
    while ev.stats()["buffered"] and time.monotonic() < deadline:  # the writer took it
        time.sleep(0.01)
    t0 = time.perf_counter()
    emit_many(ev, 5000, start=1)
    elapsed = time.perf_counter() - t0
    assert ev.stats()["buffered"] == 100
    assert ev.dropped == 4900
    assert elapsed < 1.0  # 5000 emits against a stalled disk return at once
    drops = [r for r in caplog.records if "events dropped" in r.getMessage()]
    assert len(drops) == 1  # rate-limited
    stall.set()
    ev.close()
    assert [r["message_id"] for r in read_records(tmp_path)] == list(range(101))
    assert ev.written + ev.dropped == 5001
    ev.emit("accepted", 9999, "q", 1)  # after close: dropped, not queued
    assert ev.dropped == 4901 and ev.stats()["buffered"] == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_write_error_loses_that_file_and_the_writer_goes_on(
    tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls = eventlog_mod._JsonlFile if fmt == "jsonl" else eventlog_mod._ParquetFile
    real_finish = cls.finish
    calls = {"n": 0}

    def failing_finish(self: object) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(28, "No space left on device")
        real_finish(self)  # type: ignore[arg-type]

    monkeypatch.setattr(cls, "finish", failing_finish)
    ev = open_event_log(tmp_path, "n", fmt, max_file_size=4096, max_files=1000)
    emit_many(ev, 1000)
    ev.close()
    assert ev.errors > 0
    assert ev.written + ev.errors == 1000
    recs = read_records(tmp_path)
    assert len(recs) == ev.written and recs[-1]["message_id"] == 999
    assert part_files(tmp_path) == []


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(EventLogError, match="unknown event log format 'csv'"):
        EventLog(tmp_path, "n", format="csv")
    with pytest.raises(EventLogError, match="must be positive"):
        EventLog(tmp_path, "n", buffer_limit=0)
    (tmp_path / "file").write_text("")
    with pytest.raises(EventLogError, match="cannot create event log folder"):
        EventLog(tmp_path / "file" / "events", "n")


# --- with the engine ----------------------------------------------------------------------------


async def ack_one_dead_letter_one(events: EventLog) -> tuple[Message, Message]:
    """Two messages through an engine writing to ``events``: the first acked, the second
    nacked into the DLQ (one delivery attempt); stopping the engine closes the log."""
    eng = Engine(
        EngineConfig(
            node_name="node-1",
            address_settings={
                "#": AddressSettings(max_delivery_attempts=1, dead_letter_address="DLQ")
            },
        ),
        events=events,
    )
    await eng.start()
    c = Collector()
    sub = eng.subscribe("q", c)
    m1, m2 = eng.make_message("q", b"m1"), eng.make_message("q", b"m2")
    eng.send(m1)
    eng.send(m2)
    await settle()
    sub.consumer.ack(c.deliveries[0].tag)
    sub.consumer.nack(c.deliveries[1].tag)
    await eng.stop()  # closes the event log
    return m1, m2


@pytest.mark.parametrize("fmt", FORMATS)
def test_engine_lifecycle(run, tmp_path: Path, fmt: str) -> None:
    async def go() -> None:
        cls = ParquetEventLog if fmt == "parquet" else JsonlEventLog
        m1, m2 = await ack_one_dead_letter_one(cls(tmp_path / "events", "node-1"))
        recs = read_records(tmp_path / "events")
        by_id: dict[int, list[str]] = {}
        for r in recs:
            assert r["node"] == "node-1" and r["v"] == SCHEMA_VERSION
            by_id.setdefault(r["message_id"], []).append(r["event"])  # type: ignore[arg-type]
        assert by_id[m1.id][:4] == ["accepted", "routed", "delivered", "acked"]
        assert by_id[m2.id][:3] == ["accepted", "routed", "delivered"]
        assert "dead_lettered" in by_id[m2.id]

    run(go())


def test_jsonl_alias_is_the_same_writer(tmp_path: Path) -> None:
    ev = JsonlEventLog(tmp_path, "n", max_file_size=400, max_files=50)
    assert isinstance(ev, EventLog) and ev.format == "jsonl"
    ev.close()
