"""Control records: transaction markers (and the types KRaft uses), as Kafka writes them.

A control batch has attribute bit 5 set (and bit 4 for transaction markers) and holds one record
at offsetDelta 0. Byte layout of that record's key and value (big-endian):

    key   int16 version (0)  int16 type        type: 0 ABORT, 1 COMMIT (end transaction markers),
                                               2 LEADER_CHANGE, 3 SNAPSHOT_HEADER,
                                               4 SNAPSHOT_FOOTER, 5 KRAFT_VERSION, 6 KRAFT_VOTERS
    value int16 version (0)  int32 coordinatorEpoch     (end transaction markers)

Reading follows Kafka: a key shorter than 4 bytes or with a negative version is corrupt, an
unknown type id reads as ``UNKNOWN``; a marker value shorter than 6 bytes or with a negative
version is corrupt, and a newer value version is read by its version 0 prefix. Control records are
never compacted by key. Values here are immutable; the functions are pure and thread-safe.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import NO_PARTITION_LEADER_EPOCH, RecordBatch

CONTROL_RECORD_KEY_VERSION = 0
END_TXN_MARKER_VALUE_VERSION = 0
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class _Where:
    """Where a control record sits, for error messages."""

    source: str = "<buffer>"
    position: int | None = None
    base_offset: int | None = None

    def corrupt(self, reason: str) -> CorruptRecordError:
        return CorruptRecordError(
            reason, source=self.source, position=self.position, base_offset=self.base_offset
        )


class ControlRecordType(enum.IntEnum):
    """The type id in a control record's key."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    def record_key(self) -> bytes:
        """The control record key for this type (key version 0)."""
        if self is ControlRecordType.UNKNOWN:
            raise ValueError("cannot write a control record of type UNKNOWN")
        return _KEY.pack(CONTROL_RECORD_KEY_VERSION, self)

    @classmethod
    def parse_key(
        cls,
        key: bytes | memoryview | None,
        *,
        source: str = "<buffer>",
        position: int | None = None,
        base_offset: int | None = None,
    ) -> ControlRecordType:
        """The type of a control record from its key; unknown type ids give ``UNKNOWN``."""
        return _parse_key(key, _Where(source, position, base_offset))


def _parse_key(key: bytes | memoryview | None, where: _Where) -> ControlRecordType:
    if key is None:
        raise where.corrupt("control record with a null key")
    if len(key) < _KEY.size:
        raise where.corrupt(f"control record key of {len(key)} bytes, needs at least {_KEY.size}")
    version, type_id = _KEY.unpack_from(key, 0)
    if version < 0:
        raise where.corrupt(f"invalid control record key version {version}")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return ControlRecordType.UNKNOWN


def _parse_marker(
    key: bytes | memoryview | None, value: bytes | memoryview | None, where: _Where
) -> EndTransactionMarker:
    record_type = _parse_key(key, where)
    if record_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        raise where.corrupt(
            f"control record type {record_type.name} is not an end transaction marker"
        )
    if value is None or len(value) < _VALUE.size:
        size = "null" if value is None else f"{len(value)} bytes"
        raise where.corrupt(
            f"end transaction marker value is {size}, needs at least {_VALUE.size} bytes"
        )
    version, coordinator_epoch = _VALUE.unpack_from(value, 0)
    if version < 0:
        raise where.corrupt(f"invalid end transaction marker version {version}")
    return EndTransactionMarker(
        version=version, type=record_type, coordinator_epoch=coordinator_epoch
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTransactionMarker:
    """The COMMIT or ABORT marker that ends a producer's transaction in a partition."""

    version: int = END_TXN_MARKER_VALUE_VERSION
    type: ControlRecordType
    coordinator_epoch: int

    def __post_init__(self) -> None:
        if self.type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise ValueError(f"{self.type!r} is not an end transaction marker type")
        if not 0 <= self.version <= 0x7FFF:
            raise ValueError(f"marker version {self.version} outside int16 >= 0")
        if not -(1 << 31) <= self.coordinator_epoch < (1 << 31):
            raise ValueError(f"coordinator epoch {self.coordinator_epoch} outside int32")

    @classmethod
    def commit(cls, coordinator_epoch: int) -> EndTransactionMarker:
        return cls(type=ControlRecordType.COMMIT, coordinator_epoch=coordinator_epoch)

    @classmethod
    def abort(cls, coordinator_epoch: int) -> EndTransactionMarker:
        return cls(type=ControlRecordType.ABORT, coordinator_epoch=coordinator_epoch)

    # -- bytes ---------------------------------------------------------------------------------

    def key(self) -> bytes:
        return self.type.record_key()

    def value(self) -> bytes:
        if self.version != END_TXN_MARKER_VALUE_VERSION:
            raise ValueError(f"cannot write marker value version {self.version}")
        return _VALUE.pack(self.version, self.coordinator_epoch)

    @classmethod
    def parse(
        cls,
        key: bytes | memoryview | None,
        value: bytes | memoryview | None,
        *,
        source: str = "<buffer>",
        position: int | None = None,
        base_offset: int | None = None,
    ) -> EndTransactionMarker:
        """A marker from a control record's key and value; anything else is corrupt."""
        return _parse_marker(key, value, _Where(source, position, base_offset))

    @classmethod
    def from_batch(cls, batch: RecordBatch) -> EndTransactionMarker:
        """The marker of a control batch that holds one (its single record)."""
        where = _Where(batch.source, batch.position, batch.base_offset)
        if not batch.is_control:
            raise where.corrupt("not a control batch")
        records = list(batch.records())
        if len(records) != 1:
            raise where.corrupt(f"control batch holds {len(records)} records, not 1")
        return _parse_marker(records[0].key, records[0].value, where)

    # -- batches -------------------------------------------------------------------------------

    def build_batch(
        self,
        *,
        base_offset: int,
        timestamp: int,
        producer_id: int,
        producer_epoch: int,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    ) -> bytes:
        """The whole control batch (isControl + isTransactional, one record, no sequence)."""
        builder = MemoryRecordsBuilder(
            base_offset,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            is_transactional=True,
            is_control=True,
            partition_leader_epoch=partition_leader_epoch,
        )
        builder.append(base_offset, timestamp, self.key(), self.value())
        return builder.build()
