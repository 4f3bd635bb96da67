"""Durable push registrations on disk: one XML file ``{id}.xml`` each.

The file is the registration document with ``id``, ``destination`` and ``topic`` filled in
(see :mod:`.registration`) plus the root's ``owner`` attribute, the user it acts for (a
file without one, hand-written or older, acts for the node: see :mod:`.sessions`), so
hand-written files load the same way.  Writes of one
registration happen in order (a late "disabled" save cannot overwrite a newer document or
bring back a deleted one), and a save started from a callback (a registration disabling
itself) is kept and awaited at stop, its failure logged.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from waystation.gateway.http.rest.links import QUEUES, TOPICS
from waystation.gateway.http.rest.registration import Registration, RegistrationError, parse
from waystation.gateway.http.rest.substore import write_durably
from waystation.gateway.http.rest.xmldoc import parse_xml

log = logging.getLogger("waystation.rest.push")
_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")


class PushStore:
    def __init__(self, directory: Path | None) -> None:
        self.directory = directory  # None: durable registrations live in memory only
        self._last: dict[str, asyncio.Task[None]] = {}  # the latest write per registration

    async def save(self, reg: Registration) -> None:
        """Write ``reg`` (raises OSError when it cannot be stored)."""
        if self.directory is not None and reg.durable:
            await asyncio.shield(self._write(reg))

    async def forget(self, reg: Registration) -> None:
        if self.directory is not None and reg.durable:
            path = self.directory / f"{reg.id}.xml"
            await asyncio.shield(self._chain(reg.id, _unlink, path))

    def save_later(self, reg: Registration) -> None:
        """Save from code that cannot wait (a callback); a failure is logged."""
        if self.directory is not None and reg.durable:
            self._write(reg).add_done_callback(lambda t: _report(t, reg))

    def _write(self, reg: Registration) -> asyncio.Task[None]:
        assert self.directory is not None
        return self._chain(reg.id, write_durably, self.directory / f"{reg.id}.xml", reg.to_xml())

    def _chain(self, rid: str, fn: Callable[..., None], *args: object) -> asyncio.Task[None]:
        """Run ``fn(*args)`` in a thread after the registration's previous write."""
        prev = self._last.get(rid)
        task = asyncio.get_running_loop().create_task(_run_after(prev, fn, *args))
        self._last[rid] = task  # also the reference that keeps it alive

        def done(t: asyncio.Task[None]) -> None:
            if self._last.get(rid) is t:
                del self._last[rid]

        task.add_done_callback(done)
        return task

    async def drain(self) -> None:
        """Wait for every write under way (at stop)."""
        while self._last:
            await asyncio.wait(list(self._last.values()))

    async def load(self) -> list[tuple[Path, Registration | Exception]]:
        """Every registration file, parsed (or the reason it cannot be used)."""
        if self.directory is None:
            return []
        files = await asyncio.get_running_loop().run_in_executor(None, _read, self.directory)
        out: list[tuple[Path, Registration | Exception]] = []
        for path, data in files:
            try:
                reg = from_file(data)
            except Exception as e:  # one bad file must not stop the others
                out.append((path, e))
                continue
            reg.durable = True
            out.append((path, reg))
        return out


async def _run_after(
    prev: asyncio.Task[None] | None, fn: Callable[..., None], *args: object
) -> None:
    if prev is not None:
        await asyncio.wait([prev])  # its outcome was reported to whoever started it
    await asyncio.get_running_loop().run_in_executor(None, fn, *args)


def _report(task: asyncio.Task[None], reg: Registration) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error(
            "push store: registration %s (enabled=%s) not saved: %s",
            reg.id,
            reg.enabled,
            task.exception(),
        )


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)


def _read(store: Path) -> list[tuple[Path, bytes]]:
    if not store.is_dir():
        return []
    return [(p, p.read_bytes()) for p in sorted(store.glob("*.xml"))]


def from_file(data: bytes) -> Registration:
    """A registration from a store file (raises RegistrationError or web.HTTPException)."""
    root = parse_xml(data, "push registration")
    rid = (root.get("id") or "").strip()
    if not _ID.match(rid):
        raise RegistrationError(
            f"the root element needs an id attribute of letters, digits, '-', '_' or '.', got {rid!r}"
        )
    kind = TOPICS if root.tag == "push-topic-registration" else QUEUES
    reg = parse(root, rid=rid, kind=kind, name=None)
    owner = root.get("owner")
    reg.owner = owner.strip() if owner and owner.strip() else None
    return reg


def problem(e: Exception) -> str:
    text = e.text if isinstance(e, web.HTTPException) else str(e)
    return (text or "").strip()


__all__ = ["PushStore", "from_file", "problem"]
