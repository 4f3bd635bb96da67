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


_xml_pieces = st.sampled_from(
    ['<push-registration>', '</push-registration>', '<push-topic-registration id="x">',
     '<link href="http://h/p"/>', '<link href="http://h/{id}" rel="template"/>',
     '<link href="ftp://h"/>', '<link method="TRACE" href="https://h/"/>', '<destination>',
     '</destination>', 'q1', 'sf.q', 'a::b', '<topic>t</topic>', '<durable>true</durable>',
     '<maxRetries>-1</maxRetries>', '<retryWaitMillis>99999999999999</retryWaitMillis>',
     '<header name="X-A">v</header>', '<header name="bad name">v</header>', '<selector>',
     '</selector>', '<![CDATA[a > 1]]>', '<authentication><basic-auth><username>u</username>',
     '</basic-auth></authentication>', '<digest-auth/>', '&amp;', '&lt;', '&foo;', '&#0;',
     '&#x110000;', '<!DOCTYPE r>', '<!ENTITY e "x">', '<?xml version="1.0"?>', '<a>', '</a>',
     '\x00', '\ud800', 'é', ' ', '\n']
)  # fmt: skip


@BUDGET
def test_any_body_gives_a_registration_or_a_clear_4xx(examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None)
    @given(
        body=st.binary(max_size=300)
        | st.lists(_xml_pieces, max_size=40).map(
            lambda p: "".join(p).encode("utf-8", "surrogatepass")
        ),
        kind=st.sampled_from((QUEUES, TOPICS)),
        name=st.none() | st.just("orders"),
    )
    def run(body: bytes, kind: str, name: str | None) -> None:
        _post(body, kind, name)

    run()


LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE push-registration [
 <!ENTITY a "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">
 <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
 <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
 <!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">
 <!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;">
]>
<push-registration><link href="http://h/&e;"/><selector>&e;</selector></push-registration>"""
XXE = b"""<?xml version="1.0"?>
<!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<push-registration><link href="http://h/p"/><header name="X-Leak">&x;</header></push-registration>"""
EXTERNAL_DTD = b"""<?xml version="1.0"?>
<!DOCTYPE push-registration SYSTEM "http://127.0.0.1:9/evil.dtd">
<push-registration><link href="http://h/p"/></push-registration>"""
PARAMETER = b"""<?xml version="1.0"?>
<!DOCTYPE r [<!ENTITY % p SYSTEM "http://127.0.0.1:9/p.dtd"> %p;]>
<push-registration><link href="http://h/p"/></push-registration>"""
PLAIN_DTD = b"""<!DOCTYPE push-registration [<!ELEMENT push-registration ANY>]>
<push-registration><link href="http://h/p"/></push-registration>"""


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


def test_oversized_document_is_413() -> None:
    body = b"<push-registration>" + b" " * MAX_XML + b"</push-registration>"
    with pytest.raises(web.HTTPRequestEntityTooLarge):
        parse_xml(body, WHAT)


_word = st.from_regex(r"\A[a-z][a-z0-9]{0,9}\Z")
_text = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp", "Zs")),
    min_size=1,
    max_size=20,
)


@st.composite
def _registrations(draw: st.DrawFn) -> Registration:
    kind = draw(st.sampled_from((QUEUES, TOPICS)))
    topic = draw(_word) if kind == TOPICS else None
    dest = draw(_word)
    rel = draw(st.sampled_from((None, "template", "destination")))
    href = f"http://{draw(_word)}.example/{draw(_word)}" + ("/{id}" if rel == "template" else "")
    user = draw(st.none() | _text)
    return Registration(
        id=draw(_word),
        kind=kind,
        destination=dest,
        topic=topic,
        href=href,
        method=draw(st.sampled_from(("POST", "PUT", "PATCH", "GET", "DELETE"))),
        type=draw(st.none() | st.just("application/json")),
        rel=rel,
        durable=draw(st.booleans()),
        selector=draw(st.none() | _text),
        max_retries=draw(st.integers(1, 1_000_000)),
        retry_wait_ms=draw(st.integers(0, 86_400_000)),
        disable_on_failure=draw(st.booleans()),
        enabled=draw(st.booleans()),
        username=user,
        password=None if user is None else draw(_text),
        headers=draw(
            st.lists(st.tuples(st.from_regex(r"\AX-[A-Za-z]{1,8}\Z"), _text), max_size=3)
        ),  # fmt: skip
    )


@BUDGET
def test_valid_registrations_round_trip(examples: int) -> None:
    @settings(max_examples=examples, deadline=None, database=None)
    @given(reg=_registrations())
    def run(reg: Registration) -> None:
        again = parse(parse_xml(reg.to_xml(), WHAT), rid=reg.id, kind=reg.kind, name=None)
        assert again == reg

    run()
