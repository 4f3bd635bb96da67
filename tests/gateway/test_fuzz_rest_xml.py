"""Fuzzing the REST push-registration XML path: gateway/http/rest/xmldoc.py, then
gateway/http/rest/registration.py, exactly as a POSTed document (or a stored file) goes.

Properties: any body gives a registration, a 400/413 whose text says what was wrong, or a
RegistrationError (the handler's 400), never another exception; hostile XML (entity
expansion, external entities, any DTD, in any encoding, and deep nesting) is refused with a
clear error at bounded cost; a valid registration written back by ``to_xml`` parses to the
same registration.

The default run is a bounded budget (seconds); ``-m fuzz`` runs the long budget.
"""

from __future__ import annotations

import time

import pytest
from aiohttp import web
from fuzz.xmlgen import (
    EXTERNAL_DTD,
    LAUGHS,
    PARAMETER,
    PLAIN_DTD,
    XXE,
    registrations,
    xml_pieces,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from waystation.gateway.http.rest.links import QUEUES, TOPICS
from waystation.gateway.http.rest.registration import Registration, RegistrationError, parse
from waystation.gateway.http.rest.xmldoc import MAX_XML, parse_xml

LONG = [pytest.mark.fuzz, pytest.mark.timeout(3600)]  # opt in: -m fuzz
BUDGET = pytest.mark.parametrize(
    "examples",
    [pytest.param(200, id="quick"), pytest.param(20_000, id="long", marks=LONG)],
)
WHAT = "push registration"
REFUSED_DTD = "DTDs and entities are not accepted"


def _post(body: bytes, kind: str = QUEUES, name: str | None = "orders") -> Registration | str:
    """What the push-registration handler makes of ``body``: the registration, or the text
    of the 4xx it answers (every other exception fails the test)."""
    try:
        root = parse_xml(body, WHAT)
        return parse(root, rid="r1", kind=kind, name=name)
    except web.HTTPException as e:
        assert e.status in (400, 413), e.status
        assert e.text and (e.text.startswith(f"malformed {WHAT} XML") or "larger than" in e.text)
        return e.text
    except RegistrationError as e:
        assert str(e)
        return str(e)


@BUDGET
def test_any_body_gives_a_registration_or_a_clear_4xx(examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None)
    @given(
        body=st.binary(max_size=300)
        | st.lists(xml_pieces, max_size=40).map(
            lambda p: "".join(p).encode("utf-8", "surrogatepass")
        ),
        kind=st.sampled_from((QUEUES, TOPICS)),
        name=st.none() | st.just("orders"),
    )
    def run(body: bytes, kind: str, name: str | None) -> None:
        _post(body, kind, name)

    run()


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(LAUGHS, id="billion-laughs"),
        pytest.param(XXE, id="external-entity"),
        pytest.param(EXTERNAL_DTD, id="external-dtd"),
        pytest.param(PARAMETER, id="parameter-entity"),
        pytest.param(PLAIN_DTD, id="any-dtd"),
        pytest.param(
            LAUGHS.decode().replace('"1.0"', '"1.0" encoding="UTF-16"').encode("utf-16"),
            id="utf16-bom",
        ),  # fmt: skip
        pytest.param(XXE.decode().encode("utf-16-le"), id="utf16-no-bom"),
        pytest.param(b"\xef\xbb\xbf" + EXTERNAL_DTD, id="utf8-bom"),
    ],
)
def test_hostile_documents_are_refused(doc: bytes) -> None:
    t0 = time.monotonic()
    answer = _post(doc)
    assert isinstance(answer, str), f"accepted: {answer!r}"
    assert REFUSED_DTD in answer or "malformed" in answer, answer
    if doc.startswith((b"<?xml", b"\xef\xbb\xbf", b"<!DOCTYPE")):
        assert REFUSED_DTD in answer, answer
    assert time.monotonic() - t0 < 1.0


@pytest.mark.parametrize("depth", [100, 1_000, 9_000])
def test_deep_nesting_is_refused_with_a_clear_error(depth: int) -> None:
    """A push registration is four levels deep; thousands of nested elements are hostile
    (stack and tree cost for whoever walks the document) and must get a 400 saying so, not
    be parsed and silently ignored."""
    body = (
        b'<push-registration><link href="http://h/p"/>'
        + b"<a>" * depth
        + b"</a>" * depth
        + b"</push-registration>"
    )
    assert len(body) <= MAX_XML
    t0 = time.monotonic()
    answer = _post(body)
    assert isinstance(answer, str), f"deep nesting ({depth}) was accepted"
    assert "deep" in answer or "nest" in answer, answer
    assert time.monotonic() - t0 < 1.0


@pytest.mark.parametrize(
    "encoding", ["uuf-8", "base64", "rot13", "hex", "idna", "undefined", "utf-7", "x" * 500]
)
def test_an_encoding_expat_cannot_use_is_a_clear_400(encoding: str) -> None:
    """``encoding=`` naming no codec, or one that is not a text encoding, or one expat cannot
    use (multi-byte): a 400 saying so (expat raises LookupError for the first two, which is
    no ValueError), with the quoted name cut short."""
    doc = f'<?xml version="1.0" encoding="{encoding}"?><push-registration/>'.encode()
    answer = _post(doc)
    assert isinstance(answer, str), f"accepted: {answer!r}"
    assert answer.startswith(f"malformed {WHAT} XML: ") and "encoding" in answer, answer
    assert len(answer) < 300, answer


def test_oversized_document_is_413() -> None:
    body = b"<push-registration>" + b" " * MAX_XML + b"</push-registration>"
    with pytest.raises(web.HTTPRequestEntityTooLarge):
        parse_xml(body, WHAT)


@BUDGET
def test_valid_registrations_round_trip(examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None)
    @given(reg=registrations())
    def run(reg: Registration) -> None:
        again = parse(parse_xml(reg.to_xml(), WHAT), rid=reg.id, kind=reg.kind, name=None)
        assert again == reg

    run()
