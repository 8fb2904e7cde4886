"""What one partition read returns (Kafka's ``FetchDataInfo`` and ``FetchIsolation``).

A read of a partition log, in the broker or in a read-only view of a log dir, returns the raw
bytes of whole batches starting with the batch that holds ``fetch_offset`` (so the first batch may
begin below it) and possibly ending in a partial batch, which consumers drop. How far it may read
depends on who asks (:class:`FetchIsolation`):

- ``LOG_END``: followers, up to the log end offset;
- ``HIGH_WATERMARK``: consumers with ``read_uncommitted``, up to the high watermark;
- ``TXN_COMMITTED``: consumers with ``read_committed``, up to the last stable offset, and the
  aborted transactions overlapping the read are returned so that the consumer can skip them.

Immutable values: thread-safe. ``records`` is a ``bytes`` copy (never a view into a file that a
writer may later truncate), unless the read was asked for zero-copy: then ``records`` is empty and
``region`` names the bytes in the segment file (:class:`SegmentRegion`) for the Fetch handler to
send with ``sendfile``, never reading them into memory.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from broker_embedded.storage.transaction_index import AbortedTxn


class IsolationLevel(enum.IntEnum):
    """A consumer's isolation level, with Kafka's wire numbers."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1

    @classmethod
    def parse(cls, value: IsolationLevel | int | str) -> IsolationLevel:
        """``read_uncommitted`` / ``read_committed`` (any case), 0 / 1, or a member."""
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                raise ValueError(
                    f"unknown isolation level {value!r} (read_uncommitted or read_committed)"
                ) from None
        return cls(value)


class FetchIsolation(enum.Enum):
    """The upper bound of a read: log end offset, high watermark or last stable offset."""

    LOG_END = "log_end"
    HIGH_WATERMARK = "high_watermark"
    TXN_COMMITTED = "txn_committed"

    @classmethod
    def of(cls, replica_id: int, isolation_level: IsolationLevel) -> FetchIsolation:
        """Kafka's rule: a follower (replica id >= 0) reads to the log end, a consumer to the HW
        or, with read_committed, to the LSO."""
        if replica_id >= 0:
            return cls.LOG_END
        if isolation_level == IsolationLevel.READ_COMMITTED:
            return cls.TXN_COMMITTED
        return cls.HIGH_WATERMARK


@dataclass(frozen=True, slots=True)
class SegmentRegion:
    """``length`` bytes of a segment's ``.log`` at ``path`` from ``position``: a zero-copy read's
    records. ``file_id`` is the ``(st_dev, st_ino)`` of the file that was read, so that whoever
    opens ``path`` later can tell it still names that file (a cleaner swap renames another file
    over it, retention unlinks it, a truncation may shorten it): the opener checks, and reads
    again when it does not."""

    path: str
    file_id: tuple[int, int]
    position: int
    length: int

    def __len__(self) -> int:
        return self.length


@dataclass(frozen=True, slots=True, eq=False)
class FetchDataInfo:
    """One partition read: the records and the offsets the reader needs next.

    ``aborted_transactions`` is ``None`` unless the read was ``TXN_COMMITTED``; then it lists the
    aborted transactions whose offsets overlap ``[fetch_offset, end of the read)``.
    ``last_stable_offset`` is -1 when the reader did not compute it (a read-only view computes
    it only for ``TXN_COMMITTED`` reads). ``first_entry_incomplete`` says that even the first
    batch did not fit ``max_bytes`` (only possible when the read did not have to return at least
    one batch). ``region``: where the records are in the segment file, for a zero-copy read
    (``records`` is then empty). ``readable_bytes``: the bytes the read found within its limits
    before the partial batch a limit cut was left out (what Kafka counts against a fetch's
    ``min_bytes``), -1 when that is ``size_in_bytes``.
    """

    fetch_offset: int
    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    aborted_transactions: tuple[AbortedTxn, ...] | None = None
    first_entry_incomplete: bool = False
    region: SegmentRegion | None = None
    readable_bytes: int = -1

    @property
    def size_in_bytes(self) -> int:
        return len(self.records) if self.region is None else self.region.length

    @property
    def readable(self) -> int:
        return self.size_in_bytes if self.readable_bytes < 0 else self.readable_bytes
