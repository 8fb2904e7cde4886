"""A read view over one record batch v2 (magic 2), and its records (the slow path).

Byte layout (big-endian, ``DefaultRecordBatch``): the 61-byte header of ``batch_layout``
(baseOffset, batchLength, partitionLeaderEpoch, magic 2, crc = CRC-32C of [21, end), attributes,
lastOffsetDelta, baseTimestamp (deleteHorizonMs when attribute bit 6), maxTimestamp, producerId,
producerEpoch, baseSequence, recordsCount; ``HEADER_STRUCT`` reads them in that order), then the
records (compressed as one stream when the codec is not none).

Attributes: bits 0-2 codec, 3 timestamp type (1 = LogAppendTime: every record's timestamp is
maxTimestamp), 4 transactional, 5 control, 6 delete horizon set.

Record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint, keyLength
varint (-1 null) + key, valueLength varint (-1 null) + value, headerCount varint, then per header
keyLength varint + UTF-8 key, valueLength varint (-1 null) + value. All varints zigzag.

Invariants checked by :meth:`RecordBatch.records` and :meth:`RecordBatch.ensure_valid`: the view
covers exactly ``batchLength + 12`` bytes, the CRC matches, every record stays inside its batch, the
record count equals ``recordsCount`` and offsets stay within ``lastOffsetDelta``. Views are
immutable and hold a reference to the underlying buffer; safe to share between threads.

:func:`set_base_offset`, :func:`set_partition_leader_epoch` and :func:`set_max_timestamp` rewrite
a batch in a writable buffer the way the leader does on append: the first two leave the CRC alone
(it does not cover bytes 0-20), the third recomputes it. They mutate the caller's buffer: the
caller owns it and must not share it while rewriting.

:func:`record_offset_problem` and :func:`record_timestamp_problem` are the rules a record must meet
to be written into a batch (offsets in [0, 2^63), strictly increasing, within int32 above the
first; timestamps -1 or not negative, within int64 of the base timestamp): the builder enforces
them, and the records of legacy entries must meet them (the columnar decoder re-encodes them as a
v2 batch).

The columnar decoder does not use this module's per-record objects: this is for tools, tests,
builders and the broker's validation.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import crc32c

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record.batch_layout import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    CODEC_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    entry_last_offset,
)
from broker_embedded.record.compression import CompressionType, decompress
from broker_embedded.record.varint import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    decode_varint,
    decode_varlong,
)

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PARTITION_LEADER_EPOCH = -1


class TimestampType(enum.IntEnum):
    """What a batch's timestamps mean (attribute bit 3); magic 0 has none."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


CREATE_TIME = TimestampType.CREATE_TIME
LOG_APPEND_TIME = TimestampType.LOG_APPEND_TIME
NO_TIMESTAMP_TYPE = TimestampType.NO_TIMESTAMP_TYPE


def record_offset_problem(base_offset: int, previous: int | None, offset: int) -> str | None:
    """Why a batch whose first record is at ``base_offset`` cannot hold a record at ``offset``
    right after one at ``previous`` (``None`` for the first record), or ``None`` when it can:
    offsets lie in [0, 2^63), increase strictly and stay within int32 above the base (a record
    holds its offset as an int32 delta)."""
    if not 0 <= base_offset <= INT64_MAX:
        return f"base offset {base_offset} outside [0, 2^63)"
    if previous is not None and offset <= previous:
        return f"offset {offset} follows {previous}: offsets must increase strictly"
    if not 0 <= offset - base_offset <= INT32_MAX:
        return f"offset {offset} is not within int32 range above base offset {base_offset}"
    return None


def record_timestamp_problem(base_timestamp: int, timestamp: int) -> str | None:
    """Why a batch whose base timestamp is ``base_timestamp`` cannot hold a record stamped
    ``timestamp`` (a record holds it as a varlong delta), or ``None`` when it can: -1 (none) or
    not negative, as Kafka's builder requires."""
    if timestamp < 0 and timestamp != NO_TIMESTAMP:
        return f"invalid negative timestamp {timestamp}"
    if not INT64_MIN <= timestamp - base_timestamp <= INT64_MAX:
        return f"timestamp {timestamp} is not within int64 of base timestamp {base_timestamp}"
    return None


# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordsCount
HEADER_STRUCT = _HEADER = struct.Struct(">qiibIhiqqqhii")


@dataclass(frozen=True, slots=True)
class Record:
    """One record as a consumer sees it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def crc32c_of(data: bytes | memoryview) -> int:
    """CRC-32C (Castagnoli), as Kafka computes it."""
    return crc32c.crc32c(data)


class RecordBatch:
    """A view of one magic-2 batch: ``buf[position : position + size_in_bytes]``.

    ``source`` names the file or buffer in error messages; ``position`` is where the batch starts
    within that source.
    """

    __slots__ = (
        "_view",
        "source",
        "position",
        "base_offset",
        "batch_length",
        "partition_leader_epoch",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp_raw",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records_count",
    )

    def __init__(self, view: bytes | memoryview, source: str = "<buffer>", position: int = 0):
        view = memoryview(view)
        if len(view) < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"record batch header needs {RECORD_BATCH_OVERHEAD} bytes, only {len(view)} left",
                source=source,
                position=position,
            )
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp_raw,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        ) = _HEADER.unpack_from(view, 0)
        self.source = source
        self.position = position
        if self.magic != 2:
            raise self._corrupt(f"magic {self.magic} is not a v2 record batch")
        size = self.batch_length + LOG_OVERHEAD
        if self.batch_length < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD:
            raise self._corrupt(f"batch length {self.batch_length} is below the v2 header size")
        if size > len(view):
            raise self._corrupt(f"batch of {size} bytes runs past the {len(view)} bytes available")
        if self.records_count < 0:
            raise self._corrupt(f"negative record count {self.records_count}")
        if self.last_offset_delta < 0:
            raise self._corrupt(f"negative last offset delta {self.last_offset_delta}")
        self._view = view[:size]

    def _corrupt(self, reason: str) -> CorruptRecordError:
        """The error naming the batch's base offset, unless negative (no offset: what the
        header walk names too, entry_scan.py)."""
        base_offset = self.base_offset if self.base_offset >= 0 else None
        return CorruptRecordError(
            reason, source=self.source, position=self.position, base_offset=base_offset
        )

    # -- header fields -------------------------------------------------------------------------

    @property
    def buffer(self) -> memoryview:
        """The batch's bytes, exactly ``size_in_bytes`` long."""
        return self._view

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return entry_last_offset(self.base_offset, self.last_offset_delta)

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> CompressionType:
        codec = self.attributes & CODEC_MASK
        try:
            return CompressionType(codec)
        except ValueError:
            raise self._corrupt(f"unknown compression codec id {codec}") from None

    @property
    def timestamp_type(self) -> TimestampType:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def max_timestamp(self) -> int:
        return self.max_timestamp_raw

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF

    # -- validation ----------------------------------------------------------------------------

    def compute_crc(self) -> int:
        return crc32c_of(self._view[ATTRIBUTES_OFFSET:])

    def is_valid(self) -> bool:
        return self.compute_crc() == self.crc

    def ensure_valid(self) -> None:
        actual = self.compute_crc()
        if actual != self.crc:
            raise self._corrupt(f"CRC mismatch: stored {self.crc:#010x}, computed {actual:#010x}")

    # -- records -------------------------------------------------------------------------------

    def records_bytes(self, max_size: int | None = None) -> bytes | memoryview:
        """The records section, decompressed."""
        raw = self._view[RECORD_BATCH_OVERHEAD:]
        codec = self.compression
        if codec == CompressionType.NONE:
            return raw
        try:
            if max_size is None:
                return decompress(codec, raw)
            return decompress(codec, raw, max_size)
        except CorruptRecordError as e:
            raise self._corrupt(e.reason) from e

    def records(self) -> Iterator[Record]:
        """Decode every record (one Python object each: not for the hot path)."""
        data = memoryview(self.records_bytes())
        pos = 0
        end = len(data)
        for i in range(self.records_count):
            if pos >= end:
                raise self._corrupt(
                    f"batch declares {self.records_count} records but holds only {i}"
                )
            rec, pos = self._read_record(data, pos, end)
            yield rec
        if pos != end:
            raise self._corrupt(f"{end - pos} bytes left over after {self.records_count} records")

    def __repr__(self) -> str:
        return (
            f"RecordBatch(source={self.source!r}, position={self.position}, "
            f"offsets=[{self.base_offset}, {self.last_offset}], count={self.records_count}, "
            f"codec={self.attributes & CODEC_MASK}, size={self.size_in_bytes})"
        )

    def _read_record(self, data: memoryview, pos: int, end: int) -> tuple[Record, int]:
        try:
            length, p = decode_varint(data, pos)
            if length < 0 or p + length > end:
                raise self._corrupt(f"record length {length} at records byte {pos} runs past batch")
            rec_end = p + length
            body = data[:rec_end]
            p += 1  # record attributes, unused
            ts_delta, p = decode_varlong(body, p)
            offset_delta, p = decode_varint(body, p)
            key, p = _read_bytes(body, p)
            value, p = _read_bytes(body, p)
            headers, p = _read_headers(body, p, length)
            if p != rec_end:
                raise self._corrupt(f"record at records byte {pos} has {rec_end - p} stray bytes")
        except CorruptRecordError as e:
            if e.base_offset is not None:
                raise
            raise self._corrupt(f"{e.reason} in record at records byte {pos}") from e
        if not 0 <= offset_delta <= self.last_offset_delta:
            raise self._corrupt(
                f"record offset delta {offset_delta} outside [0, {self.last_offset_delta}]"
            )
        if self.timestamp_type == LOG_APPEND_TIME:
            ts = self.max_timestamp_raw
        else:
            ts = self.base_timestamp + ts_delta
        record = Record(self.base_offset + offset_delta, ts, key, value, headers)
        return record, rec_end


def _read_headers(
    body: memoryview, pos: int, record_length: int
) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    """Header count, then per header a UTF-8 key (never null; bad UTF-8 is replaced, as Java
    does) and a value (-1 null)."""
    count, pos = decode_varint(body, pos)
    if count < 0 or count > record_length:
        raise CorruptRecordError(f"impossible header count {count}")
    headers = []
    for _ in range(count):
        key, pos = _read_bytes(body, pos)
        if key is None:
            raise CorruptRecordError("null header key")
        value, pos = _read_bytes(body, pos)
        headers.append((key.decode("utf-8", "replace"), value))
    return tuple(headers), pos


def _read_bytes(body: bytes | memoryview, pos: int) -> tuple[bytes | None, int]:
    n, pos = decode_varint(body, pos)
    if n < 0:
        if n != -1:
            raise CorruptRecordError(f"negative length {n}")
        return None, pos
    if pos + n > len(body):
        raise CorruptRecordError(f"length {n} runs past the record")
    return bytes(body[pos : pos + n]), pos + n


# -- in-place header rewrites (the leader's append path) ------------------------------------------


def _writable_v2(buf: bytearray | memoryview, position: int) -> memoryview:
    view = memoryview(buf)
    if view.readonly:
        raise TypeError("rewriting a batch header needs a writable buffer (bytearray)")
    if position < 0 or position + RECORD_BATCH_OVERHEAD > len(view):
        raise ValueError(f"no record batch header at position {position}")
    if view[position + MAGIC_OFFSET] != 2:
        raise ValueError(f"magic {view[position + MAGIC_OFFSET]} at position {position} is not v2")
    return view


def set_base_offset(buf: bytearray | memoryview, base_offset: int, position: int = 0) -> None:
    """Overwrite baseOffset in place; the CRC stays valid (it does not cover it)."""
    struct.pack_into(">q", _writable_v2(buf, position), position + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, epoch: int, position: int = 0) -> None:
    """Overwrite partitionLeaderEpoch in place; the CRC stays valid (it does not cover it)."""
    view = _writable_v2(buf, position)
    struct.pack_into(">i", view, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp(
    buf: bytearray | memoryview, timestamp_type: int, max_timestamp: int, position: int = 0
) -> None:
    """Set the timestamp type bit and maxTimestamp, recomputing the CRC if anything changed.

    What the broker does for a LogAppendTime topic: readers then use ``max_timestamp`` as every
    record's timestamp.
    """
    view = _writable_v2(buf, position)
    batch = RecordBatch(view[position:], position=position)
    if batch.timestamp_type == timestamp_type and batch.max_timestamp == max_timestamp:
        return
    attributes = batch.attributes & ~TIMESTAMP_TYPE_MASK
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    struct.pack_into(">h", view, position + ATTRIBUTES_OFFSET, attributes)
    struct.pack_into(">q", view, position + MAX_TIMESTAMP_OFFSET, max_timestamp)
    end = position + batch.size_in_bytes
    crc = crc32c_of(view[position + ATTRIBUTES_OFFSET : end])
    struct.pack_into(">I", view, position + CRC_OFFSET, crc)
