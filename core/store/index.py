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

from array import array
from bisect import bisect_left
from collections.abc import Iterator
from itertools import compress


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

_MIN = -(1 << 63)
_MANY = 4096  # out-of-order keys in one ``add`` beyond which the columns are rebuilt
_FLIP = bytes([1, 0]) + bytes(254)  # gone flags -> keep flags


class Columns:
    """Rows of int64 values sorted by an int64 key, about 8 bytes a value and one a row:
    what recovery keeps for millions of records instead of a dict entry and objects each.
    A row is dropped by flagging it (``find`` no longer sees it); the flagged rows are
    squeezed out once they are half of all."""

    __slots__ = ("keys", "cols", "gone", "max", "live")

    def __init__(self, types: str) -> None:
        """``types``: an array typecode per value column ("i": 4 bytes, "q": 8)."""
        self.cols: tuple[array[int], ...] = ()
        self._clear(types)

    def _clear(self, types: str) -> None:
        self.keys = array("q")
        self.cols = tuple(array(t) for t in types)
        self.gone = bytearray()
        self.max = _MIN  # the highest key
        self.live = 0

    def find(self, key: int) -> int:
        """The live row of ``key``, or -1 (one comparison when ``key`` is above them all)."""
        if key > self.max:
            return -1
        keys = self.keys
        i = bisect_left(keys, key)
        while i < len(keys) and keys[i] == key:  # a dropped row may precede the live one
            if not self.gone[i]:
                return i
            i += 1
        return -1

    def drop(self, i: int) -> None:
        self.gone[i] = 1
        self.live -= 1
        if self.live == 0:
            self._clear("".join(c.typecode for c in self.cols))
        elif self.live * 2 < len(self.keys) and len(self.keys) > _MANY:
            self._rebuild([])

    def add(self, rows: list[tuple[int, ...]]) -> None:
        """Add ``rows`` (key first, sorted by key; none of their keys live here)."""
        if not rows:
            return
        self.live += len(rows)
        late = 0
        while late < len(rows) and rows[late][0] <= self.max:
            late += 1
        if late > _MANY:
            self._rebuild(rows)
            return
        keys, cols, gone = self.keys, self.cols, self.gone
        for row in rows[:late]:  # out of order (rare): an insert, a C memmove, each
            i = bisect_left(keys, row[0])
            keys.insert(i, row[0])
            gone.insert(i, 0)
            for col, v in zip(cols, row[1:], strict=True):
                col.insert(i, v)
        if late < len(rows):
            tail = list(zip(*rows[late:], strict=True))  # column by column, at C speed
            keys.extend(tail[0])
            for col, values in zip(cols, tail[1:], strict=True):
                col.extend(values)
            gone.extend(bytes(len(rows) - late))
            self.max = rows[-1][0]

    def rows(self) -> Iterator[tuple[int, ...]]:
        """The live rows (key first) in key order."""
        keep = self.gone.translate(_FLIP)
        return zip(compress(self.keys, keep), *(compress(c, keep) for c in self.cols), strict=True)

    def _rebuild(self, rows: list[tuple[int, ...]]) -> None:
        """Squeeze out the dropped rows and merge ``rows`` (sorted) in, column by column."""
        keep = self.gone.translate(_FLIP)
        old = [array(c.typecode, compress(c, keep)) for c in (self.keys, *self.cols)]
        if rows:
            n = len(old[0])
            out = [array(c.typecode) for c in old]
            i = 0
            for row in rows:
                while i < n and old[0][i] < row[0]:
                    for col, src in zip(out, old, strict=True):
                        col.append(src[i])
                    i += 1
                for col, v in zip(out, row, strict=True):
                    col.append(v)
            for col, src in zip(out, old, strict=True):
                col.extend(src[i:])
            old = out
        self.keys, self.cols = old[0], tuple(old[1:])
        self.gone = bytearray(len(self.keys))
        self.max = self.keys[-1] if self.keys else _MIN


class LiveIndex:
    """rid -> pinned files; updated per op on the event loop and during recovery replay.

    Records written since the start live in ``entries`` (a list each: fast to update).
    Recovery replay :meth:`freeze`s its records after each file into :class:`Columns` of
    about 25 bytes a record (a dict entry and a list cost about 200), so a restart with a
    backlog of millions of records does not hold millions of Python objects; a frozen
    record moves back to ``entries`` when it is written again, and its row is dropped
    when it is deleted.  Ids come from an increasing generator, so a new record is known
    not to be frozen by one comparison.
    """

    __slots__ = ("entries", "_frozen", "_files")

    def __init__(self) -> None:
        self.entries: dict[int, Entry] = {}
        self._frozen = Columns("II")  # rid -> (file number in _files, size <= MAX_PAYLOAD)
        self._files: list[FileInfo] = []

    def __len__(self) -> int:
        return len(self.entries) + self._frozen.live

    def put(self, rid: int, size: int, fi: FileInfo) -> None:
        e = self.entries.get(rid)
        if e is None and (rid > self._frozen.max or (e := self._thaw(rid)) is None):
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
        elif rid <= self._frozen.max:
            fz = self._frozen
            i = fz.find(rid)
            if i >= 0:
                fi = self._file(fz.cols[0][i])
                fi.refs -= 1
                fi.live -= fz.cols[1][i]
                self._drop(i)

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

    # ---- frozen rows
    def _file(self, fid: int) -> FileInfo:
        fi = self._files[fid]
        if fi.fwd is not None:
            fi = self._files[fid] = fi.resolve()
        return fi

    def _thaw(self, rid: int) -> Entry | None:
        fz = self._frozen
        i = fz.find(rid)
        if i < 0:
            return None
        fi = self._file(fz.cols[0][i])
        size = fz.cols[1][i]
        e = self.entries[rid] = [fi, size, fi, size, False]
        self._drop(i)
        return e

    def _drop(self, i: int) -> None:
        self._frozen.drop(i)
        if not self._frozen.live:
            self._files = []

    def freeze(self) -> None:
        """Move records pinning one file into the columns (recovery, after each file)."""
        entries = self.entries
        if not entries:
            return
        files = self._files
        ids = {id(fi): n for n, fi in enumerate(files)}
        rows: list[tuple[int, ...]] = []
        split: dict[int, Entry] = {}  # pinning two files: stays an entry
        last, fid = None, 0
        for rid, e in sorted(entries.items()):
            if e[4]:
                split[rid] = e
                continue
            if e[2] is not last:  # mostly one file object for all: looked up once
                last = e[2]
                fi = last.resolve()
                fid = ids.get(id(fi), -1)
                if fid < 0:
                    fid = ids[id(fi)] = len(files)
                    files.append(fi)
            rows.append((rid, fid, e[3]))
        self.entries = split
        self._frozen.add(rows)
