"""Set-up for the browser tests: installs what is missing (Debian chromium, the npm
packages the pages load, the Python playwright package) and serves the test pages from a
small aiohttp static server on loopback.  Playwright drives Debian's chromium; its own
browser downloads are never used."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.typedefs import Handler
from nodekit import free_port

HERE = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
APT_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}


def _apt_install(*packages: str) -> None:
    cmd = ["apt-get", "install", "-y", "-q", *packages]
    if subprocess.run(cmd, env=APT_ENV, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=APT_ENV, check=True, capture_output=True)
        subprocess.run(cmd, env=APT_ENV, check=True, capture_output=True)


def ensure_chromium() -> str:
    if not Path(CHROMIUM).exists():
        _apt_install("chromium")
    return CHROMIUM


# Each page's library, by the folder of its browser bundle under node_modules.
BUNDLES = {
    "stompjs": Path("@stomp/stompjs/bundles"),
    "sockjs": Path("sockjs-client/dist"),
    "rhea": Path("rhea/dist"),
    "mqtt": Path("mqtt/dist"),
}
PAGES = ("amqp", "mqtt")  # /<name> is <name>.html, with <name>.js; the STOMP page is /


def ensure_node_modules() -> Path:
    modules = HERE / "node_modules"
    if not all((modules / folder).is_dir() for folder in BUNDLES.values()):
        if shutil.which("npm") is None:
            _apt_install("npm")
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=HERE, check=True)
    return modules


def ensure_playwright() -> None:
    try:
        import playwright  # noqa: F401
    except ImportError:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "playwright>=1.40"], check=True
        )


def _file(name: str) -> Handler:
    async def serve(_: web.Request) -> web.FileResponse:
        return web.FileResponse(HERE / name)

    return serve


class PageServer:
    """The pages, their scripts and the UMD bundles from node_modules, on its own thread."""

    def __init__(self, modules: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_get("/", _file("index.html"))
        app.router.add_get("/app.js", _file("app.js"))
        app.router.add_get("/wsrecord.js", _file("wsrecord.js"))
        for name in PAGES:
            app.router.add_get(f"/{name}", _file(f"{name}.html"))
            app.router.add_get(f"/{name}.js", _file(f"{name}.js"))
        for name, folder in BUNDLES.items():
            app.router.add_static(f"/lib/{name}", modules / folder)
        self.runner = web.AppRunner(app, access_log=None)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> PageServer:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    async def _start(self) -> None:
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture(scope="session")
def chromium() -> str:
    ensure_playwright()
    return ensure_chromium()


@pytest.fixture(scope="module")
def playwright(chromium: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="session")
def page_server() -> Iterator[PageServer]:
    server = PageServer(ensure_node_modules()).start()
    yield server
    server.stop()
