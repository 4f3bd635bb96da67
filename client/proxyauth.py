"""Proxy credentials (HTTP Basic), shared by every way out through a proxy: CONNECT,
WebSocket upgrades and the tunnel's plain requests.

Where the header goes depends on the request: a plain ``http://`` request sent to a proxy
(absolute URI) carries ``Proxy-Authorization`` itself; an ``https://`` or ``wss://`` one goes
through a CONNECT tunnel, and only the CONNECT may carry it, or the credentials would travel
on to the origin server inside TLS.
"""

from __future__ import annotations

import base64


def basic_proxy_authorization(user: str, password: str | None) -> str:
    token = base64.b64encode(f"{user}:{password or ''}".encode()).decode("ascii")
    return f"Basic {token}"


def proxy_auth_headers(
    auth: tuple[str, str] | None, *, tunnelled: bool
) -> tuple[dict[str, str], dict[str, str] | None]:
    """(headers for the request itself, ``proxy_headers`` for aiohttp's CONNECT)."""
    if auth is None:
        return {}, None
    header = {"Proxy-Authorization": basic_proxy_authorization(*auth)}
    return ({}, header) if tunnelled else (header, None)


__all__ = ["basic_proxy_authorization", "proxy_auth_headers"]
