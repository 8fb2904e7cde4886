"""Building one record batch v2 (magic 2), byte-identical to Kafka's Java ``MemoryRecordsBuilder``.

Byte layout: the 61-byte header of ``record_batch`` followed by the records, compressed as one
stream when the codec is not none (``compression``). Kafka's rules, which the builder follows:

- record offsets increase strictly; each is written as offsetDelta from ``base_offset``
  (lastOffsetDelta = last offset - base offset);
- baseTimestamp is the first record's timestamp, or ``delete_horizon_ms`` when that is given
  (attribute bit 6): timestamp deltas are relative to it;
- maxTimestamp is the largest record timestamp (-1 with no timestamps) for CreateTime, and
  ``log_append_time`` for LogAppendTime (records keep their own deltas);
- record attributes are 0; keys, values and header values may be null (length -1), header keys
  are UTF-8 strings; every varint is zigzag;
- the CRC-32C covers [21, end): attributes to the end of the (compressed) records;
- an idempotent batch (producerId >= 0) needs producerEpoch >= 0 and, unless it is a control
  batch, baseSequence >= 0; a transactional batch needs a producerId; the compressed form is used
  whatever its size (Java never falls back to none);
- a builder with no records builds nothing (``b""``, Java's ``MemoryRecords.EMPTY``); the empty
  batches the cleaner keeps come from :func:`build_empty_batch` (recordsCount 0, baseTimestamp
  -1, no compression).

Also here: :func:`build_record_batch` (a whole batch from records in one call). The in-place
rewrites the leader does on append (baseOffset, partitionLeaderEpoch, maxTimestamp) live in
``record_batch``.

Thread safety: a builder is owned by one thread; the functions are pure.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from broker_embedded.record.batch_layout import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
)
from broker_embedded.record.compression import CompressionType, compress
from broker_embedded.record.record_batch import (
    CONTROL_MASK,
    CREATE_TIME,
    DELETE_HORIZON_MASK,
    HEADER_STRUCT,
    LOG_APPEND_TIME,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    Record,
    crc32c_of,
    record_offset_problem,
    record_timestamp_problem,
)
from broker_embedded.record.varint import (
    INT32_MAX,
    encode_varint,
    encode_varlong,
)

NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
MAGIC_V2 = 2
_NULL = encode_varint(-1)
_CRC = struct.Struct(">I")

Header = tuple[str | bytes, bytes | None]


def _attributes(
    codec: CompressionType,
    timestamp_type: int,
    is_transactional: bool,
    is_control: bool,
    has_delete_horizon: bool,
) -> int:
    attributes = int(codec)
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if has_delete_horizon:
        attributes |= DELETE_HORIZON_MASK
    return attributes


def _write_batch(
    records: bytes,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
) -> bytes:
    """Header + records section (already compressed), with the CRC computed."""
    buf = bytearray(RECORD_BATCH_OVERHEAD + len(records))
    HEADER_STRUCT.pack_into(
        buf,
        0,
        base_offset,
        len(buf) - LOG_OVERHEAD,
        partition_leader_epoch,
        MAGIC_V2,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    )
    buf[RECORD_BATCH_OVERHEAD:] = records
    _CRC.pack_into(buf, CRC_OFFSET, crc32c_of(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def _check_producer_state(
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    is_transactional: bool,
    is_control: bool,
) -> None:
    if is_transactional and producer_id == NO_PRODUCER_ID:
        raise ValueError("a transactional batch needs a producer id")
    if producer_id != NO_PRODUCER_ID:
        if producer_epoch < 0:
            raise ValueError(f"producer id {producer_id} with negative epoch {producer_epoch}")
        if base_sequence < 0 and not is_control:
            raise ValueError(f"producer id {producer_id} with negative sequence {base_sequence}")


def _bytes_field(data: bytes | bytearray | memoryview | None, what: str) -> bytes:
    if data is None:
        return _NULL
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"{what} must be bytes or None, not {type(data).__name__}")
    return encode_varint(len(data)) + bytes(data)


def _headers_field(headers: Iterable[Header]) -> bytes:
    parts = []
    count = 0
    for key, value in headers:
        if key is None:
            raise ValueError("null header key")
        raw_key = key.encode("utf-8") if isinstance(key, str) else key
        parts.append(_bytes_field(raw_key, "header key"))
        parts.append(_bytes_field(value, "header value"))
        count += 1
    return encode_varint(count) + b"".join(parts)


def _check_offset(base_offset: int, previous: int | None, offset: int) -> None:
    _check(record_offset_problem(base_offset, previous, offset))


def _check(problem: str | None) -> None:
    if problem is not None:
        raise ValueError(problem)


class MemoryRecordsBuilder:
    """Accumulates records and builds one v2 batch (see the module docstring for the rules)."""

    def __init__(
        self,
        base_offset: int = 0,
        compression: CompressionType | int = CompressionType.NONE,
        timestamp_type: int = CREATE_TIME,
        *,
        log_append_time: int | None = None,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        base_sequence: int = NO_SEQUENCE,
        is_transactional: bool = False,
        is_control: bool = False,
        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
        delete_horizon_ms: int | None = None,
        compression_level: int | None = None,
    ) -> None:
        _check_offset(base_offset, None, base_offset)
        if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
            raise ValueError(
                f"timestamp type {timestamp_type} is neither CreateTime nor LogAppendTime"
            )
        if (timestamp_type == LOG_APPEND_TIME) != (log_append_time is not None):
            raise ValueError("log_append_time is given exactly when the type is LogAppendTime")
        if delete_horizon_ms is not None and delete_horizon_ms < 0:
            raise ValueError(f"negative delete horizon {delete_horizon_ms}")
        _check_producer_state(
            producer_id, producer_epoch, base_sequence, is_transactional, is_control
        )
        self.base_offset = base_offset
        self.compression = CompressionType(compression)
        self.compression_level = compression_level
        self.timestamp_type = timestamp_type
        self.log_append_time = log_append_time
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.partition_leader_epoch = partition_leader_epoch
        self.delete_horizon_ms = delete_horizon_ms
        self._records = bytearray()
        self._count = 0
        self._last_offset: int | None = None
        self._base_timestamp = delete_horizon_ms
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = -1
        self._built: bytes | None = None

    # -- state ---------------------------------------------------------------------------------

    @property
    def num_records(self) -> int:
        return self._count

    @property
    def last_offset(self) -> int | None:
        """The last appended offset, None before the first append."""
        return self._last_offset

    @property
    def next_offset(self) -> int:
        """The offset ``append(None, ...)`` would use."""
        return self.base_offset if self._last_offset is None else self._last_offset + 1

    @property
    def max_timestamp(self) -> int:
        """The batch's maxTimestamp as it will be written."""
        if self.timestamp_type == LOG_APPEND_TIME:
            assert self.log_append_time is not None
            return self.log_append_time
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        """Offset of the first record holding the max timestamp (-1 without records)."""
        return self._offset_of_max_timestamp

    @property
    def uncompressed_records_size(self) -> int:
        return len(self._records)

    # -- appending -----------------------------------------------------------------------------

    def append(
        self,
        offset: int | None,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[Header] = (),
    ) -> int:
        """Append one record; return its offset (``None`` means the next offset)."""
        if self._built is not None:
            raise ValueError("the builder has already built its batch")
        offset = self.next_offset if offset is None else offset
        self._check_offset(offset)
        if self._base_timestamp is None:
            _check(record_timestamp_problem(timestamp, timestamp))
            self._base_timestamp = timestamp
        _check(record_timestamp_problem(self._base_timestamp, timestamp))
        body = b"".join(
            (
                b"\x00",  # record attributes
                encode_varlong(timestamp - self._base_timestamp),
                encode_varint(offset - self.base_offset),
                _bytes_field(key, "key"),
                _bytes_field(value, "value"),
                _headers_field(headers),
            )
        )
        self._records += encode_varint(len(body))
        self._records += body
        self._count += 1
        self._last_offset = offset
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
            self._offset_of_max_timestamp = offset
        return offset

    def append_record(self, record: Record) -> int:
        """Append a :class:`Record` at its own offset."""
        return self.append(
            record.offset, record.timestamp, record.key, record.value, record.headers
        )

    def _check_offset(self, offset: int) -> None:
        _check_offset(self.base_offset, self._last_offset, offset)

    # -- building ------------------------------------------------------------------------------

    def build(self) -> bytes:
        """The batch's bytes (``b""`` when no record was appended); later calls return the same."""
        if self._built is None:
            self._built = self._build() if self._count else b""
        return self._built

    def _build(self) -> bytes:
        assert self._last_offset is not None and self._base_timestamp is not None
        attributes = _attributes(
            self.compression,
            self.timestamp_type,
            self.is_transactional,
            self.is_control,
            self.delete_horizon_ms is not None,
        )
        return _write_batch(
            compress(self.compression, self._records, self.compression_level),
            base_offset=self.base_offset,
            partition_leader_epoch=self.partition_leader_epoch,
            attributes=attributes,
            last_offset_delta=self._last_offset - self.base_offset,
            base_timestamp=self._base_timestamp,
            max_timestamp=self.max_timestamp,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=self.base_sequence,
            records_count=self._count,
        )


def build_record_batch(
    records: Iterable[Record],
    *,
    base_offset: int | None = None,
    compression: CompressionType | int = CompressionType.NONE,
    **options: object,
) -> bytes:
    """One batch holding ``records`` at their own offsets.

    ``base_offset`` defaults to the first record's offset; ``options`` are the other
    :class:`MemoryRecordsBuilder` keyword arguments. No records build ``b""``.
    """
    items = list(records)
    if base_offset is None:
        base_offset = items[0].offset if items else 0
    builder = MemoryRecordsBuilder(base_offset, compression, **options)  # type: ignore[arg-type]
    for record in items:
        builder.append_record(record)
    return builder.build()


def build_empty_batch(
    base_offset: int,
    last_offset: int,
    *,
    max_timestamp: int = NO_TIMESTAMP,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A batch with no records that keeps its offsets and producer state (Kafka's cleaner).

    Kafka's ``writeEmptyHeader``: recordsCount 0, no compression, baseTimestamp -1.
    """
    if not 0 <= last_offset - base_offset <= INT32_MAX:
        raise ValueError(f"last offset {last_offset} not within int32 above {base_offset}")
    attributes = _attributes(
        CompressionType.NONE, timestamp_type, is_transactional, is_control, False
    )
    return _write_batch(
        b"",
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=last_offset - base_offset,
        base_timestamp=NO_TIMESTAMP,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=0,
    )
