"""A read view over one legacy message set entry (magic 0 and 1), and its records.

Byte layout (big-endian), one entry of a message set:

    0  offset int64            (magic 1 wrapper: the LAST inner offset)
    8  size int32              bytes that follow: crc .. end of value
    12 crc uint32              plain CRC-32 (zlib) of bytes [16, end)
    16 magic int8              0 or 1
    17 attributes int8         bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4), bit 3 timestamp
                               type (magic 1 only: 1 = LogAppendTime)
    18 timestamp int64         magic 1 only
    .. keyLength int32 (-1 null) + key, valueLength int32 (-1 null) + value

A message whose codec is not none is a wrapper: its value is a compressed message set of inner
messages (same layout). Magic 1 wrappers hold relative inner offsets (0, 1, ...): absolute =
wrapper offset - last inner offset + inner offset, except that a wrapper offset of 0 (produce data
from some librdkafka versions) keeps the inner offsets as they are; magic 0 inner offsets are
absolute. A magic 1 wrapper with LogAppendTime gives every inner record the wrapper's timestamp;
with CreateTime inner records keep their own (magic 0 records have none: -1). Inner messages may
differ in magic from their wrapper (Kafka's consumer accepts that); inner messages that are
themselves compressed, a truncated or empty inner set, a null wrapper value and zstd (which needs
magic 2) are corrupt, and so are records that a v2 batch could not hold: absolute inner offsets
negative, not strictly increasing or more than int32 above the first, timestamps below -1 or more
than int64 apart (``record_batch.record_offset_problem`` and ``record_timestamp_problem``, the rules
the columnar decoder meets when it re-encodes an entry as v2). Kafka's own reader does not check
them; Kafka's broker never writes such an entry. Magic 0 lz4 wrappers from Kafka
before 0.10 carry a wrong frame header checksum (KAFKA-3160): Kafka reads them ignoring it, and so
does this module.

:class:`LegacyRecordBatch` offers the read interface of ``RecordBatch`` (no producer state, no
partition leader epoch, no record headers). ``last_offset`` is the entry's offset field,
``base_offset`` the first inner offset (which decompresses a wrapper, as Kafka does). Views are
immutable (the inner summary is computed once and cached; a race only computes it twice) and safe
to share between threads.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record.batch_layout import LOG_OVERHEAD, MAGIC_OFFSET
from broker_embedded.record.compression import (
    CompressionType,
    decompress,
    lz4_fix_header_checksum,
)
from broker_embedded.record.record_batch import (
    CODEC_MASK,
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    NO_TIMESTAMP_TYPE,
    TIMESTAMP_TYPE_MASK,
    Record,
    TimestampType,
    record_offset_problem,
    record_timestamp_problem,
)

MAGIC_V0 = 0
MAGIC_V1 = 1
# Bytes after the 12 bytes of log overhead when key and value are both null.
RECORD_OVERHEAD = {MAGIC_V0: 14, MAGIC_V1: 22}
_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_TIMESTAMP = _OFFSET = struct.Struct(">q")
_LENGTH = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class _Message:
    """One parsed legacy message (outer or inner); key and value are views into its buffer."""

    offset: int
    size_in_bytes: int
    crc: int
    magic: int
    attributes: int
    timestamp: int
    key: memoryview | None
    value: memoryview | None


def _read_bytes(view: memoryview, pos: int, end: int, what: str) -> tuple[memoryview | None, int]:
    if pos + 4 > end:
        raise CorruptRecordError(f"{what} length runs past the message")
    (n,) = _LENGTH.unpack_from(view, pos)
    pos += 4
    if n == -1:
        return None, pos
    if n < 0 or pos + n > end:
        raise CorruptRecordError(f"{what} length {n} runs past the message")
    return view[pos : pos + n], pos + n


def _parse_message(view: memoryview, pos: int, end: int) -> _Message:
    """Parse the message at ``view[pos:]`` that must end by ``end``; errors carry no context."""
    if end - pos < LOG_OVERHEAD + RECORD_OVERHEAD[MAGIC_V0]:
        raise CorruptRecordError(f"message header needs more than the {end - pos} bytes left")
    offset, size, crc, magic, attributes = _HEAD.unpack_from(view, pos)
    if magic not in RECORD_OVERHEAD:
        raise CorruptRecordError(f"magic {magic} is not a legacy message (0 or 1)")
    if size < RECORD_OVERHEAD[magic]:
        raise CorruptRecordError(f"message size {size} is below the minimum for magic {magic}")
    msg_end = pos + LOG_OVERHEAD + size
    if msg_end > end:
        raise CorruptRecordError(f"message of {size + LOG_OVERHEAD} bytes runs past the data")
    p = pos + _HEAD.size
    timestamp = NO_TIMESTAMP
    if magic == MAGIC_V1:
        (timestamp,) = _TIMESTAMP.unpack_from(view, p)
        p += _TIMESTAMP.size
    key, p = _read_bytes(view, p, msg_end, "key")
    value, p = _read_bytes(view, p, msg_end, "value")
    if p != msg_end:
        raise CorruptRecordError(f"{msg_end - p} stray bytes after the value of the message")
    return _Message(offset, size + LOG_OVERHEAD, crc, magic, attributes, timestamp, key, value)


class LegacyRecordBatch:
    """A view of one magic 0 or 1 entry: ``buf[position : position + size_in_bytes]``.

    ``source`` names the file or buffer in error messages; ``position`` is where the entry starts
    within that source.
    """

    __slots__ = ("_view", "_message", "_inner", "source", "position")

    def __init__(self, view: bytes | memoryview, source: str = "<buffer>", position: int = 0):
        view = memoryview(view)
        self.source = source
        self.position = position
        self._inner: list[_Message] | None = None
        try:
            self._message = _parse_message(view, 0, len(view))
        except CorruptRecordError as e:
            offset = _OFFSET.unpack_from(view, 0)[0] if len(view) >= _OFFSET.size else None
            raise CorruptRecordError(
                e.reason, source=source, position=position, base_offset=offset
            ) from None
        self._view = view[: self._message.size_in_bytes]

    def _corrupt(self, reason: str) -> CorruptRecordError:
        return CorruptRecordError(
            reason, source=self.source, position=self.position, base_offset=self._message.offset
        )

    # -- header fields -------------------------------------------------------------------------

    @property
    def buffer(self) -> memoryview:
        """The entry's bytes, exactly ``size_in_bytes`` long."""
        return self._view

    @property
    def size_in_bytes(self) -> int:
        return self._message.size_in_bytes

    @property
    def magic(self) -> int:
        return self._message.magic

    @property
    def crc(self) -> int:
        return self._message.crc

    @property
    def attributes(self) -> int:
        return self._message.attributes

    @property
    def is_compressed(self) -> bool:
        return bool(self._message.attributes & CODEC_MASK)

    @property
    def compression(self) -> CompressionType:
        codec = self._message.attributes & CODEC_MASK
        try:
            return CompressionType(codec)
        except ValueError:
            raise self._corrupt(f"unknown compression codec id {codec}") from None

    @property
    def timestamp_type(self) -> TimestampType:
        if self._message.magic == MAGIC_V0:
            return NO_TIMESTAMP_TYPE
        return LOG_APPEND_TIME if self._message.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def max_timestamp(self) -> int:
        """The entry's own timestamp (-1 for magic 0), as Kafka reports it."""
        return self._message.timestamp

    @property
    def last_offset(self) -> int:
        return self._message.offset

    @property
    def next_offset(self) -> int:
        return self._message.offset + 1

    @property
    def base_offset(self) -> int:
        """The first record's offset (decompresses a wrapper)."""
        if not self.is_compressed:
            return self._message.offset
        return self._absolute_offset(self._inner_messages()[0])

    @property
    def records_count(self) -> int:
        """1 for a plain message, the number of inner messages of a wrapper."""
        if not self.is_compressed:
            return 1
        return len(self._inner_messages())

    is_transactional = False
    is_control = False
    has_delete_horizon = False
    delete_horizon_ms = None
    producer_id = NO_PRODUCER_ID
    producer_epoch = -1
    base_sequence = -1
    last_sequence = -1
    partition_leader_epoch = NO_PARTITION_LEADER_EPOCH

    # -- validation ----------------------------------------------------------------------------

    def compute_crc(self) -> int:
        return zlib.crc32(self._view[MAGIC_OFFSET:]) & 0xFFFFFFFF

    def is_valid(self) -> bool:
        return self.compute_crc() == self._message.crc

    def ensure_valid(self) -> None:
        actual = self.compute_crc()
        if actual != self._message.crc:
            raise self._corrupt(
                f"CRC mismatch: stored {self._message.crc:#010x}, computed {actual:#010x}"
            )

    # -- records -------------------------------------------------------------------------------

    def records(self) -> Iterator[Record]:
        """Every record: the message itself, or a wrapper's inner messages."""
        if not self.is_compressed:
            messages, shift = [self._message], 0
        else:
            messages = self._inner_messages()
            shift = self._offset_shift(messages[-1])
        timestamps = self._checked_timestamps(messages)
        for m, timestamp in zip(messages, timestamps, strict=True):
            key = None if m.key is None else bytes(m.key)
            value = None if m.value is None else bytes(m.value)
            yield Record(shift + m.offset, timestamp, key, value, ())

    def _checked_timestamps(self, messages: list[_Message]) -> list[int]:
        """The records' timestamps, which a batch must be able to hold
        (``record_timestamp_problem``)."""
        timestamps = [self._timestamp_of(m) for m in messages]
        for i, timestamp in enumerate(timestamps):
            problem = record_timestamp_problem(timestamps[0], timestamp)
            if problem is not None:
                where = f"inner message {i}: " if self.is_compressed else ""
                raise self._corrupt(where + problem)
        return timestamps

    def _timestamp_of(self, m: _Message) -> int:
        if m.magic == MAGIC_V0:
            return NO_TIMESTAMP
        if m is not self._message and self.timestamp_type == LOG_APPEND_TIME:
            return self._message.timestamp
        return m.timestamp

    def _absolute_offset(self, m: _Message) -> int:
        return self._offset_shift(self._inner_messages()[-1]) + m.offset

    def _offset_shift(self, last_inner: _Message) -> int:
        """What turns an inner offset into an absolute one (see the module docstring)."""
        wrapper = self._message
        if wrapper.magic == MAGIC_V0 or wrapper.offset == 0:
            return 0
        return wrapper.offset - last_inner.offset

    def _inner_messages(self) -> list[_Message]:
        if self._inner is None:
            self._inner = self._read_inner()
        return self._inner

    def _read_inner(self) -> list[_Message]:
        data = self._decompressed_value()
        messages = []
        pos = 0
        while pos < len(data):
            try:
                m = _parse_message(data, pos, len(data))
            except CorruptRecordError as e:
                raise self._corrupt(f"{e.reason} (inner message at byte {pos})") from None
            if m.attributes & CODEC_MASK:
                raise self._corrupt(f"inner message at byte {pos} is compressed (nested wrapper)")
            messages.append(m)
            pos += m.size_in_bytes
        if not messages:
            raise self._corrupt("compressed message set holds no inner messages")
        last = messages[-1].offset
        if self.magic == MAGIC_V1 and 0 < self.last_offset < last:
            raise self._corrupt(
                f"wrapper offset {self.last_offset} is below the last inner offset {last}"
            )
        self._check_inner_offsets(messages)
        return messages

    def _check_inner_offsets(self, messages: list[_Message]) -> None:
        """The absolute inner offsets follow a batch's rule (``record_offset_problem``)."""
        shift = self._offset_shift(messages[-1])
        base = previous = None
        for i, m in enumerate(messages):
            offset = shift + m.offset
            base = offset if base is None else base
            problem = record_offset_problem(base, previous, offset)
            if problem is not None:
                raise self._corrupt(f"inner message {i}: {problem}")
            previous = offset

    def _decompressed_value(self) -> memoryview:
        codec = self.compression
        if codec == CompressionType.ZSTD:
            raise self._corrupt(f"zstd compression in a magic {self.magic} message set")
        value = self._message.value
        if value is None:
            raise self._corrupt("compressed message with a null value")
        data: bytes | memoryview = value
        if codec == CompressionType.LZ4 and self.magic == MAGIC_V0:
            data = lz4_fix_header_checksum(value)
        try:
            return memoryview(decompress(codec, data))
        except CorruptRecordError as e:
            raise self._corrupt(e.reason) from None

    def __repr__(self) -> str:
        m = self._message
        return (
            f"LegacyRecordBatch(source={self.source!r}, position={self.position}, "
            f"magic={m.magic}, offset={m.offset}, codec={m.attributes & CODEC_MASK}, "
            f"size={m.size_in_bytes})"
        )
