"""Push registrations: the XML document, parsed and written back.

A queue registration (root ``push-registration``) or a topic one (``push-topic-registration``)::

    <push-registration id="...">            <!-- id: set by the server (required in files) -->
      <destination>orders</destination>     <!-- queue; for a topic: the subscription name -->
      <topic>news</topic>                   <!-- topic registrations only (files) -->
      <durable>true</durable>               <!-- false -->
      <selector><![CDATA[color = 'red']]></selector>
      <link href="http://h/hook" type="application/json" method="POST" rel="..."/>
      <maxRetries>10</maxRetries>           <!-- attempts per round on a transient failure -->
      <retryWaitMillis>1000</retryWaitMillis> <!-- below 100 counts as 100 -->
      <disableOnFailure>false</disableOnFailure>
      <enabled>true</enabled>               <!-- files; a POST always enables -->
      <authentication><basic-auth><username>u</username><password>p</password></basic-auth></authentication>
      <header name="X-Token">abc</header>
    </push-registration>

``rel="template"``: ``href`` holds exactly one ``{...}`` parameter, filled per message;
``rel="destination"``: ``href`` is a queue or topic on another REST server.  Only BASIC
authentication is supported (``digest-auth`` is refused with 400).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from urllib.parse import quote

from yarl import URL

from waystation.gateway.http.rest.links import QUEUES, TOPICS
from waystation.gateway.http.rest.mapping import TOKEN, clean_value
from waystation.gateway.http.rest.names import name_problem
from waystation.gateway.http.rest.xmldoc import xml_text

TEMPLATE = "template"
DESTINATION = "destination"
_PARAM = re.compile(r"\{[^{}/]*\}")
_METHODS = ("POST", "PUT", "PATCH", "GET", "DELETE")


class RegistrationError(ValueError):
    """The document is not a usable registration (the text says why)."""


@dataclass(slots=True)
class Registration:
    id: str
    kind: str  # QUEUES or TOPICS
    destination: str  # the queue; for a topic, the subscription queue's name
    topic: str | None
    href: str
    method: str = "POST"
    type: str | None = None
    rel: str | None = None
    durable: bool = False
    selector: str | None = None
    max_retries: int = 10
    retry_wait_ms: int = 1000
    disable_on_failure: bool = False
    enabled: bool = True
    username: str | None = None
    password: str | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    owner: str | None = None  # the registering user (never taken from a client's document)

    @property
    def address(self) -> str:
        return self.topic if self.kind == TOPICS and self.topic else self.destination

    def target(self, key: str) -> str:
        """The URL for one message (``key`` fills a template's parameter)."""
        if self.rel == TEMPLATE:
            value = quote(key, safe="")
            return _PARAM.sub(lambda _: value, self.href, count=1)
        return self.href

    def to_xml(self, *, with_password: bool = True) -> bytes:
        root_tag = "push-registration" if self.kind == QUEUES else "push-topic-registration"
        root = ET.Element(root_tag, {"id": self.id})
        if with_password and self.owner is not None:  # the store's form only
            root.set("owner", self.owner)

        def sub(tag: str, text: str) -> None:
            ET.SubElement(root, tag).text = text

        sub("destination", self.destination)
        if self.kind == TOPICS and self.topic:
            sub("topic", self.topic)
        sub("durable", _b(self.durable))
        if self.selector:
            sub("selector", self.selector)
        attrs = {"href": self.href, "method": self.method}
        if self.type:
            attrs["type"] = self.type
        if self.rel:
            attrs["rel"] = self.rel
        ET.SubElement(root, "link", attrs)
        sub("maxRetries", str(self.max_retries))
        sub("retryWaitMillis", str(self.retry_wait_ms))
        sub("disableOnFailure", _b(self.disable_on_failure))
        sub("enabled", _b(self.enabled))
        if self.username is not None:
            basic = ET.SubElement(ET.SubElement(root, "authentication"), "basic-auth")
            ET.SubElement(basic, "username").text = self.username
            ET.SubElement(basic, "password").text = (
                (self.password or "") if with_password else "********"
            )
        for name, value in self.headers:
            ET.SubElement(root, "header", {"name": name}).text = value
        return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def _b(v: bool) -> str:
    return "true" if v else "false"


def _bool(root: ET.Element, tag: str, default: bool) -> bool:
    t = xml_text(root, tag)
    if t is None:
        return default
    if t.lower() not in ("true", "false"):
        raise RegistrationError(f"<{tag}> must be true or false, got {t!r}")
    return t.lower() == "true"


def _int(root: ET.Element, tag: str, default: int, lo: int, hi: int) -> int:
    t = xml_text(root, tag)
    if t is None:
        return default
    try:
        v = int(t)
    except ValueError:
        raise RegistrationError(f"<{tag}> must be an integer, got {t!r}") from None
    if not lo <= v <= hi:
        raise RegistrationError(f"<{tag}> must be {lo}..{hi}, got {v}")
    return v


def parse(root: ET.Element, *, rid: str, kind: str, name: str | None) -> Registration:
    """A registration from its XML root.  ``name`` is the queue or topic of the URL it was
    posted to (None for a file from the store, which must name it itself)."""
    expected = "push-registration" if kind == QUEUES else "push-topic-registration"
    if root.tag != expected:
        raise RegistrationError(f"expected a <{expected}> document, got <{root.tag}>")
    link = root.find("link")
    if link is None or not (link.get("href") or "").strip():
        raise RegistrationError('<link href="..."/> is required')
    href = (link.get("href") or "").strip()
    url = URL(href)
    if url.scheme not in ("http", "https") or not url.host:
        raise RegistrationError(f"link href {href!r} must be an absolute http(s) URL")
    rel = (link.get("rel") or "").strip() or None
    if rel == TEMPLATE and len(_PARAM.findall(href)) != 1:
        raise RegistrationError(
            f'rel="template" needs exactly one {{...}} parameter in href {href!r}'
        )
    method = (link.get("method") or "POST").strip().upper()
    if method not in _METHODS:
        raise RegistrationError(f"link method {method!r} must be one of {', '.join(_METHODS)}")
    if root.find("authentication/digest-auth") is not None:
        raise RegistrationError("digest-auth is not supported; use basic-auth")
    username = password = None
    basic = root.find("authentication/basic-auth")
    if basic is not None:
        username = xml_text(basic, "username") or ""
        password = xml_text(basic, "password") or ""
    headers: list[tuple[str, str]] = []
    for h in root.findall("header"):
        hn = (h.get("name") or "").strip()
        hv = (h.text or "").strip()
        if not TOKEN.match(hn) or not clean_value(hv):
            raise RegistrationError(f"invalid <header name={hn!r}>")
        headers.append((hn, hv))
    topic: str | None = None
    destination = xml_text(root, "destination")
    if kind == TOPICS:
        topic = name or xml_text(root, "topic")
        if not topic:
            raise RegistrationError("<topic> is required in a topic registration file")
        if name is not None:  # posted: the server names the subscription
            destination = f"{topic}.push-{rid}"
        elif not destination:
            raise RegistrationError("<destination> (the subscription name) is required")
    else:
        destination = name or destination
        if not destination:
            raise RegistrationError("<destination> (the queue) is required")
    for what, value in (("destination", destination), ("topic", topic)):
        why = name_problem(value) if value is not None else None
        if why is not None:
            raise RegistrationError(f"invalid {what} name: {why}")
    return Registration(
        id=rid,
        kind=kind,
        destination=destination,
        topic=topic,
        href=href,
        method=method,
        type=(link.get("type") or "").strip() or None,
        rel=rel,
        durable=_bool(root, "durable", False),
        selector=xml_text(root, "selector"),
        max_retries=_int(root, "maxRetries", 10, 1, 1_000_000),
        retry_wait_ms=_int(root, "retryWaitMillis", 1000, 0, 86_400_000),
        disable_on_failure=_bool(root, "disableOnFailure", False),
        enabled=_bool(root, "enabled", True),
        username=username,
        password=password,
        headers=headers,
    )


__all__ = ["DESTINATION", "TEMPLATE", "Registration", "RegistrationError", "parse"]
