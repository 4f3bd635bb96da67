"""Journal file naming and the few durable file-system steps (create, marker, dir fsync).

Names are for humans and for finding files; the header inside a file is what counts.
Data files are ``{prefix}-{seq:012d}.{ext}``, spares ``{prefix}-free-{k:06d}.{ext}``,
compaction output ``<data name>.cmp`` until the ``{prefix}.compact`` marker commits it.
"""

from __future__ import annotations

import fcntl
import json
import os
import zlib
from pathlib import Path

_ZEROS = bytes(64 << 10)  # zeros written in 64 KiB pieces: a 1 MiB buffer stayed resident


class Layout:
    def __init__(self, directory: Path, prefix: str, ext: str) -> None:
        self.directory = directory
        self.prefix = prefix
        self.ext = ext

    def data_path(self, seq: int) -> Path:
        return self.directory / f"{self.prefix}-{seq:012d}.{self.ext}"

    def free_path(self, k: int) -> Path:
        return self.directory / f"{self.prefix}-free-{k:06d}.{self.ext}"

    def cmp_path(self, seq: int) -> Path:
        return self.directory / f"{self.prefix}-{seq:012d}.{self.ext}.cmp"

    @property
    def marker_path(self) -> Path:
        return self.directory / f"{self.prefix}.compact"

    def journal_files(self) -> list[Path]:
        return sorted(self.directory.glob(f"{self.prefix}-*.{self.ext}"))

    def cmp_files(self) -> list[Path]:
        return sorted(self.directory.glob(f"{self.prefix}-*.{self.ext}.cmp"))

    def tmp_files(self) -> list[Path]:
        found = [*self.directory.glob(f"{self.prefix}-*.tmp")]
        found += self.directory.glob(f"{self.prefix}.compact.tmp")
        return sorted(found)

    def free_index(self, path: Path) -> int | None:
        stem = path.name[len(self.prefix) + 1 : -len(self.ext) - 1]
        if stem.startswith("free-") and stem[5:].isdigit():
            return int(stem[5:])
        return None

    def lock(self) -> int:
        """Take the directory's lock (released when the fd closes, or the process dies);
        raises BlockingIOError if another journal holds it."""
        fd = os.open(self.directory / f"{self.prefix}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        return fd

    def fsync_dir(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def create(self, path: Path, size: int, header: bytes) -> None:
        """Create ``path`` at ``size`` by writing zeros (so later fdatasyncs need no
        metadata update), made durable before it appears under its name."""
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, header)
            left = size - len(header)
            while left > 0:
                left -= os.write(fd, _ZEROS[: min(left, len(_ZEROS))])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
        self.fsync_dir()

    def write_marker(self, old_max: int, new_seqs: list[int]) -> None:
        body = json.dumps({"old_max": old_max, "new": new_seqs}).encode()
        tmp = self.marker_path.with_name(self.marker_path.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(body + b"\n" + str(zlib.crc32(body)).encode())
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, self.marker_path)
        self.fsync_dir()

    def read_marker(self) -> tuple[int, list[int]] | None:
        try:
            raw = self.marker_path.read_bytes()
        except FileNotFoundError:
            return None
        body, _, crc = raw.rpartition(b"\n")
        if not crc.isdigit() or zlib.crc32(body) != int(crc):
            raise ValueError(f"{self.marker_path} is damaged")
        doc = json.loads(body)
        return int(doc["old_max"]), [int(s) for s in doc["new"]]
