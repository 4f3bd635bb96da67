"""Which journal file keeps which live record alive: the basis of reclaim and compaction.

A live record pins the file holding its *current* version and, if different, the file
holding its *first* put: recovery orders records by first put, so that file must outlive
the record even after a newer version was written elsewhere.  A file with no pins is dead,
but only the oldest data file may be reclaimed: its delete records may still be needed to
cancel puts in older files.

After a compaction the old files' ``FileInfo`` objects forward to one ``FileInfo`` for the
new files, so no per-record fix-up pass over the index is needed.
"""

from __future__ import annotations


class FileInfo:
    """Accounting for one data file (or, after compaction, a group of them)."""

    __slots__ = ("seqs", "used", "refs", "live", "fwd")

    def __init__(self, seqs: list[int], used: int = 0) -> None:
        self.seqs = seqs
        self.used = used  # bytes of batch frames written to the file(s)
        self.refs = 0  # live records pinning the file
        self.live = 0  # estimated bytes a compaction would keep
        self.fwd: FileInfo | None = None

    def resolve(self) -> FileInfo:
        f = self
        while f.fwd is not None:
            f = f.fwd
        return f

    def __repr__(self) -> str:
        return f"FileInfo({self.seqs}, used={self.used}, refs={self.refs}, live={self.live})"


# An entry is a list for speed: [first file, first size, current file, current size, split]
# where split says whether the first file is pinned separately from the current one.
Entry = list


class LiveIndex:
    """rid -> pinned files; updated per op on the event loop and during recovery replay."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: dict[int, Entry] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def put(self, rid: int, size: int, fi: FileInfo) -> None:
        e = self.entries.get(rid)
        if e is None:
            self.entries[rid] = [fi, size, fi, size, False]
            fi.refs += 1
            fi.live += size
            return
        self._unpin(e)
        first = e[0]
        if first is fi:
            e[1] = size
            e[4] = False
        else:
            e[4] = True
            first.refs += 1
            first.live += e[1]
        e[2] = fi
        e[3] = size
        fi.refs += 1
        fi.live += size

    def delete(self, rid: int) -> None:
        e = self.entries.pop(rid, None)
        if e is not None:
            self._unpin(e)

    @staticmethod
    def _unpin(e: Entry) -> None:
        # resolve through compaction forwards and remember the result (path compression)
        if e[4]:
            first = e[0] = e[0].resolve()
            first.refs -= 1
            first.live -= e[1]
        else:
            e[0] = e[0].resolve()
        cur = e[2] = e[2].resolve()
        cur.refs -= 1
        cur.live -= e[3]
