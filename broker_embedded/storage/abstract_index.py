"""What the offset index and the time index share (Kafka's ``AbstractIndex``).

Both are files of fixed-size big-endian entries, each a (key, value) pair sorted by key:

    .index      8 bytes: int32 relative offset (key)  + int32 file position (value)
    .timeindex 12 bytes: int64 timestamp (key)        + int32 relative offset (value)

Relative offsets are ``offset - base offset`` of the segment. Keys strictly increase; values
strictly increase in the offset index and never decrease in the time index.

Valid entries: Kafka preallocates the active segment's index files (``segment.index.bytes``,
10 MiB, zero-filled) and trims them on roll and close, so an index copied from a running or
crashed broker ends in zeros. The entries are the longest prefix that keeps the ordering above
and whose first entry is not all zero bytes (a zero entry is never a real first entry: the first
batch of a segment is never indexed, and a first time index entry at timestamp 0 and the base
offset is dropped, which only makes a lookup scan further, never answer wrongly). Every byte after
the valid prefix must be zero; a file whose size is not a multiple of the entry size, or with
non-zero bytes after the prefix, is an :class:`IndexCorruptError` naming the file and entry.

Entries live in two contiguous int64 numpy columns so that a lookup is one ``searchsorted``.

Thread safety: one appender at a time (appends take a lock); readers need no lock: they read one
immutable ``(keys, values, count)`` snapshot that an append replaces in a single assignment, and
an append never changes the first ``count`` slots of the arrays in a published snapshot.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import ClassVar, TypeVar

import numpy as np

from broker_embedded.errors import IndexCorruptError, IndexFullError, SegmentOffsetOverflowError
from broker_embedded.storage.open_files import open_read_only

INT32_MAX = (1 << 31) - 1
_MIN_CAPACITY = 64

_State = tuple[np.ndarray, np.ndarray, int]
_I = TypeVar("_I", bound="AbstractIndex")


class AbstractIndex:
    """Sorted (key, value) entries of one segment's index; see the module docstring."""

    ENTRY_SIZE: ClassVar[int]
    FILE_DTYPE: ClassVar[np.dtype]
    VALUES_STRICTLY_INCREASE: ClassVar[bool]
    KIND: ClassVar[str]

    __slots__ = ("base_offset", "source", "max_entries", "_state", "_lock", "_last")

    def __init__(
        self,
        base_offset: int,
        *,
        source: str = "<memory>",
        max_entries: int | None = None,
        keys: np.ndarray | None = None,
        values: np.ndarray | None = None,
    ) -> None:
        self.base_offset = base_offset
        self.source = source
        self.max_entries = max_entries
        n = 0 if keys is None else len(keys)
        cap = max(_MIN_CAPACITY, n)
        k = np.zeros(cap, np.int64)
        v = np.zeros(cap, np.int64)
        if n:
            k[:n] = keys
            v[:n] = values
        self._state: _State = (k, v, n)
        self._lock = threading.Lock()
        # the last entry as ints, for the appender's ordering checks (None when empty)
        self._last: tuple[int, int] | None = (int(k[n - 1]), int(v[n - 1])) if n else None

    # -- reading files ---------------------------------------------------------------------------

    @classmethod
    def from_bytes(
        cls: type[_I],
        data: bytes | memoryview,
        base_offset: int,
        *,
        source: str = "<buffer>",
        max_entries: int | None = None,
    ) -> _I:
        """Parse an index file's bytes, ignoring a zero-filled (preallocated) tail."""
        parsed = cls._parse(memoryview(data), source)
        keys, values = (None, None) if parsed is None else parsed
        return cls(base_offset, source=source, max_entries=max_entries, keys=keys, values=values)

    @classmethod
    def load(
        cls: type[_I], path: str | Path, base_offset: int, *, max_entries: int | None = None
    ) -> _I:
        """Read an index file; ``FileNotFoundError`` when it does not exist."""
        source = str(path)
        return cls.from_bytes(
            read_whole(source), base_offset, source=source, max_entries=max_entries
        )

    @classmethod
    def _parse(cls, data: memoryview, source: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The entries' keys and values; ``None`` for an empty file (no entries)."""
        if not len(data):
            return None
        size = cls.ENTRY_SIZE
        if len(data) % size:
            raise IndexCorruptError(
                f"{cls.KIND} {source}: file size {len(data)} is not a multiple of the "
                f"{size}-byte entry size"
            )
        used = _used_length(data, size)
        raw = np.frombuffer(data[:used], cls.FILE_DTYPE)
        keys = raw["k"].astype(np.int64)
        values = raw["v"].astype(np.int64)
        valid = cls._valid_prefix(keys, values)
        if valid != len(keys):
            raise IndexCorruptError(
                f"{cls.KIND} {source}: entry {valid} (key {keys[valid]}, value {values[valid]}) "
                f"breaks the ordering of the entries before it and is followed by non-zero bytes"
            )
        return keys, values

    @classmethod
    def _valid_prefix(cls, keys: np.ndarray, values: np.ndarray) -> int:
        n = len(keys)
        if n == 0:
            return 0
        first = bool(keys[0] >= 0 and values[0] >= 0 and not (keys[0] == 0 and values[0] == 0))
        if n == 1 or not first:  # a segment of one indexed batch: no array work
            return int(first)
        ok = np.empty(n, bool)
        ok[0] = True
        if cls.VALUES_STRICTLY_INCREASE:
            ok[1:] = (keys[1:] > keys[:-1]) & (values[1:] > values[:-1])
        else:
            ok[1:] = (keys[1:] > keys[:-1]) & (values[1:] >= values[:-1])
        return n if ok.all() else int(np.argmin(ok))

    # -- state -----------------------------------------------------------------------------------

    def _columns(self) -> tuple[np.ndarray, np.ndarray]:
        keys, values, n = self._state
        return keys[:n], values[:n]

    def __len__(self) -> int:
        return self._state[2]

    @property
    def entries(self) -> int:
        return self._state[2]

    def is_full(self) -> bool:
        return self.max_entries is not None and self._state[2] >= self.max_entries

    def _floor_slot(self, key: int) -> int:
        """The slot of the largest key <= ``key``, or -1."""
        keys, _, n = self._state
        return floor_slot(keys, n, key)

    def relative_offset(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise SegmentOffsetOverflowError(
                f"offset {offset} cannot be stored relative to base offset {self.base_offset} "
                f"in {self.KIND} {self.source}"
            )
        return rel

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def _append_raw(self, key: int, value: int) -> None:
        """Append one entry (the caller holds the lock and checked the ordering)."""
        keys, values, n = self._state
        if n == len(keys):
            keys = np.concatenate([keys, np.zeros(len(keys), np.int64)])
            values = np.concatenate([values, np.zeros(len(values), np.int64)])
        keys[n] = key
        values[n] = value
        self._state = (keys, values, n + 1)
        self._last = (key, value)

    def _check_not_full(self) -> None:
        if self.is_full():
            raise IndexFullError(
                f"{self.KIND} {self.source} is full: it holds its maximum of "
                f"{self.max_entries} entries"
            )

    # -- checks and bytes ------------------------------------------------------------------------

    def sanity_check(self) -> None:
        """Kafka's index sanity check over the in-memory entries."""
        keys, values = self._columns()
        valid = self._valid_prefix(keys, values)
        if valid != len(keys):
            raise IndexCorruptError(
                f"{self.KIND} {self.source}: entry {valid} breaks the ordering of the entries"
            )

    def to_bytes(self, start: int = 0) -> bytes:
        """Entries ``[start, entries)`` in the file format (the whole trimmed file by default)."""
        keys, values = self._columns()
        out = np.empty(len(keys) - start, self.FILE_DTYPE)
        out["k"] = keys[start:]
        out["v"] = values[start:]
        return out.tobytes()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_offset={self.base_offset}, entries={self.entries}, "
            f"source={self.source!r})"
        )


def read_whole(path: str) -> bytes:
    """The bytes of the file ``path``: one ``open``, ``fstat`` and ``read`` (no buffered file
    object, which costs more than the read for the small index files of a small segment)."""
    fd = open_read_only(path)
    try:
        size = os.fstat(fd).st_size
        chunks = []
        while size > 0 and (chunk := os.read(fd, size)):  # a file that shrank ends early
            chunks.append(chunk)
            size -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


def _used_length(data: memoryview, entry_size: int) -> int:
    """The length up to the end of the last entry holding a non-zero byte."""
    if any(data[-entry_size:]):  # a trimmed file: its last entry is used
        return len(data)
    words = np.frombuffer(data, "<u4")  # entry sizes (8, 12) are multiples of 4
    if not len(words):
        return 0
    last_nonzero = len(words) - 1 - int(np.argmax(words[::-1] != 0))
    if words[last_nonzero] == 0:
        return 0
    return (last_nonzero * 4 // entry_size + 1) * entry_size


def floor_slot(column: np.ndarray, n: int, value: int) -> int:
    """The slot of the largest of the sorted ``column[:n]`` at or below ``value``, or -1. The
    last two slots are looked at first: reads near the log's end (a follower one batch behind,
    a tailing consumer) need no search."""
    if n and value >= column[n - 1]:
        return n - 1
    if n > 1 and value >= column[n - 2]:
        return n - 2
    return int(np.searchsorted(column[:n], value, side="right")) - 1
