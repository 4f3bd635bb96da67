"""Reading recovered records that recovery left in their journal files.

A restart with a backlog far larger than memory must not read the whole journal in: replay
keeps only where each large record is (``Record.seq/offset/size``), and the engine reads a
message when it places it in its queue, which pages it out again once its address is over
its limit.  Files stay open until :meth:`RecordReader.close` (the end of the engine's start,
before its first write: a compaction could move records after that).
"""

from __future__ import annotations

import os

from waystation.core.store.api import Record, StoreError
from waystation.core.store.files import Layout


class RecordReader:
    def __init__(self, layout: Layout) -> None:
        self._layout = layout
        self._fds: dict[int, int] = {}

    def read(self, record: Record) -> bytes:
        if record.size == 0:
            return record.data
        fd = self._fds.get(record.seq)
        try:
            if fd is None:
                fd = self._fds[record.seq] = os.open(
                    self._layout.data_path(record.seq), os.O_RDONLY
                )
            data = os.pread(fd, record.size, record.offset)
        except OSError as e:
            raise StoreError(f"journal file seq {record.seq} unreadable: {e}") from e
        if len(data) != record.size:
            raise StoreError(f"journal file seq {record.seq} shrank under a recovered record")
        return data

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)


__all__ = ["RecordReader"]
