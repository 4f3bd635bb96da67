"""Ids the node makes up for a client tell nothing about it (issue 27, finding 10): the STOMP
``CONNECTED`` ``session`` header was ``id(self)`` in hex, a memory address of the node."""

from __future__ import annotations

import os
import re

import pytest
import stomp
from nodekit import SECURITY_USERS, NodeProcess, RawStomp, header


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("ids"), extra_config=SECURITY_USERS)
    yield n.start()
    n.stop()


def _session_id(node: NodeProcess) -> str:
    raw = RawStomp(node.stomp_port)
    try:
        frame = raw.connect(extra="login:app\npasscode:secret\n")
        assert frame.startswith(b"CONNECTED"), frame
        sid = header(frame, "session")
        assert sid is not None
        return sid
    finally:
        raw.close()


def test_stomp_connected_session_ids_are_random_not_memory_addresses(node):
    ids = [_session_id(node) for _ in range(20)]
    # 128 random bits each; addresses of one process share their leading digits (and are
    # 12 hex digits on x86-64), and a counter's would share all but the last
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids), ids
    assert len(set(ids)) == 20
    assert os.path.commonprefix(ids) == ""
    assert os.path.commonprefix([i[::-1] for i in ids]) == ""  # nor a common ending


def test_stomp_py_sees_a_session_id_too(node):
    """A real client gets the header (stomp.py puts it in its CONNECTED frame)."""
    seen: list[str] = []

    class Listener(stomp.ConnectionListener):
        def on_connected(self, frame: stomp.utils.Frame) -> None:
            seen.append(frame.headers["session"])

    c = stomp.Connection12([("127.0.0.1", node.stomp_port)])
    c.set_listener("ids", Listener())
    c.connect("app", "secret", wait=True)
    c.disconnect()
    assert len(seen) == 1 and re.fullmatch(r"[0-9a-f]{32}", seen[0]), seen
