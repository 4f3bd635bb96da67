"""The core's client-state store as MQTT sessions use it (core/client_state.py and the
engine's state methods), in process on a real file journal: one record per key with group
keys, the owner saved with the state and enforced, the per-user quotas counted, and all of it
the same after a restart."""

from __future__ import annotations

import pytest
from enginekit import make_engine

from waystation.core.engine import Engine, EngineConfig
from waystation.core.limits import LimitExceeded, Limits
from waystation.core.security import SYSTEM, NotAuthorized, Principal, SecurityManager
from waystation.core.store.journal import FileJournal

ALICE, BOB = Principal("alice"), Principal("bob")
LIMITS = Limits(max_saved_sessions_per_user=2, max_state_bytes_per_user=2000)


async def secured(data_dir) -> Engine:
    journal, bindings = FileJournal(data_dir / "journal"), FileJournal(data_dir / "bindings")
    eng = Engine(
        EngineConfig(data_dir=data_dir, limits=LIMITS),
        journal,
        bindings=bindings,
        security=SecurityManager(enabled=True),
    )
    await eng.start()
    return eng


def test_group_keys_one_record_each(run, tmp_path):
    async def go():
        eng = await make_engine(tmp_path)
        s = eng.open_session(ALICE, "mqtt", "here", client_id="c")
        for pid in range(1, 6):
            await s.save_state(f"qos2_in/{pid}", f"dup-{pid}")
        await s.drop_state("qos2_in/2")
        with pytest.raises(ValueError):
            s.save_state("qos2_in/", "a group key is not saved into")
        assert s.load_state("qos2_in/") == {"1": "dup-1", "3": "dup-3", "4": "dup-4", "5": "dup-5"}
        await eng.stop()

        eng = await make_engine(tmp_path)
        s = eng.open_session(ALICE, "mqtt", "here", client_id="c")
        assert sorted(s.load_state("qos2_in/")) == ["1", "3", "4", "5"]
        await s.drop_state("qos2_in/")
        assert s.load_state("qos2_in/") is None and not eng.client_states.scopes()
        await eng.stop()

    run(go())


def test_owner_and_quotas_are_kept_and_enforced_across_a_restart(run, tmp_path):
    async def go():
        eng = await secured(tmp_path)
        a1 = eng.open_session(ALICE, "mqtt", "here", client_id="a1")
        await a1.save_state("subscriptions", [])
        b = eng.open_session(BOB, "mqtt", "here", client_id="a1")
        for touch in (
            lambda: b.load_state("subscriptions"),
            lambda: b.save_state("subscriptions", []),
            lambda: b.drop_state("subscriptions"),
        ):
            with pytest.raises(NotAuthorized):
                touch()
        await eng.stop()

        eng = await secured(tmp_path)
        b = eng.open_session(BOB, "mqtt", "here", client_id="a1")
        with pytest.raises(NotAuthorized):
            b.load_state("subscriptions")
        assert eng.open_session(SYSTEM, "mqtt", "x", client_id="a1").load_state("expires") is None
        a2 = eng.open_session(ALICE, "mqtt", "here", client_id="a2")
        await a2.save_state("subscriptions", [])
        a3 = eng.open_session(ALICE, "mqtt", "here", client_id="a3")
        with pytest.raises(LimitExceeded, match="max_saved_sessions_per_user"):
            a3.save_state("subscriptions", [])
        b2 = eng.open_session(BOB, "mqtt", "here", client_id="b2")
        await b2.save_state("subscriptions", [])  # bob's own quota
        with pytest.raises(LimitExceeded, match="max_state_bytes_per_user"):
            for pid in range(100):
                await a2.save_state(f"qos2_in/{pid}", "x" * 40)
        scopes, used = eng.client_states.usage("alice")
        assert scopes == 2 and used <= 2000
        await a2.save_state("subscriptions", [])  # a save that does not grow always passes
        await eng.stop()

        eng = await secured(tmp_path)  # the same counts, rebuilt from the journal
        assert eng.client_states.usage("alice") == (scopes, used)
        a2 = eng.open_session(ALICE, "mqtt", "here", client_id="a2")
        await a2.drop_state("qos2_in/")
        await a2.drop_state("subscriptions")  # the last key: the owner goes too
        assert eng.client_states.usage("alice")[0] == 1
        b = eng.open_session(BOB, "mqtt", "here", client_id="a2")
        await b.save_state("subscriptions", [])  # a2 is free: bob may have it now
        await eng.stop()

    run(go())
