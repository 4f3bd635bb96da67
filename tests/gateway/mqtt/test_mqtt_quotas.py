"""Security issue 27, finding 1: a client that sends QoS 2 PUBLISHes and never PUBREL.

The ids a client holds unreleased are bounded (``max_unreleased_per_client``: 3.1.1 closes the
connection, v5 advertises it as Receive Maximum and disconnects with 0x93); a resend of a held
id does not count twice; saving one more id writes one small record, not the whole set; a
bystander's round trips stay fast during a flood from many connections.  And the per-user
quotas of saved client state (``max_saved_sessions_per_user``, ``max_state_size_per_user``)
refuse one user past them while another is unaffected.  A real node, security on, raw
sockets for the attacker (paho would send the PUBREL) and paho for the bystander."""

from __future__ import annotations

import statistics
import threading
import time

import pytest
from pahokit import V5, V311, MqttNode, Paho, props5
from rawmqtt import MQTT_5, USERS, Raw, dir_bytes, disconnects, pubrecs, rss_mib, written

from waystation.wire.mqtt import PubComp, Publish, PubRel, SubAck, Subscribe, SubscriptionRequest

LIMIT = 500  # max_unreleased_per_client (below the listener's receive maximum, 1000)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    config = USERS + f"\n[limits]\nmax_unreleased_per_client = {LIMIT}\n"
    n = MqttNode(tmp_path_factory.mktemp("mqtt-qos2-flood"), extra_config=config)
    n.start()
    yield n
    n.stop()


def wipe(node: MqttNode, cid: str, user: str = "alice", password: str = "a") -> None:
    """End a test's persistent session (a clean connect drops it)."""
    c = Raw(node.mqtt_port)
    assert c.connect(cid, user, password, clean=True).reason_code == 0
    c.close()


def test_311_unreleased_ids_are_bounded_and_a_resend_does_not_count(node):
    c = Raw(node.mqtt_port)
    assert c.connect("flood-311", "alice", "a").reason_code == 0
    got = c.qos2("flood/a", range(1, LIMIT + 1))
    assert sorted(pubrecs(got)) == list(range(1, LIMIT + 1)) and not c.closed
    c.send(Publish("flood/a", b"again", 2, dup=True, packet_id=7))  # a resend: no new id
    assert pubrecs(c.read_until(bool)) == [7] and not c.closed
    got = c.qos2("flood/a", range(LIMIT + 1, LIMIT + 2))  # one id more: closed
    assert not pubrecs(got) and c.closed
    assert f"{LIMIT} QoS 2 messages awaiting PUBREL (limit max_unreleased_per_client)" in node.log()

    c = Raw(node.mqtt_port)  # the ids came back with the session: released, room again
    ack = c.connect("flood-311", "alice", "a")
    assert ack.reason_code == 0 and ack.session_present
    c.send(*(PubRel(pid) for pid in range(1, LIMIT + 1)))
    got = c.read_until(lambda ps: sum(isinstance(p, PubComp) for p in ps) >= LIMIT)
    assert all(p.reason_code == 0 for p in got if isinstance(p, PubComp)) and len(got) == LIMIT
    assert sorted(pubrecs(c.qos2("flood/a", range(1, 11)))) == list(range(1, 11))
    c.close()
    wipe(node, "flood-311")


def test_v5_receive_maximum_is_the_limit_and_0x93_past_it(node):
    c = Raw(node.mqtt_port, MQTT_5)
    ack = c.connect("flood-5", "alice", "a", session_expiry_interval=3600)
    assert ack.reason_code == 0
    assert ack.properties["receive_maximum"] == LIMIT  # lower than the listener's 1000
    got = c.qos2("flood/b", range(1, LIMIT + 1))
    assert len(pubrecs(got)) == LIMIT and not c.closed
    c.send(Publish("flood/b", b"again", 2, dup=True, packet_id=3))  # a resend at the limit
    assert pubrecs(c.read_until(bool)) == [3] and not c.closed
    got = c.qos2("flood/b", range(LIMIT + 1, LIMIT + 2))
    assert disconnects(got) == [0x93] and not pubrecs(got)
    c.close()
    wipe(node, "flood-5")


def test_saving_an_unreleased_id_writes_the_same_few_bytes_however_many_are_held(node):
    """Before, each id rewrote the whole list: 500 ids wrote ~7 MB (quadratic)."""
    pid = node.proc.pid
    c = Raw(node.mqtt_port)
    assert c.connect("flood-bytes", "alice", "a").reason_code == 0
    w0 = written(pid)
    assert len(pubrecs(c.qos2("flood/c", range(1, 251)))) == 250
    w1 = written(pid)
    assert len(pubrecs(c.qos2("flood/c", range(251, LIMIT + 1)))) == LIMIT - 250
    w2 = written(pid)
    first, second = w1 - w0, w2 - w1
    print(f"\nbytes written: first 250 ids {first}, next {LIMIT - 250} ids {second}")
    # ~150 B of state and ~250 B of message journal per id, and at most one new journal
    # file preallocated (1 MiB of zeros) on the way; quadratic would be ~1.7 MB then ~5 MB
    assert first < 1.5 * 2**20 and second < 1.5 * 2**20
    c.close()
    wipe(node, "flood-bytes")


def _flood(port: int, cid: str, n: int, rounds: int, out: dict[str, list[tuple[int, bool]]]):
    """``n`` unreleased ids then one more (which closes the connection); then ``rounds - 1``
    times: resume the session (the ids still held) and try one more id again."""
    out[cid] = []
    for r in range(rounds):
        c = Raw(port)
        assert c.connect(cid, "alice", "a").reason_code == 0
        held = len(pubrecs(c.qos2(f"flood/{cid}", range(1, n + 1)))) if r == 0 else 0
        c.qos2(f"flood/{cid}", range(n + 1 + r, n + 2 + r))
        out[cid].append((held, c.closed))
        c.close()


def _attack(node: MqttNode, conns: int, rounds: int) -> None:
    """``conns`` connections each holding ``LIMIT`` ids and trying more, while a bystander
    of another user times QoS 1 round trips; the node's memory and disk before and after."""
    pid = node.proc.pid
    rss0, disk0 = rss_mib(pid), dir_bytes(node.workdir / "data")
    by = Paho(node.mqtt_port, "bystander", V311, username="bob", password="b")
    by.connect()
    by.subscribe("by/echo", 1)
    results: dict[str, list[tuple[int, bool]]] = {}
    threads = [
        threading.Thread(target=_flood, args=(node.mqtt_port, f"fl-{i}", LIMIT, rounds, results))
        for i in range(conns)
    ]
    for t in threads:
        t.start()
    rtts: list[float] = []  # round trips that overlapped the flood
    start = time.monotonic()
    while any(t.is_alive() for t in threads):
        n = len(by.messages)
        t0 = time.monotonic()
        by.publish("by/echo", b"ping", 1)
        by.wait_messages(n + 1, timeout=30)
        rtts.append(time.monotonic() - t0)
        time.sleep(0.005)
    took = time.monotonic() - start
    for t in threads:
        t.join(60)
    rss1, disk1 = rss_mib(pid), dir_bytes(node.workdir / "data")
    by.close()
    each = [(LIMIT, True)] + [(0, True)] * (rounds - 1)
    assert results == {f"fl-{i}": each for i in range(conns)}
    assert len(rtts) >= 3
    rtts.sort()
    p99 = rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))]
    print(
        f"\nflood {conns} connections x {LIMIT + rounds} QoS 2 ids in {took:.1f}s: bystander "
        f"round trips n={len(rtts)} median={statistics.median(rtts) * 1000:.1f}ms "
        f"p99={p99 * 1000:.1f}ms max={rtts[-1] * 1000:.1f}ms; node RSS {rss0:.0f} -> "
        f"{rss1:.0f} MiB; data dir {disk0 / 2**20:.1f} -> {disk1 / 2**20:.1f} MiB"
    )
    assert rtts[-1] < 3.0  # before: stalls of up to 15 s
    assert rss1 - rss0 < 50 + conns * 3  # before: 1.4 GB
    assert disk1 - disk0 < 32 * 2**20  # before: 2.6 GB of journal
    for i in range(conns):
        wipe(node, f"fl-{i}")


def test_bystander_round_trip_stays_fast_during_a_flood(node):
    """10,000 unreleased ids attempted from 20 connections (each stopped at the limit)."""
    _attack(node, conns=20, rounds=1)


@pytest.mark.slow
def test_bystander_round_trip_stays_fast_during_a_long_flood(node):
    """50 connections, each coming back 20 times to try one more id."""
    _attack(node, conns=50, rounds=20)


# -- per-user quotas of saved client state ------------------------------------------------------
@pytest.fixture(scope="module")
def qnode(tmp_path_factory):
    config = USERS + (
        '\n[limits]\nmax_saved_sessions_per_user = 2\nmax_state_size_per_user = "6KiB"\n'
    )
    n = MqttNode(tmp_path_factory.mktemp("mqtt-state-quota"), extra_config=config)
    n.start()
    yield n
    n.stop()


@pytest.mark.parametrize("version", [V311, V5])
def test_saved_sessions_per_user_are_capped_other_users_unaffected(qnode, version):
    v = "5" if version == V5 else "3"
    expiry = props5(SessionExpiryInterval=600) if version == V5 else None
    kept = []
    for i in (1, 2):
        c = Paho(qnode.mqtt_port, f"s{v}-{i}", version, False, "alice", "a", properties=expiry)
        c.connect()
        c.close()
        kept.append(c)
    third = Paho(qnode.mqtt_port, f"s{v}-3", version, False, "alice", "a", properties=expiry)
    flags, rc, _ = third.connect(expect_ok=False)
    # 3.1.1: return code 3 (server unavailable); v5: 0x97 quota exceeded
    assert rc.value == (0x97 if version == V5 else 0x88), rc
    third.c.loop_stop()
    other = Paho(qnode.mqtt_port, f"s{v}-b", version, False, "bob", "b", properties=expiry)
    other.connect()  # bob has quota of his own
    other.close()
    assert "max_saved_sessions_per_user" in qnode.log()
    # a session that ends frees its place
    for cid in (f"s{v}-1", f"s{v}-2", f"s{v}-b"):
        user, pw = ("bob", "b") if cid.endswith("-b") else ("alice", "a")
        wipe(qnode, cid, user, pw)
    again = Paho(qnode.mqtt_port, f"s{v}-3", version, False, "alice", "a", properties=expiry)
    again.connect()
    again.close()
    wipe(qnode, f"s{v}-3")


def test_state_bytes_per_user_are_capped_other_users_unaffected(qnode):
    c5 = Raw(qnode.mqtt_port, MQTT_5)
    assert c5.connect("bytes-5", "alice", "a", session_expiry_interval=60).reason_code == 0
    # 3.1.1: the QoS 2 id that would pass the user's bytes closes the connection
    c = Raw(qnode.mqtt_port)
    assert c.connect("bytes-3", "alice", "a").reason_code == 0
    held = 0
    while not c.closed and held < 200:  # one at a time: each PUBREC counted
        held += len(pubrecs(c.qos2("q/a", range(held + 1, held + 2))))
    assert 10 < held < 200 and c.closed, held
    assert "max_state_bytes_per_user" in qnode.log()
    # v5 (the same user, another client id): PUBREC 0x97, the connection stays
    got = c5.qos2("q/b", range(1, 3))
    assert [p.reason_code for p in got] == [0x97, 0x97] and not c5.closed
    filters = [SubscriptionRequest(f"q/{i}/" + "x" * 200, 1) for i in range(20)]
    c5.send(Subscribe(1, filters))  # would grow the saved subscriptions by 4 KB: refused
    acks = [p for p in c5.read_until(bool) if isinstance(p, SubAck)]
    assert acks and acks[0].reason_codes == [0x97] * 20
    c5.close()
    # bob is not affected by alice's state
    b = Raw(qnode.mqtt_port)
    assert b.connect("bytes-b", "bob", "b").reason_code == 0
    assert len(pubrecs(b.qos2("q/c", range(1, 21)))) == 20 and not b.closed
    b.close()
    wipe(qnode, "bytes-b", "bob", "b")
    # released ids give the room back
    c = Raw(qnode.mqtt_port)
    assert c.connect("bytes-3", "alice", "a").session_present
    c.send(*(PubRel(pid) for pid in range(1, held + 1)))
    c.read_until(lambda ps: sum(isinstance(p, PubComp) for p in ps) >= held)
    assert len(pubrecs(c.qos2("q/a", range(1, 11)))) == 10 and not c.closed
    c.close()
    for cid in ("bytes-3", "bytes-5"):
        wipe(qnode, cid)
