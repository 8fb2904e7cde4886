"""The aborted-transaction index of one log segment: ``<base offset>.txnindex`` (Kafka's
``TransactionIndex``).

Byte layout: a sequence of 34-byte big-endian entries (Kafka's ``AbortedTxn``), no header:

    0  version int16 = 0
    2  producerId int64
    10 firstOffset int64        first offset of the aborted transaction (maybe in an older segment)
    18 lastOffset int64         offset of its ABORT marker (in this segment)
    26 lastStableOffset int64   the partition's LSO once the marker was written

Invariants: entries are in append order with strictly increasing ``lastOffset``; an append whose
``lastOffset`` does not exceed the last one is an :class:`InvalidOffsetError`. Only aborted
transactions are indexed. The file is created by the first append (a segment without aborted
transactions has no ``.txnindex``; reading a missing file gives no entries).

Reading follows Kafka: a trailing partial entry (a torn append) is ignored; an entry whose version
is not 0 is an :class:`IndexCorruptError`. :meth:`TransactionIndex.sanity_check` is stricter for
recovery: it also rejects a partial tail, an entry whose ``lastOffset`` lies below the segment's
base offset, and offsets that do not increase, so the caller rebuilds the index from the log.

Writes are ``append`` to the file followed by a flush to the OS (other processes see the entry at
once); :meth:`TransactionIndex.flush` also fsyncs. Reads re-read the file, so a read-only instance
in another process sees the writer's appends.

Thread safety: every method takes the instance's lock, so one instance may be shared between an
appending thread and fetching threads. One writer per file at a time (the log dir lock).
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from broker_embedded.errors import IndexCorruptError, InvalidOffsetError

ENTRY_SIZE = 34
CURRENT_VERSION = 0
FILE_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: its producer, offset range and the LSO after its marker."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = CURRENT_VERSION

    def to_bytes(self) -> bytes:
        return _ENTRY.pack(
            self.version,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )

    @classmethod
    def from_bytes(cls, buf: bytes | memoryview, position: int = 0) -> AbortedTxn:
        version, producer_id, first, last, lso = _ENTRY.unpack_from(buf, position)
        return cls(producer_id, first, last, lso, version)

    def as_fetch_entry(self) -> tuple[int, int]:
        """``(producer_id, first_offset)``: how a Fetch response lists an aborted transaction."""
        return (self.producer_id, self.first_offset)


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    """Aborted transactions overlapping a fetch range, and whether later segments may hold more
    (``is_complete`` is true once an entry's LSO reached the range's upper bound)."""

    aborted_txns: tuple[AbortedTxn, ...]
    is_complete: bool

    @property
    def fetch_entries(self) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` pairs, as a Fetch response lists them."""
        return [txn.as_fetch_entry() for txn in self.aborted_txns]


class TransactionIndex:
    """The ``.txnindex`` file of the segment starting at ``start_offset``."""

    def __init__(self, path: str | os.PathLike[str], start_offset: int) -> None:
        self._path = path if isinstance(path, Path) else Path(path)
        self.start_offset = start_offset
        self._lock = threading.RLock()
        self._file: BinaryIO | None = None
        self._last_offset: int | None = None
        self._last_offset_known = False

    def __repr__(self) -> str:
        return f"TransactionIndex({str(self._path)!r}, start_offset={self.start_offset})"

    def __enter__(self) -> TransactionIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def path(self) -> Path:
        return self._path

    @property
    def last_offset(self) -> int | None:
        """The last indexed transaction's ``lastOffset``, ``None`` when empty."""
        with self._lock:
            return self._known_last_offset()

    def is_empty(self) -> bool:
        return self.last_offset is None

    # -- writes --------------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        """Append ``txn``; its ``lastOffset`` must exceed every indexed one."""
        with self._lock:
            self._check_append(txn)
            f = self._writer()
            before = os.fstat(f.fileno()).st_size
            data = memoryview(txn.to_bytes())
            try:
                while data:  # a full disk writes part of it, then raises
                    data = data[f.write(data) :]
            except OSError:
                os.ftruncate(f.fileno(), before)  # no partial entry for the next to follow
                raise
            self._last_offset = txn.last_offset

    def flush(self) -> None:
        """Force appended entries to disk (fsync)."""
        with self._lock:
            if self._file is not None:
                self._file.flush()
                os.fsync(self._file.fileno())

    def truncate_to(self, offset: int) -> None:
        """Drop every entry from the first one whose ``lastOffset >= offset`` on."""
        with self._lock:
            data = self._read_bytes()
            new_last = None
            for position, txn in _entries(data, self._path):
                if txn.last_offset >= offset:
                    self._truncate_file(position)
                    self._last_offset, self._last_offset_known = new_last, True
                    return
                new_last = txn.last_offset

    def reset(self) -> None:
        """Remove every entry (the file stays, empty, if it existed)."""
        with self._lock:
            self._truncate_file(0)
            self._last_offset, self._last_offset_known = None, True

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def delete(self) -> bool:
        """Close and delete the file; ``False`` if it did not exist."""
        with self._lock:
            self.close()
            self._last_offset, self._last_offset_known = None, True
            try:
                self._path.unlink()
            except FileNotFoundError:
                return False
            return True

    def rename_to(self, path: str | os.PathLike[str]) -> None:
        """Rename the file (e.g. to ``.deleted`` or from ``.swap``); later writes go there."""
        with self._lock:
            self.close()
            target = Path(path)
            if self._path.exists():
                os.replace(self._path, target)
            self._path = target

    # -- reads ---------------------------------------------------------------------------------

    def all_aborted_txns(self) -> list[AbortedTxn]:
        with self._lock:
            return [txn for _, txn in _entries(self._read_bytes(), self._path)]

    def collect_aborted(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``: those with
        ``lastOffset >= fetch_offset`` and ``firstOffset < upper_bound_offset``."""
        return collect_aborted(self.all_aborted_txns(), fetch_offset, upper_bound_offset)

    def sanity_check(self) -> None:
        """Raise :class:`IndexCorruptError` unless the file holds whole version-0 entries with
        increasing ``lastOffset``, none below the segment's base offset."""
        with self._lock:
            data = self._read_bytes()
            if len(data) % ENTRY_SIZE:
                raise IndexCorruptError(
                    f"transaction index {self._path} is {len(data)} bytes, not a multiple of "
                    f"the {ENTRY_SIZE}-byte entry size"
                )
            previous = None
            for position, txn in _entries(data, self._path):
                where = f"entry at byte {position} of transaction index {self._path}"
                if txn.last_offset < self.start_offset:
                    raise IndexCorruptError(
                        f"{where}: last offset {txn.last_offset} of {txn} is below the "
                        f"segment's start offset {self.start_offset}"
                    )
                if previous is not None and txn.last_offset <= previous:
                    raise IndexCorruptError(
                        f"{where}: last offset {txn.last_offset} does not exceed the previous "
                        f"entry's {previous}"
                    )
                previous = txn.last_offset

    # -- helpers -------------------------------------------------------------------------------

    def _check_append(self, txn: AbortedTxn) -> None:
        where = f"transaction index {self._path}"
        if txn.version != CURRENT_VERSION:
            raise InvalidOffsetError(f"{where}: cannot append {txn}: version must be 0")
        if txn.first_offset > txn.last_offset:
            raise InvalidOffsetError(
                f"{where}: cannot append {txn}: first offset exceeds last offset"
            )
        if txn.last_offset < self.start_offset:
            raise InvalidOffsetError(
                f"{where}: cannot append {txn}: last offset is below the segment's start "
                f"offset {self.start_offset}"
            )
        last = self._known_last_offset()
        if last is not None and txn.last_offset <= last:
            raise InvalidOffsetError(
                f"{where}: the last offsets of appended transactions must increase, but "
                f"{txn.last_offset} (producer {txn.producer_id}) is not greater than the "
                f"current last offset {last}"
            )

    def _known_last_offset(self) -> int | None:
        if not self._last_offset_known:
            txns = [txn for _, txn in _entries(self._read_bytes(), self._path)]
            self._last_offset = txns[-1].last_offset if txns else None
            self._last_offset_known = True
        return self._last_offset

    def _writer(self) -> BinaryIO:
        if self._file is None:
            size = self._path.stat().st_size if self._path.exists() else 0
            if size % ENTRY_SIZE:
                raise IndexCorruptError(
                    f"transaction index {self._path} ends in a partial entry ({size} bytes): "
                    "it must be rebuilt before appending"
                )
            # unbuffered (a failed write leaves nothing queued), kept open across appends,
            # closed by close()
            self._file = open(self._path, "ab", buffering=0)  # noqa: SIM115
        return self._file

    def _read_bytes(self) -> bytes:
        if self._file is not None:
            self._file.flush()
        try:
            return self._path.read_bytes()
        except FileNotFoundError:
            return b""

    def _truncate_file(self, size: int) -> None:
        if self._file is not None:
            self._file.flush()
        try:
            os.truncate(self._path, size)
        except FileNotFoundError:
            pass


def collect_aborted(
    txns: list[AbortedTxn], fetch_offset: int, upper_bound_offset: int
) -> TxnIndexSearchResult:
    """:meth:`TransactionIndex.collect_aborted` over the entries ``txns`` of one index (a file,
    or an object of the store read whole)."""
    found: list[AbortedTxn] = []
    for txn in txns:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
            found.append(txn)
        if txn.last_stable_offset >= upper_bound_offset:
            return TxnIndexSearchResult(tuple(found), True)
    return TxnIndexSearchResult(tuple(found), False)


def aborted_txns_of(data: bytes, source: str) -> list[AbortedTxn]:
    """The entries of a transaction index's bytes (``source`` names it in errors)."""
    return [txn for _, txn in _entries(data, Path(source))]


def _entries(data: bytes, path: Path) -> Iterator[tuple[int, AbortedTxn]]:
    """``(byte position, entry)`` for every whole entry of ``data``, in order."""
    for position in range(0, len(data) - ENTRY_SIZE + 1, ENTRY_SIZE):
        txn = AbortedTxn.from_bytes(data, position)
        if txn.version != CURRENT_VERSION:
            raise IndexCorruptError(
                f"entry at byte {position} of transaction index {path} has version "
                f"{txn.version}, only {CURRENT_VERSION} is known"
            )
        yield position, txn
