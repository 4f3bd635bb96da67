"""A real node with the event log on, in each format: STOMP traffic leaves consistent records."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from nodekit import NodeProcess
from stompkit import connect, unique

from waystation.core.events import FIELD_NAMES, arrow_schema


def read_events(folder: Path, fmt: str) -> list[dict[str, object]]:
    files = sorted(folder.iterdir())
    assert files, "no event files"
    assert not [f.name for f in files if f.name.endswith(".part")], "a file was left unfinished"
    out: list[dict[str, object]] = []
    for f in files:
        assert f.name.startswith("events-") and f.suffix == f".{fmt}", f.name
        if fmt == "parquet":
            table = pq.read_table(f)
            assert table.schema.equals(arrow_schema())
            out.extend(table.to_pylist())
        else:
            for line in f.read_text().splitlines():
                rec = json.loads(line)
                assert tuple(rec) == FIELD_NAMES
                out.append(rec)
    return out


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_stomp_messages_leave_their_lifecycle_in_the_event_log(tmp_path: Path, fmt: str) -> None:
    node = NodeProcess(
        tmp_path,
        name="site-a",
        extra_config=f'[node.event_log]\nenabled = true\nformat = "{fmt}"\n',
    ).start()
    queue = unique("ev")
    try:
        conn, listener = connect(node.stomp_port)
        conn.subscribe(f"/queue/{queue}", id="s1", ack="client-individual")
        for i in range(3):
            conn.send(f"/queue/{queue}", f"body-{i}", receipt=f"r{i}", persistent="true")
            listener.wait_receipt(f"r{i}")
        frames = listener.wait_messages(3)[:3]
        for f in frames:
            conn.ack(f.headers["ack"])
        conn.send(f"/queue/{queue}", "last", receipt="r-last")  # the acks were handled first
        listener.wait_receipt("r-last")
        conn.disconnect()
    finally:
        assert node.stop() == 0, node.log()
    recs = read_events(tmp_path / "data" / "events", fmt)
    assert {r["node"] for r in recs} == {"site-a"}
    ids = [int(f.headers["message-id"]) for f in frames]
    for mid in ids:
        mine = [r for r in recs if r["message_id"] == mid]
        kinds = [r["event"] for r in mine]
        for kind in ("accepted", "routed", "delivered", "acked"):
            assert kinds.count(kind) == 1, (mid, kinds)
        assert kinds.index("accepted") < kinds.index("routed") < kinds.index("delivered")
        assert kinds.index("delivered") < kinds.index("acked")
        assert {r["address"] for r in mine} == {queue}
        by_kind = {r["event"]: r for r in mine}
        assert by_kind["accepted"]["durable"] is True
        for kind in ("routed", "delivered", "acked"):
            assert by_kind[kind]["queue"] == queue
        assert by_kind["delivered"]["delivery_count"] is not None
        ts = [by_kind[k]["ts_us"] for k in ("accepted", "routed", "delivered", "acked")]
        assert ts == sorted(ts)
        assert len({r["size"] for r in mine}) == 1  # the same message all along
        assert len({r["trace_id"] for r in mine}) == 1


def test_an_unusable_event_log_folder_stops_the_node_with_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir(parents=True)
    (tmp_path / "data" / "events").write_text("a file, not a folder")
    node = NodeProcess(tmp_path, extra_config="[node.event_log]\nenabled = true\n")
    with pytest.raises(RuntimeError, match="exited"):
        node.start()
    assert "node.event_log: cannot create event log folder" in node.log()
