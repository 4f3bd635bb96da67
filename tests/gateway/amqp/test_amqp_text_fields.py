"""Text fields of a client's frames that are not valid UTF-8 (ASCII for symbols), against a
real node: proton's binding decodes them as they are read, and a field that does not decode
is the client's malformed frame, answered ``amqp:decode-error`` naming the field, never
"internal error" with a traceback.  An ``open`` is answered with ``open`` then ``close``
(spec 2.4.1) and nothing is begun; an ``attach`` is refused (attach, then detach with the
error, spec 2.6.3) and the connection carries on."""

from __future__ import annotations

import socket
import time

import pytest
from amqpnode import AmqpNode
from proton import Connection, Transport
from test_amqp_pipelined_sasl import ATTACH, BEGIN, CLOSE, OPEN, performatives

from waystation.gateway.amqp.sasl import AMQP_HEADER

DETACH = 0x16
DECODE_ERROR = "amqp:decode-error"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = AmqpNode(tmp_path_factory.mktemp("amqp-text")).start()
    yield n
    n.stop()


def opening(container: str, link: str, *, sender: bool, address: str, caps: str = "") -> bytes:
    """What proton's client writes for ``open``, ``begin``, the attach of ``link`` and that of
    a good sender behind it (security is off: the AMQP header straight away)."""
    conn, t = Connection(), Transport()
    conn.container = container
    t.bind(conn)
    ssn = conn.session()
    conn.open()
    ssn.open()
    lnk = ssn.sender(link) if sender else ssn.receiver(link)
    term = lnk.target if sender else lnk.source
    term.address = address
    if caps:
        term.capabilities.put_symbol(caps)
    lnk.open()
    good = ssn.sender("good")
    good.target.address = "fine"
    good.open()
    data = t.peek(t.pending())
    assert data.startswith(AMQP_HEADER)
    return data


def error_of(fields: object, at: int) -> tuple[str, str]:
    err = fields[at]  # type: ignore[index]
    return str(err.value[0]), str(err.value[1])


def broken(data: bytes, text: str) -> bytes:
    """``data`` with the first byte of ``text`` made 0xA1 (no UTF-8 text starts with it)."""
    assert data.count(text.encode()) == 1, text
    return data.replace(text.encode(), b"\xa1" + text.encode()[1:])


def exchange(node: AmqpNode, data: bytes, wait: float = 1.0) -> list[tuple[int, object]]:
    """The frames the node answers ``data`` with, within ``wait`` seconds."""
    got = b""
    with socket.create_connection(("127.0.0.1", node.amqp_port), timeout=5) as s:
        s.sendall(data)
        deadline = time.monotonic() + wait
        while (left := deadline - time.monotonic()) > 0:
            s.settimeout(left)
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            got += chunk
    # a refusing attach names the link as the client did, which our decoder would refuse
    return performatives(got.replace(broken(b"Zlink", "Zlink"), b"Zlink"))


def test_an_open_whose_container_id_is_not_utf8_is_closed_naming_it(node):
    start = len(node.log())
    frames = exchange(node, broken(opening("Zclient", "l1", sender=True, address="q1"), "Zclient"))
    codes = [c for c, _ in frames]
    assert codes == [-1, OPEN, CLOSE], codes  # nothing begun or attached behind it
    cond, desc = error_of(frames[2][1], 0)
    assert cond == DECODE_ERROR and "container-id" in desc, desc
    assert "Traceback" not in node.log()[start:] and " ERROR " not in node.log()[start:]


@pytest.mark.parametrize(
    ("sender", "text", "field"),
    [
        (True, "Zqueue", "target address"),
        (False, "Zqueue", "source address"),
        (False, "Zlink", "attach: name"),
        (False, "Zcap", "source capabilities"),
    ],
    ids=["target-address", "source-address", "link-name", "capability"],
)
def test_an_attach_with_a_field_not_decodable_is_refused_naming_it(node, sender, text, field):
    start = len(node.log())
    data = opening("c1", "Zlink", sender=sender, address="Zqueue", caps="Zcap")
    frames = exchange(node, broken(data, text))
    codes = [c for c, _ in frames]
    assert codes[:3] == [-1, OPEN, BEGIN] and CLOSE not in codes, codes
    detaches = [f for c, f in frames if c == DETACH]
    assert len(detaches) == 1, codes
    cond, desc = error_of(detaches[0], 2)
    assert cond == DECODE_ERROR and field in desc, desc
    assert codes.count(ATTACH) == 2, codes  # the refusal's, and the good sender's: the
    # connection and its other links carry on
    assert "Traceback" not in node.log()[start:] and " ERROR " not in node.log()[start:]
