"""Independent Kafka record readers and writers used as test oracles: kafka-python and aiokafka.

Both are test-only dependencies. kafka-python's snappy needs python-snappy, which may be missing:
:func:`kafka_python_has` says which codecs it can handle here. aiokafka uses cramjam for every
codec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import kafka.codec
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from kafka.record.memory_records import MemoryRecords as KafkaPythonMemoryRecords

from broker_embedded.record.compression import CompressionType
from broker_embedded.record.record_batch import Record


@dataclass(frozen=True)
class PeerBatch:
    """What a peer library reports about one v2 batch."""

    base_offset: int
    last_offset: int
    compression: int
    timestamp_type: int
    is_transactional: bool
    is_control: bool
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    crc_valid: bool
    records: tuple[Record, ...]


def kafka_python_has(codec: CompressionType) -> bool:
    return {
        CompressionType.NONE: True,
        CompressionType.GZIP: kafka.codec.has_gzip(),
        CompressionType.SNAPPY: kafka.codec.has_snappy(),
        CompressionType.LZ4: kafka.codec.has_lz4(),
        CompressionType.ZSTD: kafka.codec.has_zstd(),
    }[codec]


def _record(r: Any) -> Record:
    # Both libraries report a magic 0 record's missing timestamp as None; Kafka says -1.
    timestamp = -1 if r.timestamp is None else r.timestamp
    return Record(r.offset, timestamp, r.key, r.value, tuple(r.headers or ()))


def _records(batch: Any) -> tuple[Record, ...]:
    return tuple(_record(r) for r in batch)


def _v2(b: Any) -> PeerBatch:
    """From a DefaultRecordBatch of either library."""
    return PeerBatch(
        base_offset=b.base_offset,
        last_offset=b.base_offset + b.last_offset_delta,
        compression=b.compression_type,
        timestamp_type=b.timestamp_type,
        is_transactional=b.is_transactional,
        is_control=b.is_control_batch,
        max_timestamp=b.max_timestamp,
        producer_id=b.producer_id,
        producer_epoch=b.producer_epoch,
        base_sequence=b.base_sequence,
        crc_valid=b.validate_crc(),
        records=_records(b),
    )


def kafka_python_read(data: bytes) -> list[PeerBatch]:
    records = KafkaPythonMemoryRecords(bytes(data))
    out = []
    while (batch := records.next_batch()) is not None:
        out.append(_v2(batch))
    return out


def aiokafka_read(data: bytes) -> list[PeerBatch]:
    records = AioMemoryRecords(bytes(data))
    out = []
    while records.has_next():
        out.append(_v2(records.next_batch()))
    return out


def kafka_python_read_records(data: bytes) -> list[Record]:
    """Records of any magic, as kafka-python's consumer sees them."""
    records = KafkaPythonMemoryRecords(bytes(data))
    out: list[Record] = []
    while (batch := records.next_batch()) is not None:
        out.extend(_records(batch))
    return out


def aiokafka_read_records(data: bytes) -> list[Record]:
    """Records of any magic, as aiokafka's consumer sees them."""
    records = AioMemoryRecords(bytes(data))
    out: list[Record] = []
    while records.has_next():
        out.extend(_records(records.next_batch()))
    return out
