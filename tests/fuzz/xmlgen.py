"""REST push-registration documents for the fuzzers: pieces of XML to put together any
way, hostile documents (entity expansion, external entities, DTDs), and valid registrations
drawn by hypothesis (``registrations``), written as the node writes them (``to_xml``)."""

from __future__ import annotations

from hypothesis import strategies as st

from waystation.gateway.http.rest.links import QUEUES, TOPICS
from waystation.gateway.http.rest.registration import Registration

xml_pieces = st.sampled_from(
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


_word = st.from_regex(r"\A[a-z][a-z0-9]{0,9}\Z")
_text = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp", "Zs")),
    min_size=1,
    max_size=20,
)


@st.composite
def registrations(draw: st.DrawFn) -> Registration:
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
