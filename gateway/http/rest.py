"""Placeholder replaced while issue 5 is built."""

from aiohttp import web


def setup(app: web.Application, ctx: object) -> None:
    return None
