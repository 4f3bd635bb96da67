"""Where push registrations may send: public addresses, and networks the config allows.

Why: a push registration makes the node itself send HTTP requests to a URL any consumer
chooses; without a rule it reaches what only the node can reach (127.0.0.1, the cloud
metadata address 169.254.169.254, the private network behind the node): server-side request
forgery.  So a target must be a global unicast address unless its network is listed in
``[acceptors.http.rest] push_allow``.

Checked three times, so that DNS cannot be used to get round it:

- at registration: every address the host name resolves to (400 when one is refused);
- at delivery, in the resolver of the push HTTP client: the addresses aiohttp is about to
  connect to are the ones checked, so a name that re-resolves to 127.0.0.1 later (DNS
  rebinding) is refused at that moment, not just at registration;
- a literal address in a delivery URL (aiohttp does not resolve those), e.g. a
  ``msg-create-with-id`` link a remote server answered, and redirects are not followed.

A delivery to a refused target dead-letters the message (``remote-rejected``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from yarl import URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class TargetRefused(OSError):
    """A push target outside what is allowed (the text says which address and why)."""


def _kind(ip: IPAddress) -> str:
    for attr, name in (
        ("is_loopback", "loopback"),
        ("is_link_local", "link-local"),
        ("is_private", "private"),
        ("is_multicast", "multicast"),
        ("is_unspecified", "unspecified"),
        ("is_reserved", "reserved"),
    ):
        if getattr(ip, attr):
            return name
    return "not public"


class PushGuard:
    def __init__(self, allow: list[str]) -> None:
        self.allow: list[IPNetwork] = [ipaddress.ip_network(n, strict=False) for n in allow]

    def check_ip(self, host: str, address: str) -> None:
        """TargetRefused unless ``address`` (what ``host`` resolved to) may be reached."""
        ip: IPAddress = ipaddress.ip_address(address.split("%", 1)[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if any(ip in net for net in self.allow):
            return
        if ip.is_global and not ip.is_multicast:
            return
        shown = host if host == str(ip) else f"{host} ({ip})"
        raise TargetRefused(
            f"push target {shown} is a {_kind(ip)} address; such targets must be listed in "
            "[acceptors.http.rest] push_allow"
        )

    def check_literal(self, url: str) -> None:
        """Check ``url``'s host when it is a literal address (names go through the
        resolver); TargetRefused, or ValueError for a URL without a host."""
        host = URL(url).host
        if not host:
            raise ValueError(f"push target {url!r} has no host")
        try:
            ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            return
        self.check_ip(host, host)

    async def check_url(self, url: str) -> None:
        """Every address ``url``'s host resolves to now (at registration)."""
        u = URL(url)
        host = u.host
        if not host:
            raise ValueError(f"push target {url!r} has no host")
        self.check_literal(url)
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, u.port or 80, type=socket.SOCK_STREAM)
        except OSError as e:
            raise TargetRefused(
                f"push target host {host!r} does not resolve ({e.strerror})"
            ) from None
        for info in infos:
            self.check_ip(host, str(info[4][0]))

    def resolver(self) -> AbstractResolver:
        return GuardedResolver(self)


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver, refusing names that resolve to an address not allowed."""

    def __init__(self, guard: PushGuard) -> None:
        self.guard = guard
        self.inner = ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self.inner.resolve(host, port, family)
        for r in found:
            self.guard.check_ip(host, r["host"])
        return found

    async def close(self) -> None:
        await self.inner.close()


def refused_in(e: BaseException) -> TargetRefused | None:
    """The TargetRefused behind an aiohttp connection error, if that is what it was."""
    seen: set[int] = set()
    cur: Any = e
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, TargetRefused):
            return cur
        seen.add(id(cur))
        cur = getattr(cur, "os_error", None) or cur.__cause__ or cur.__context__
    return None


__all__ = ["GuardedResolver", "PushGuard", "TargetRefused", "refused_in"]
