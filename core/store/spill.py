"""SpillFile: a FIFO of byte blobs on disk, for queues that must stay memory-bounded (paging).

Not crash-durable, on purpose: durable messages are also in the journal, and the engine
rebuilds its spills on restart, so a spill is scratch space.  Opening a directory deletes
segments left by an earlier run.  Writes are buffered and never fsynced.

Blobs are framed as ``length u32 | bytes`` in segment files of about ``segment_size``
bytes; a segment is deleted as soon as everything in it has been read.
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
from collections import deque
from pathlib import Path

_LEN = struct.Struct("<I")
MiB = 1 << 20


class _Segment:
    __slots__ = ("path", "written", "read", "size")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.written = 0  # blobs appended
        self.read = 0  # blobs popped
        self.size = 0  # bytes appended (frames)


class SpillFile:
    """A disk-backed FIFO: ``append`` at the tail, ``read`` pops from the head."""

    def __init__(self, directory: Path, *, segment_size: int = 8 * MiB) -> None:
        self._dir = Path(directory)
        self._dir.mkdir(parents=True, exist_ok=True)
        for stale in self._dir.glob("spill-*.seg"):
            stale.unlink()
        self._segment_size = segment_size
        self._segments: deque[_Segment] = deque()
        self._writer: io.BufferedWriter | None = None  # on the last segment
        self._reader: io.BufferedReader | None = None  # on the first segment
        self._next = 1
        self._count = 0
        self._bytes = 0
        self._closed = False

    def __len__(self) -> int:
        return self._count

    @property
    def bytes_held(self) -> int:
        """Payload bytes held (framing not counted)."""
        return self._bytes

    def append(self, blob: bytes) -> None:
        if self._closed:
            raise ValueError("spill file is closed")
        if len(blob) > 0xFFFF_FFFF:
            raise ValueError("blob too big for a spill file")
        seg = self._segments[-1] if self._segments else None
        if seg is None or self._writer is None or seg.size >= self._segment_size:
            seg = self._new_segment()
        assert self._writer is not None
        self._writer.write(_LEN.pack(len(blob)))
        self._writer.write(blob)
        seg.written += 1
        seg.size += _LEN.size + len(blob)
        self._count += 1
        self._bytes += len(blob)

    def read(self, max_count: int, max_bytes: int) -> list[bytes]:
        """Pop up to ``max_count`` blobs totalling at most ``max_bytes`` (but always at least
        one blob when any is held and ``max_count`` > 0, so a big blob cannot get stuck)."""
        out: list[bytes] = []
        total = 0
        while self._count and len(out) < max_count:
            seg = self._segments[0]
            if seg.read == seg.written:
                self._drop_head()
                continue
            reader = self._head_reader(seg)
            (n,) = _LEN.unpack(reader.read(_LEN.size))
            if out and total + n > max_bytes:
                reader.seek(-_LEN.size, os.SEEK_CUR)
                break
            blob = reader.read(n)
            if len(blob) != n:
                raise OSError(f"spill segment {seg.path.name} is truncated")
            out.append(blob)
            total += n
            seg.read += 1
            self._count -= 1
            self._bytes -= n
        if self._segments and self._segments[0].read == self._segments[0].written:
            self._drop_head()
        return out

    def close(self, delete: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        for f in (self._writer, self._reader):
            if f is not None:
                f.close()
        self._writer = self._reader = None
        if delete:
            for seg in self._segments:
                seg.path.unlink(missing_ok=True)
            self._segments.clear()
            with contextlib.suppress(OSError):  # only if nothing else lives there
                self._dir.rmdir()

    # ---- segments
    def _new_segment(self) -> _Segment:
        if self._writer is not None:
            self._writer.close()
        seg = _Segment(self._dir / f"spill-{self._next:08d}.seg")
        self._next += 1
        self._writer = open(seg.path, "wb")  # noqa: SIM115 - kept open across calls
        self._segments.append(seg)
        return seg

    def _head_reader(self, seg: _Segment) -> io.BufferedReader:
        if seg is self._segments[-1] and self._writer is not None:
            self._writer.flush()  # reading the segment still being written
        if self._reader is None:
            self._reader = open(seg.path, "rb")  # noqa: SIM115 - kept open across calls
        return self._reader

    def _drop_head(self) -> None:
        seg = self._segments.popleft()
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if not self._segments and self._writer is not None:
            self._writer.close()
            self._writer = None
        seg.path.unlink(missing_ok=True)
