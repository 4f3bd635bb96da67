"""The typed message model: property types through the journal and a restart, the first
journal format still readable, JMS selector semantics on typed values, the trace id on
copies, and lifecycle events with the DESIGN §8 fields only."""

from __future__ import annotations

import uuid
from pathlib import Path

import msgpack
import pytest
from enginekit import Collector, RecordingSink, make_engine, settle

from waystation.core.engine import DivertSpec, Engine, EngineConfig, QueueSpec
from waystation.core.filter import compile_filter
from waystation.core.message import (
    DEAD_LETTER_REASON,
    DIVERT_PATH,
    GROUP_ID,
    ORIGINAL_ADDRESS,
    STANDARD_FIELDS,
    Float32,
    Int32,
    Message,
    Timestamp,
    parse_typed,
    property_text,
    type_name,
    typed_text,
)
from waystation.core.postoffice import InvalidMessage
from waystation.core.settings import AddressSettings

U = uuid.UUID("123e4567-e89b-12d3-a456-426614174000")
TYPED: dict[str, object] = {
    "null": None,
    "flag": True,
    "i32": Int32(-7),
    "i64": 2**40,
    "f32": Float32(1.1),
    "f64": 1.1,
    "text": "héllo",
    "bin": b"\x00\xff",
    "when": Timestamp(1_700_000_000_123),
    "id": U,
}
TYPES = {
    "null": "null",
    "flag": "bool",
    "i32": "int",
    "i64": "long",
    "f32": "float",
    "f64": "double",
    "text": "string",
    "bin": "binary",
    "when": "timestamp",
    "id": "uuid",
}


def typed_message(mid: int = 1) -> Message:
    return Message(
        mid,
        "orders",
        b"body",
        dict(TYPED),
        True,
        7,
        1000,
        2000,
        0,
        message_id=U,
        correlation_id="c-1",
        reply_to="/queue/replies",
        content_type="text/plain",
        content_encoding="utf-8",
        user_id="app",
        subject="new-order",
        group_id="g1",
        group_sequence=3,
        trace_id="site-a/1",
    )


def assert_same_types(got: dict[str, object]) -> None:
    assert got == TYPED
    assert {k: type_name(v) for k, v in got.items()} == TYPES
    assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in TYPED.items()}


def test_every_type_and_field_round_trips_the_journal_record() -> None:
    m = typed_message()
    m.annotations[DEAD_LETTER_REASON] = "expired"
    back = Message.decode(m.encode())
    assert_same_types(dict(back.application_properties))
    assert back.annotations == {DEAD_LETTER_REASON: "expired"}
    assert DEAD_LETTER_REASON not in back.application_properties
    # every standard field the model has, each set here (a new field fails until it is)
    assert all(getattr(m, f) is not None for f in STANDARD_FIELDS)
    for f in ("id", "address", "body", "durable", "priority", "timestamp", "expiration",
              *STANDARD_FIELDS):  # fmt: skip
        assert getattr(back, f) == getattr(m, f), f
    assert isinstance(back.message_id, uuid.UUID)


def test_first_format_nine_tuple_records_still_decode() -> None:
    legacy = msgpack.packb(
        (
            5,
            "DLQ",
            b"old",
            {"k": "v", "n": 3, DEAD_LETTER_REASON: "max-deliveries", ORIGINAL_ADDRESS: "work"},
            True,
            4,
            123,
            0,
            0,
        ),
        use_bin_type=True,
    )
    m = Message.decode(legacy)
    assert (m.id, m.address, m.body, m.durable, m.timestamp) == (5, "DLQ", b"old", True, 123)
    # the annotations move out of the application properties, and still read through
    assert m.application_properties == {"k": "v", "n": 3}
    assert m.annotations == {DEAD_LETTER_REASON: "max-deliveries", ORIGINAL_ADDRESS: "work"}
    assert m.properties[DEAD_LETTER_REASON] == "max-deliveries"
    assert m.trace_id is None and m.message_id is None
    # and a re-encoded record is of the current format
    assert Message.decode(m.encode()).annotations == m.annotations


def test_typed_properties_survive_an_engine_restart(run, tmp_path: Path) -> None:
    async def go() -> None:
        eng = await make_engine(tmp_path)
        msg = eng.make_message("typed", b"x", dict(TYPED), durable=True)
        msg.correlation_id = U
        fut = eng.send(msg)
        assert fut is not None
        await fut
        trace = msg.trace_id
        await eng.stop()
        eng = await make_engine(tmp_path)
        (back,) = list(eng.queue("typed").browse())
        assert_same_types(dict(back.application_properties))
        assert back.correlation_id == U and back.trace_id == trace
        await eng.stop()

    run(go())


def test_values_a_journal_cannot_hold_are_refused_at_send(run) -> None:
    async def go() -> None:
        eng = await make_engine(None)
        with pytest.raises(InvalidMessage, match="not a message property type"):
            eng.send(eng.make_message("q", b"", {"bad": object()}, durable=True))
        await eng.stop()

    run(go())


def test_type_constructors_check_range_and_round() -> None:
    with pytest.raises(ValueError, match="32-bit int"):
        Int32(2**31)
    assert float(Float32(1.1)) != 1.1 and Float32(0.5) == 0.5
    with pytest.raises(ValueError, match="32-bit float"):
        Float32(1e300)
    for v in TYPED.values():
        assert parse_typed(type_name(v), typed_text(v)) == v
    with pytest.raises(ValueError, match="expected true or false"):
        parse_typed("bool", "yes")
    with pytest.raises(ValueError, match="unknown property type"):
        parse_typed("decimal", "1")
    with pytest.raises(ValueError, match="too long"):
        parse_typed("long", "1" * 5000)
    assert property_text(True) == "true" and property_text(Int32(3)) == "3"


@pytest.mark.parametrize(
    ("selector", "props", "expected"),
    [
        ("urgent = TRUE", {"urgent": True}, True),
        ("urgent = TRUE", {"urgent": False}, False),
        ("urgent = TRUE", {"urgent": "true"}, False),  # a string is not a boolean
        ("urgent", {"urgent": True}, True),
        ("urgent", {"urgent": "true"}, False),
        ("n = 5", {"n": Int32(5)}, True),
        ("n = 5", {"n": 5}, True),
        ("n = 5", {"n": 5.0}, True),
        ("n = 5", {"n": Float32(5.0)}, True),
        ("n = 5", {"n": "5"}, False),  # a string never equals a number
        ("n <> 5", {"n": "5"}, False),  # ... and is not unequal either: UNKNOWN
        ("n = '5'", {"n": 5}, False),
        ("n > 4.5", {"n": Int32(5)}, True),
        ("n BETWEEN 1 AND 10", {"n": Timestamp(3)}, True),
        ("n * 2 = 10.0", {"n": Int32(5)}, True),
        ("n = 1", {"n": True}, False),  # a boolean is not a number
        ("id IS NOT NULL", {"id": U}, True),
        ("id = 'x'", {"id": U}, False),
    ],
)
def test_selectors_compare_typed_values_with_jms_semantics(
    selector: str, props: dict[str, object], expected: bool
) -> None:
    f = compile_filter(selector)
    assert f is not None
    assert f.matches(Message(1, "a", b"", props)) is expected  # type: ignore[arg-type]


def test_selectors_read_standard_fields_and_annotations() -> None:
    m = typed_message()
    m.annotations[ORIGINAL_ADDRESS] = "work"
    for text in (
        "JMSCorrelationID = 'c-1'",
        "JMSXGroupID = 'g1'",
        "JMSXGroupSeq = 3",
        "JMSXUserID = 'app'",
        "JMSType = 'new-order'",
        "WSTraceID = 'site-a/1'",
        "_WS_ORIG_ADDRESS = 'work'",
    ):
        f = compile_filter(text)
        assert f is not None and f.matches(m), text


def test_trace_id_is_set_once_and_kept_by_diverts_and_dead_letters(run) -> None:
    async def go() -> None:
        events = RecordingSink()
        cfg = EngineConfig(
            node_name="site-a",
            queues=[QueueSpec("orders"), QueueSpec("urgent")],
            diverts=[DivertSpec("hot", "orders", "urgent", filter="urgent = TRUE")],
            address_settings={
                "#": AddressSettings(max_delivery_attempts=1, dead_letter_address="DLQ")
            },
        )
        eng = Engine(cfg, events=events)
        await eng.start()
        hot = eng.make_message("orders", b"hot", {"urgent": True})
        cold = eng.make_message("orders", b"cold", {"urgent": "true"})  # a string: no match
        eng.send(hot)
        eng.send(cold)
        assert hot.trace_id == f"site-a/{hot.id}"
        (copy,) = list(eng.queue("urgent").browse())
        assert copy.body == b"hot" and copy.id != hot.id and copy.trace_id == hot.trace_id
        assert copy.properties[DIVERT_PATH] == "hot" and DIVERT_PATH in copy.annotations
        assert DIVERT_PATH not in copy.application_properties
        # a message that already has a trace id (it came over a bridge) keeps it
        relayed = eng.make_message("orders", b"relayed")
        relayed.trace_id = "site-z/42"
        eng.send(relayed)
        assert relayed.trace_id == "site-z/42"
        # dead-lettered: a copy with the same trace id
        c = Collector()
        sub = eng.subscribe("urgent", c)
        await settle()
        sub.consumer.nack(c.deliveries[0].tag)
        await settle()
        (dead,) = list(eng.queue("DLQ").browse())
        assert dead.trace_id == hot.trace_id and dead.annotations[DEAD_LETTER_REASON]
        await eng.stop()
        by_trace = [r for r in events.records if r["trace_id"] == hot.trace_id]
        kinds = [r["event"] for r in by_trace]
        for kind in ("accepted", "diverted", "routed", "delivered", "dead_lettered"):
            assert kind in kinds, kinds
        assert kinds.count("accepted") == 1  # the divert's copy is not accepted again
        diverted = next(r for r in by_trace if r["event"] == "diverted")
        assert diverted["message_id"] == copy.id and diverted["address"] == "urgent"
        assert any(
            r["event"] == "accepted" and r["trace_id"] == "site-z/42" for r in events.records
        )

    run(go())


def test_group_and_standard_fields_on_the_message() -> None:
    assert Message(1, "q", group_id="g").group() == "g"
    assert Message(1, "q", b"", {GROUP_ID: "legacy"}).group() == "legacy"
    m = Message(1, "q")
    assert m.group() is None and not m.has_fields() and m.content_type is None
    m.content_type = None  # setting None to an unset field makes nothing
    assert not m.has_fields()
    m.reply_to = "r"
    assert m.has_fields() and m.copy(2).reply_to == "r"
    with pytest.raises(TypeError, match="no standard field 'colour'"):
        Message(1, "q", colour="red")  # type: ignore[arg-type]


def test_each_standard_field_has_its_own_place() -> None:
    """The fields are properties over one list (the compiled message): each reads and writes
    exactly its FIELD_INDEX place, and a message without any keeps no list."""
    from waystation.core.message import FIELD_INDEX, Message

    assert not Message(1, "a").has_fields()
    for name, index in FIELD_INDEX.items():
        m = Message(1, "a")
        setattr(m, name, 7 if name == "group_sequence" else f"v-{name}")
        assert m._std is not None and [i for i, v in enumerate(m._std) if v is not None] == [index]
        assert getattr(m, name) == (7 if name == "group_sequence" else f"v-{name}")
        assert Message(1, "a", **{name: None}).has_fields() is False
