"""Small XML documents from clients (queue, topic and push registration documents).

A document type declaration can declare entities that expand into URLs, headers or megabytes
of text, so none is accepted.  The refusal happens inside expat, after it decoded the bytes
(UTF-8, UTF-16 with or without a BOM, an ``encoding=`` declaration), so no encoding slips past
it, which a byte search for ``<!DOCTYPE`` could not promise (defusedxml's approach, without
the dependency).  Elements nested deeper than :data:`MAX_DEPTH` are refused there too.
Only then is the tree built, by the same expat.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import NoReturn
from xml.parsers import expat

from aiohttp import web

from waystation.gateway.http.rest.errors import fail

MAX_XML = 64 * 1024
MAX_DEPTH = 32  # the documents served are four levels deep; deeper is hostile


class _Declaration(Exception):
    pass


class _TooDeep(Exception):
    pass


def _refuse(*_: object) -> NoReturn:
    raise _Declaration


def parse_xml(body: bytes, what: str) -> ET.Element:
    """The root element of a small XML document, or 400 (413) saying why it is unusable."""
    if len(body) > MAX_XML:
        raise fail(web.HTTPRequestEntityTooLarge, f"{what} document is larger than {MAX_XML} bytes")
    guard = expat.ParserCreate()
    guard.StartDoctypeDeclHandler = _refuse
    guard.EntityDeclHandler = _refuse
    guard.UnparsedEntityDeclHandler = _refuse
    guard.ExternalEntityRefHandler = _refuse
    depth = 0

    def start(*_: object) -> None:
        nonlocal depth
        depth += 1
        if depth > MAX_DEPTH:
            raise _TooDeep

    def end(*_: object) -> None:
        nonlocal depth
        depth -= 1

    guard.StartElementHandler = start
    guard.EndElementHandler = end
    try:
        guard.Parse(body, True)
        return ET.fromstring(body)
    except _Declaration:
        raise fail(
            web.HTTPBadRequest, f"malformed {what} XML: DTDs and entities are not accepted"
        ) from None
    except _TooDeep:
        raise fail(
            web.HTTPBadRequest, f"malformed {what} XML: elements nested deeper than {MAX_DEPTH}"
        ) from None
    except (expat.ExpatError, ET.ParseError) as e:
        raise fail(web.HTTPBadRequest, f"malformed {what} XML: {e}") from None
    except (LookupError, ValueError) as e:
        # the ``encoding=`` declaration names no codec or no text one (LookupError), one
        # expat cannot use (multi-byte) or whose codec failed (ValueError); e may quote it
        why = str(e)[:200]
        raise fail(web.HTTPBadRequest, f"malformed {what} XML: unusable encoding ({why})") from None


def xml_text(el: ET.Element, tag: str) -> str | None:
    """The stripped text of the child ``tag``, or None when it is missing or blank."""
    child = el.find(tag)
    if child is None or child.text is None:
        return None
    return child.text.strip() or None


def xml_bool(el: ET.Element, tag: str, default: bool) -> bool:
    text = xml_text(el, tag)
    if text is None:
        return default
    if text.lower() not in ("true", "false"):
        raise fail(web.HTTPBadRequest, f"<{tag}> must be true or false, got {text!r}")
    return text.lower() == "true"


__all__ = ["MAX_XML", "parse_xml", "xml_bool", "xml_text"]
