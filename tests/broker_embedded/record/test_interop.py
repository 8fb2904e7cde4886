"""Round trips with independent implementations: kafka-python and aiokafka write, we read; we
write, they read. Every codec, headers, null keys and values, empty keys."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

from broker_embedded.record.compression import CompressionType
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import CREATE_TIME, Record, RecordBatch
from broker_embedded.record.records import iter_batches

from ._peers import PeerBatch, aiokafka_read, kafka_python_has, kafka_python_read

CODECS = list(CompressionType)
Row = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]
Reader = Callable[[bytes], list[PeerBatch]]
ROWS: list[Row] = [
    (1_700_000_000_000, b"key-0", b"value-0" * 20, [("h1", b"v1"), ("h2", None)]),
    (1_700_000_000_001, None, b"value-1" * 20, []),
    (1_700_000_000_005, b"key-2", None, [("trace-id", b"")]),
    (1_699_999_999_000, b"", b"", []),
    (1_700_000_000_002, b"key-4", b"value-4" * 20, [("\u00e9t\u00e9", b"\x00\xff")]),
]
EXPECTED = tuple(
    Record(i, ts, key, value, tuple(headers)) for i, (ts, key, value, headers) in enumerate(ROWS)
)


def _peer_builder(
    cls: type, codec: CompressionType, rows: list[Row] = ROWS, txn: bool = False
) -> Any:
    builder = cls(2, int(codec), txn, 7 if txn else -1, 1 if txn else -1, 0 if txn else -1, 1 << 22)
    for offset, (ts, key, value, headers) in enumerate(rows):
        builder.append(offset, ts, key, value, headers)
    return builder


def _ours(codec: CompressionType, rows: list[Row] = ROWS, epoch: int = 0, **options: Any) -> bytes:
    builder = MemoryRecordsBuilder(0, codec, partition_leader_epoch=epoch, **options)
    for ts, key, value, headers in rows:
        builder.append(None, ts, key, value, headers)
    return builder.build()


# What each library writes as partitionLeaderEpoch (the broker overwrites it).
PEER_EPOCH = {KafkaPythonBuilder: 0, AioBuilder: -1}


def _writers() -> list:
    return [pytest.param(KafkaPythonBuilder, id="kafka-python"), pytest.param(AioBuilder, id="aio")]


def _skip_unsupported(cls_or_reader: object, codec: CompressionType) -> None:
    uses_kafka_python = cls_or_reader in (KafkaPythonBuilder, kafka_python_read)
    if uses_kafka_python and not kafka_python_has(codec):
        pytest.skip("kafka-python has no snappy codec here (python-snappy is not installed)")


# -- they write, we read --------------------------------------------------------------------------


@pytest.mark.parametrize("writer", _writers())
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_we_read_what_they_write(writer: type, codec: CompressionType) -> None:
    _skip_unsupported(writer, codec)
    data = bytes(_peer_builder(writer, codec).build())
    (batch,) = iter_batches(data, "peer", tail="error")
    assert isinstance(batch, RecordBatch)
    batch.ensure_valid()
    assert batch.compression == codec  # the rows compress well: no fallback to none
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (0, 4, 5)
    assert (batch.timestamp_type, batch.base_timestamp, batch.max_timestamp) == (
        CREATE_TIME,
        1_700_000_000_000,
        1_700_000_000_005,
    )
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert tuple(batch.records()) == EXPECTED


@pytest.mark.parametrize("writer", _writers())
def test_we_read_their_transactional_batches(writer: type) -> None:
    data = bytes(_peer_builder(writer, CompressionType.LZ4, txn=True).build())
    batch = RecordBatch(data)
    assert batch.is_valid() and batch.is_transactional and not batch.is_control
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 1, 0)
    assert (batch.last_sequence, batch.compression) == (4, CompressionType.LZ4)
    assert tuple(batch.records()) == EXPECTED


@pytest.mark.parametrize("writer", _writers())
def test_uncompressed_bytes_are_identical_to_theirs(writer: type) -> None:
    theirs = bytes(_peer_builder(writer, CompressionType.NONE).build())
    assert _ours(CompressionType.NONE, epoch=PEER_EPOCH[writer]) == theirs
    txn = bytes(_peer_builder(writer, CompressionType.NONE, txn=True).build())
    options = {"producer_id": 7, "producer_epoch": 1, "base_sequence": 0, "is_transactional": True}
    assert _ours(CompressionType.NONE, epoch=PEER_EPOCH[writer], **options) == txn


# -- we write, they read --------------------------------------------------------------------------


def _readers() -> list:
    return [
        pytest.param(kafka_python_read, id="kafka-python"),
        pytest.param(aiokafka_read, id="aio"),
    ]


def _check_peer(peer: PeerBatch, codec: CompressionType, expected: tuple[Record, ...]) -> None:
    assert peer.crc_valid
    assert (peer.compression, peer.base_offset) == (codec, 0)
    assert peer.last_offset == expected[-1].offset
    assert peer.max_timestamp == max(r.timestamp for r in expected)
    assert peer.records == expected


@pytest.mark.parametrize("reader", _readers())
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_they_read_what_we_write(reader: Reader, codec: CompressionType) -> None:
    _skip_unsupported(reader, codec)
    (peer,) = reader(_ours(codec))
    _check_peer(peer, codec, EXPECTED)


@pytest.mark.parametrize("reader", _readers())
def test_they_read_a_run_of_our_batches(reader: Reader) -> None:
    codecs = [CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4]
    data = b"".join(_one(10 * i, codec) for i, codec in enumerate(codecs))
    peers = reader(data)
    assert [(p.base_offset, p.compression, p.crc_valid) for p in peers] == [
        (0, 0, True),
        (10, 1, True),
        (20, 3, True),
    ]
    assert [r.offset for p in peers for r in p.records] == [0, 10, 20]


def _one(offset: int, codec: CompressionType) -> bytes:
    builder = MemoryRecordsBuilder(offset, codec)
    builder.append(None, 5, b"k", b"v")
    return builder.build()


# -- properties -----------------------------------------------------------------------------------

HEADER = st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=6))
ROW = st.tuples(
    st.integers(0, 2**42),
    st.none() | st.binary(max_size=30),
    st.none() | st.binary(max_size=60),
    st.lists(HEADER, max_size=3),
)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
@settings(max_examples=25, deadline=None)
@given(rows=st.lists(ROW, min_size=1, max_size=12))
def test_round_trips_property(codec: CompressionType, rows: list) -> None:
    expected = tuple(
        Record(i, ts, key, value, tuple(headers))
        for i, (ts, key, value, headers) in enumerate(rows)
    )
    ours = _ours(codec, rows)
    (peer,) = aiokafka_read(ours)
    _check_peer(peer, codec, expected)
    if kafka_python_has(codec):
        (peer,) = kafka_python_read(ours)
        _check_peer(peer, codec, expected)
    theirs = bytes(_peer_builder(AioBuilder, codec, rows).build())
    batch = RecordBatch(theirs)
    assert batch.is_valid()
    assert tuple(batch.records()) == expected
    if codec == CompressionType.NONE:
        assert _ours(codec, rows, epoch=PEER_EPOCH[AioBuilder]) == theirs
