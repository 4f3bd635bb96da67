"""``[[routes]]``: reach a node this one has no bridge to through a node it has one to.

``site-c::x`` sent here with a route ``node = "site-c", via = "site-b"`` is stored in
``sf.site-b`` under its full name; site-b, bridged (or routed) onward, does the same, so each
hop keeps duplicate detection and the trace id.  Checked against ``[[bridges]]`` (declared
before ``routes`` in ``Config``, so already validated when this runs).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, Field, ValidationInfo

from waystation.config.errors import Loc, Problems, format_loc
from waystation.config.fields import NodeName, Section


class RouteConfig(Section):
    node: NodeName = Field(description="Destination node, as in 'node::address'.")
    via: NodeName = Field(
        description="Next hop: the remote_node of one of this node's Waystation bridges "
        '(any direction but "inbound": a node that dials in is a next hop too).'
    )


def _check(routes: list[RouteConfig], info: ValidationInfo) -> list[RouteConfig]:
    """Each route leads elsewhere, once, through a node this one bridges to."""
    data: dict[str, Any] = info.data
    node = data.get("node")
    own: str | None = getattr(node, "name", None)
    bridges = data.get("bridges")  # absent when [[bridges]] itself was invalid: said there
    direct = (
        None
        if bridges is None
        else {b.remote_node: b.name for b in bridges if not b.foreign and b.direction != "inbound"}
    )
    problems: list[tuple[Loc, str]] = []
    first: dict[str, int] = {}
    for i, route in enumerate(routes):
        if route.node == own:
            problems.append(((i, "node"), f"{route.node!r} is this node's own name"))
        elif route.node in first:
            where = format_loc(("routes", first[route.node]))
            problems.append(((i, "node"), f"duplicate route to {route.node!r} (first at {where})"))
        elif route.node == route.via:
            problems.append(((i, "via"), f"a route to {route.node!r} cannot go via itself"))
        elif direct is not None and route.node in direct:
            problems.append(
                (
                    (i, "node"),
                    f"{route.node!r} has a bridge of its own ({direct[route.node]!r}): "
                    "a route to it would never be used",
                )
            )
        first.setdefault(route.node, i)
        if route.via == own and route.node != own:
            problems.append(((i, "via"), f"{route.via!r} is this node's own name"))
        elif direct is not None and route.via not in direct and route.via != route.node:
            known = ", ".join(repr(n) for n in sorted(direct)) or "none"
            problems.append(
                (
                    (i, "via"),
                    f"no [[bridges]] entry to node {route.via!r} (bridged nodes: {known})",
                )
            )
    if problems:
        raise Problems(problems)
    return routes


Routes = Annotated[list[RouteConfig], AfterValidator(_check)]


__all__ = ["RouteConfig", "Routes"]
