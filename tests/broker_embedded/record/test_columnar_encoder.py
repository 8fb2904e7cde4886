"""The columnar encoder: byte for byte what MemoryRecordsBuilder builds for the same split, read
back by kafka-python and by our columnar decoder; the split rules, producer state, inputs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker_embedded.record import columnar_encoder
from broker_embedded.record.arrow_builder import HEADERS_TYPE
from broker_embedded.record.columnar_decoder import decode, kafka_schema
from broker_embedded.record.columnar_encoder import EncodedBatches, encode_batches
from broker_embedded.record.compression import CompressionType
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import Record, RecordBatch
from broker_embedded.record.records import iter_batches
from broker_embedded.record.varint import INT32_MAX, INT64_MAX

from ._peers import kafka_python_has, kafka_python_read

TOPIC = "events"
PARTITION = 2
HEADER_STRUCT = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADERS = pa.list_(HEADER_STRUCT)
Headers = Sequence[tuple[str, bytes | None]] | None


@dataclass(frozen=True)
class Row:
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = None


@dataclass(frozen=True)
class Producer:
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    is_transactional: bool = False


NO_PRODUCER = Producer()


@pytest.fixture(scope="module", autouse=True)
def _compiled() -> None:
    columnar_encoder.warm_up()


# -- helpers ---------------------------------------------------------------------------------------


def _columns(rows: Sequence[Row], pad: int = 0, large: bool = False) -> tuple[Any, ...]:
    """keys, values, timestamps, headers; ``pad`` junk rows in front, sliced off (non-zero Arrow
    offsets); ``large``: large_binary and large_list."""
    junk = [Row(7, b"junk-key", b"junk-value", [("j", b"x")])] * pad
    everything = junk + list(rows)
    binary = pa.large_binary() if large else pa.binary()
    headers_type = pa.large_list(HEADER_STRUCT) if large else HEADERS
    keys = pa.array([r.key for r in everything], binary).slice(pad)
    values = pa.array([r.value for r in everything], binary).slice(pad)
    headers = pa.array(
        [
            None if r.headers is None else [{"key": k, "value": v} for k, v in r.headers]
            for r in everything
        ],
        headers_type,
    ).slice(pad)
    timestamps = np.array([r.timestamp for r in rows], np.int64)
    return keys, values, timestamps, headers


def _sequence(base: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence, spelled as Java spells it."""
    if base == -1:
        return -1
    if base > INT32_MAX - increment:
        return increment - (INT32_MAX - base) - 1
    return base + increment


def _builder(
    base_offset: int, codec: CompressionType, producer: Producer, first_row: int
) -> MemoryRecordsBuilder:
    return MemoryRecordsBuilder(
        base_offset + first_row,
        codec,
        producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch,
        base_sequence=_sequence(producer.base_sequence, first_row),
        is_transactional=producer.is_transactional,
    )


def _append(builder: MemoryRecordsBuilder, row: Row) -> None:
    builder.append(None, row.timestamp, row.key, row.value, row.headers or ())


def _reference(
    rows: Sequence[Row],
    codec: CompressionType = CompressionType.NONE,
    max_batch_bytes: int = 1 << 20,
    max_batch_records: int | None = None,
    producer: Producer = NO_PRODUCER,
    base_offset: int = 0,
) -> list[bytes]:
    """The split rule spelled out with MemoryRecordsBuilder: a batch takes the next row while it
    has fewer than max_batch_records rows and its uncompressed records stay within
    max_batch_bytes with the row in it; a batch always takes its first row."""
    batches: list[list[Row]] = []
    for row in rows:
        current = batches[-1] if batches else None
        if current is not None and (max_batch_records is None or len(current) < max_batch_records):
            probe = _builder(base_offset, CompressionType.NONE, producer, 0)
            for r in (*current, row):
                _append(probe, r)
            if probe.uncompressed_records_size <= max_batch_bytes:
                current.append(row)
                continue
        batches.append([row])
    out = []
    first = 0
    for batch in batches:
        builder = _builder(base_offset, codec, producer, first)
        for row in batch:
            _append(builder, row)
        out.append(builder.build())
        first += len(batch)
    return out


def _expected_records(rows: Sequence[Row], base_offset: int) -> list[Record]:
    return [
        Record(base_offset + i, r.timestamp, r.key, r.value, tuple(r.headers or ()))
        for i, r in enumerate(rows)
    ]


def _decoded_records(result: EncodedBatches) -> list[Record]:
    """The rows as our columnar decoder reads them back, as Records (timestamps in ms)."""
    decoded = decode(result.data, topic=TOPIC, partition=PARTITION, include_headers=True)
    assert decoded.next_offset == (result.next_offset if len(result) else 0)
    out = []
    for batch in decoded.batches:
        assert batch.schema.equals(kafka_schema(True))
        batch.validate(full=True)
        micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
        for offset, us, key, value, headers in zip(
            batch.column("offset").to_pylist(),
            micros,
            batch.column("key").to_pylist(),
            batch.column("value").to_pylist(),
            batch.column("headers").to_pylist(),
            strict=True,
        ):
            pairs = tuple((h["key"], h["value"]) for h in headers or ())
            out.append(Record(offset, us // 1000, key, value, pairs))
    return out


def _encode(rows: Sequence[Row], **options: Any) -> EncodedBatches:
    keys, values, timestamps, headers = _columns(rows)
    return encode_batches(keys, values, timestamps, headers, **options)


def _value_row(i: int, size: int = 100, ts: int = 1_700_000_000_000) -> Row:
    return Row(ts, None, bytes([i % 256]) * size)


# -- the property: byte-identical to MemoryRecordsBuilder, readable by others ---------------------

_header_key = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
_headers = st.none() | st.lists(
    st.tuples(_header_key, st.none() | st.binary(max_size=10)), max_size=3
)
_timestamp = (
    st.just(-1) | st.integers(0, 1 << 43) | st.integers(1_700_000_000_000, 1_700_000_100_000)
)
_row = st.builds(
    Row,
    _timestamp,
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=200),
    _headers,
)
_producer = st.just(NO_PRODUCER) | st.builds(
    Producer,
    st.integers(0, INT64_MAX),
    st.integers(0, 0x7FFF),
    st.integers(0, 100) | st.integers(INT32_MAX - 70, INT32_MAX),
    st.booleans(),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(_row, max_size=40),
    codec=st.sampled_from(list(CompressionType)),
    max_batch_bytes=st.integers(1, 3000),
    max_batch_records=st.none() | st.integers(1, 12),
    producer=_producer,
    base_offset=st.integers(0, 1 << 40),
    pad=st.integers(0, 3),
    large=st.booleans(),
)
def test_byte_identical_to_memory_records_builder(
    rows: list[Row],
    codec: CompressionType,
    max_batch_bytes: int,
    max_batch_records: int | None,
    producer: Producer,
    base_offset: int,
    pad: int,
    large: bool,
) -> None:
    keys, values, timestamps, headers = _columns(rows, pad, large)
    result = encode_batches(
        keys,
        values,
        timestamps,
        headers,
        compression=codec,
        max_batch_bytes=max_batch_bytes,
        max_batch_records=max_batch_records,
        producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch,
        base_sequence=producer.base_sequence,
        is_transactional=producer.is_transactional,
        base_offset=base_offset,
    )
    expected = _reference(
        rows, codec, max_batch_bytes, max_batch_records, producer, base_offset=base_offset
    )
    assert [bytes(b) for b in result] == expected
    assert bytes(result.data) == b"".join(expected)
    assert result.num_rows == len(rows)
    assert result.next_offset == base_offset + len(rows)
    assert result.next_sequence == _sequence(producer.base_sequence, len(rows))

    records = _expected_records(rows, base_offset)
    assert _decoded_records(result) == records
    if kafka_python_has(codec):
        peers = kafka_python_read(result.data)
        assert [r for p in peers for r in p.records] == records
        assert all(p.crc_valid for p in peers)
        assert [p.base_sequence for p in peers] == [
            _sequence(producer.base_sequence, int(first)) for first in result.first_rows[:-1]
        ]


# -- the split -------------------------------------------------------------------------------------

# a 100-byte value, null key, no headers, equal timestamps: body = attributes 1 + timestampDelta 1
# + offsetDelta 1 (below 64) + key length 1 + value length 2 + 100 + header count 1 = 107, and
# 2 bytes of length varint
RECORD_BYTES = 109


def test_record_size_assumed_below() -> None:
    builder = MemoryRecordsBuilder(0)
    _append(builder, _value_row(0))
    assert builder.uncompressed_records_size == RECORD_BYTES


@pytest.mark.parametrize(
    ("max_batch_bytes", "per_batch"),
    [(3 * RECORD_BYTES, 3), (3 * RECORD_BYTES - 1, 2), (RECORD_BYTES, 1), (1, 1), (10**6, 20)],
)
def test_split_by_bytes_is_exact(max_batch_bytes: int, per_batch: int) -> None:
    rows = [_value_row(i) for i in range(20)]
    result = _encode(rows, max_batch_bytes=max_batch_bytes)
    sizes = np.diff(result.first_rows).tolist()
    assert sizes == [per_batch] * (20 // per_batch) + ([20 % per_batch] if 20 % per_batch else [])
    for batch in result:
        records_bytes = len(batch) - 61
        assert records_bytes <= max(max_batch_bytes, RECORD_BYTES)
    assert [bytes(b) for b in result] == _reference(rows, max_batch_bytes=max_batch_bytes)


def test_split_counts_the_record_as_it_is_in_the_batch() -> None:
    # The 65th record of a batch has a 2-byte offsetDelta: 110 bytes, not 109.
    rows = [_value_row(i) for i in range(70)]
    result = _encode(rows, max_batch_bytes=64 * RECORD_BYTES + 109)
    assert np.diff(result.first_rows).tolist() == [64, 6]
    result = _encode(rows, max_batch_bytes=64 * RECORD_BYTES + 110)
    assert np.diff(result.first_rows).tolist() == [65, 5]
    # A large timestamp delta makes the record larger in this batch than first in the next one.
    rows = [_value_row(0, ts=0), _value_row(1, ts=1 << 40)]
    assert _encode(rows, max_batch_bytes=2 * RECORD_BYTES).first_rows.tolist() == [0, 1, 2]
    assert [bytes(b) for b in _encode(rows, max_batch_bytes=2 * RECORD_BYTES)] == _reference(
        rows, max_batch_bytes=2 * RECORD_BYTES
    )


@pytest.mark.parametrize("max_batch_records", [1, 2, 3, 7, 20, 21])
def test_split_by_record_count_is_exact(max_batch_records: int) -> None:
    rows = [_value_row(i) for i in range(20)]
    result = _encode(rows, max_batch_records=max_batch_records)
    expected = [max_batch_records] * (20 // max_batch_records)
    if 20 % max_batch_records:
        expected.append(20 % max_batch_records)
    assert np.diff(result.first_rows).tolist() == expected
    assert [bytes(b) for b in result] == _reference(rows, max_batch_records=max_batch_records)


def test_both_limits_the_first_reached_cuts() -> None:
    rows = [_value_row(i) for i in range(10)]
    result = _encode(rows, max_batch_bytes=4 * RECORD_BYTES, max_batch_records=3)
    assert np.diff(result.first_rows).tolist() == [3, 3, 3, 1]
    result = _encode(rows, max_batch_bytes=2 * RECORD_BYTES, max_batch_records=3)
    assert np.diff(result.first_rows).tolist() == [2, 2, 2, 2, 2]


def test_a_record_larger_than_the_limit_goes_alone() -> None:
    rows = [_value_row(0), _value_row(1, size=5000), _value_row(2), _value_row(3)]
    result = _encode(rows, max_batch_bytes=1000)
    assert result.first_rows.tolist() == [0, 1, 2, 4]
    assert [bytes(b) for b in result] == _reference(rows, max_batch_bytes=1000)


def test_many_batches_grow_the_batch_table() -> None:
    # one record per batch: far more batches than the first estimate of the table
    rows = [_value_row(i, size=10) for i in range(3000)]
    result = _encode(rows, max_batch_bytes=1)
    assert len(result) == 3000
    assert result.first_rows.tolist() == list(range(3001))
    assert [bytes(b) for b in result][:3] == _reference(rows[:3], max_batch_bytes=1)


# -- offsets, sequences, producer fields, timestamps ----------------------------------------------


def test_offsets_and_sequences_continue_across_batches() -> None:
    rows = [_value_row(i) for i in range(10)]
    producer = Producer(77, 3, INT32_MAX - 7, True)
    result = _encode(
        rows,
        max_batch_records=4,
        base_offset=1000,
        producer_id=77,
        producer_epoch=3,
        base_sequence=INT32_MAX - 7,
        is_transactional=True,
    )
    batches = [RecordBatch(b) for b in result]
    assert [(b.base_offset, b.last_offset, b.records_count) for b in batches] == [
        (1000, 1003, 4),
        (1004, 1007, 4),
        (1008, 1009, 2),
    ]
    # the sequence wraps past 2^31 - 1 to 0, as Kafka's incrementSequence does
    assert [b.base_sequence for b in batches] == [INT32_MAX - 7, INT32_MAX - 3, 0]
    assert result.next_sequence == 2
    assert result.base_offset == 1000 and result.next_offset == 1010
    assert all(
        (b.producer_id, b.producer_epoch, b.is_transactional, b.partition_leader_epoch)
        == (77, 3, True, -1)
        for b in batches
    )
    assert all(b.is_valid() and not b.is_control for b in batches)
    assert [bytes(b) for b in result] == _reference(
        rows, max_batch_records=4, producer=producer, base_offset=1000
    )


def test_no_producer_keeps_minus_one() -> None:
    result = _encode([_value_row(i) for i in range(5)], max_batch_records=2)
    batches = [RecordBatch(b) for b in result]
    assert {(b.producer_id, b.producer_epoch, b.base_sequence) for b in batches} == {(-1, -1, -1)}
    assert result.next_sequence == -1


@pytest.mark.parametrize(
    "producer",
    [
        {"is_transactional": True},
        {"producer_id": 5},
        {"producer_id": 5, "producer_epoch": 0},
        {"producer_id": 5, "base_sequence": 0},
    ],
)
def test_invalid_producer_state_is_refused_like_the_builder(producer: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as expected:
        MemoryRecordsBuilder(0, **producer)
    with pytest.raises(ValueError) as actual:
        _encode([_value_row(0)], **producer)
    assert str(actual.value) == str(expected.value)


def test_timestamps_base_max_and_extremes() -> None:
    rows = [
        Row(-1, b"a", b"1"),
        Row(1 << 62, b"b", b"2"),
        Row(0, b"c", b"3"),
        Row(INT64_MAX - 1, b"d", None),
    ]
    result = _encode(rows, max_batch_records=2)
    assert [bytes(b) for b in result] == _reference(rows, max_batch_records=2)
    batches = [RecordBatch(b) for b in result]
    assert [(b.base_timestamp, b.max_timestamp) for b in batches] == [
        (-1, 1 << 62),
        (0, INT64_MAX - 1),
    ]
    assert result.max_timestamps.tolist() == [1 << 62, INT64_MAX - 1]
    assert [r.timestamp for b in batches for r in b.records()] == [r.timestamp for r in rows]
    only_none = _encode([Row(-1, None, b"x"), Row(-1, None, b"y")])
    assert RecordBatch(only_none[0]).max_timestamp == -1


def test_attributes_hold_codec_and_create_time() -> None:
    for codec in CompressionType:
        (batch,) = _encode([_value_row(0)], compression=codec)
        view = RecordBatch(batch)
        assert (view.compression, int(view.timestamp_type), view.is_transactional) == (
            codec,
            0,
            False,
        )


def test_compression_level_is_passed_on() -> None:
    rows = [_value_row(i, size=300) for i in range(50)]
    for codec, level in [
        (CompressionType.GZIP, 1),
        (CompressionType.ZSTD, 10),
        (CompressionType.LZ4, 12),
    ]:
        result = _encode(rows, compression=codec, compression_level=level)
        builder = MemoryRecordsBuilder(0, codec, compression_level=level)
        for row in rows:
            _append(builder, row)
        assert bytes(result.data) == builder.build()


# -- inputs ----------------------------------------------------------------------------------------


def test_null_keys_values_and_headers() -> None:
    rows = [
        Row(1, None, None, None),
        Row(2, b"", b"", []),
        Row(3, b"k", None, [("h", None), ("", b"")]),
        Row(4, None, b"v", [("ключ", b"\x00\xff"), ("🔑", None)]),
    ]
    result = _encode(rows)
    assert [bytes(b) for b in result] == _reference(rows)
    records = list(RecordBatch(result[0]).records())
    assert [(r.key, r.value, r.headers) for r in records] == [
        (None, None, ()),
        (b"", b"", ()),
        (b"k", None, (("h", None), ("", b""))),
        (None, b"v", (("ключ", b"\x00\xff"), ("🔑", None))),
    ]


def test_keys_none_means_every_key_null_and_headers_optional() -> None:
    rows = [Row(5, None, b"a"), Row(6, None, None)]
    values = pa.array([b"a", None])
    result = encode_batches(None, values, np.array([5, 6]))
    assert [bytes(b) for b in result] == _reference(rows)
    for headers in (pa.nulls(2, HEADERS), pa.nulls(2)):
        all_null = encode_batches(pa.nulls(2), values, [5, 6], headers)
        assert bytes(all_null.data) == bytes(result.data)
    by_name = encode_batches(None, values, [5, 6], compression="lz4")
    assert bytes(by_name.data) == bytes(encode_batches(None, values, [5, 6], compression=3).data)
    assert RecordBatch(by_name[0]).compression == CompressionType.LZ4


@pytest.mark.parametrize(
    "convert",
    [
        lambda a: a.cast(pa.string()),
        lambda a: a.cast(pa.large_string()),
        lambda a: a.cast(pa.large_binary()),
        lambda a: pa.chunked_array([a.slice(0, 1), a.slice(1)]),
    ],
    ids=["string", "large_string", "large_binary", "chunked"],
)
def test_other_arrow_types(convert: Any) -> None:
    rows = [Row(1, b"key", b"value", [("a", b"b")]), Row(2, None, b"v2", None)]
    keys, values, timestamps, headers = _columns(rows)
    result = encode_batches(convert(keys), convert(values), timestamps, headers)
    assert [bytes(b) for b in result] == _reference(rows)


def test_header_variants() -> None:
    rows = [Row(1, b"k", b"v", [("a", b"b"), ("c", None)]), Row(2, b"k2", b"v2", [])]
    expected = _reference(rows)
    keys, values, timestamps, headers = _columns(rows)
    # the decoder's own headers type (child named "element"), binary header keys, large types,
    # struct fields in another order, a chunked column
    for converted in (
        headers.cast(HEADERS_TYPE),
        headers.cast(pa.list_(pa.struct([("key", pa.binary()), ("value", pa.binary())]))),
        headers.cast(
            pa.large_list(pa.struct([("key", pa.large_string()), ("value", pa.large_binary())]))
        ),
        headers.cast(pa.list_(pa.struct([("value", pa.binary()), ("key", pa.string())]))),
        pa.chunked_array([headers.slice(0, 1), headers.slice(1)]),
    ):
        result = encode_batches(keys, values, timestamps, converted)
        assert [bytes(b) for b in result] == expected


def test_sliced_header_struct_child() -> None:
    # a list whose struct child is itself a slice: offsets count from the child's start
    struct = pa.array(
        [{"key": "x", "value": b"0"}, {"key": "a", "value": b"1"}, {"key": "b", "value": None}],
        HEADER_STRUCT,
    ).slice(1)
    headers = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), struct)
    result = encode_batches(None, pa.array([b"v", b"w"]), [1, 2], headers)
    rows = [Row(1, None, b"v", [("a", b"1")]), Row(2, None, b"w", [("b", None)])]
    assert [bytes(b) for b in result] == _reference(rows)


def test_timestamps_as_other_integer_types() -> None:
    rows = [Row(10, None, b"a"), Row(20, None, b"b")]
    values = pa.array([b"a", b"b"])
    expected = _reference(rows)
    for ts in ([10, 20], np.array([10, 20], np.int32), pa.array([10, 20], pa.int64())):
        assert [bytes(b) for b in encode_batches(None, values, ts)] == expected


def test_empty_input_gives_no_batches() -> None:
    result = encode_batches(pa.array([], pa.binary()), pa.array([], pa.binary()), [])
    assert (len(result), bytes(result.data), result.num_rows) == (0, b"", 0)
    assert result.positions.tolist() == [0] and result.first_rows.tolist() == [0]
    assert (result.next_offset, result.next_sequence) == (0, -1)
    assert list(result) == []


def test_encoded_batches_as_a_sequence() -> None:
    rows = [_value_row(i) for i in range(5)]
    result = _encode(rows, max_batch_records=2, base_offset=40)
    assert len(result) == 3
    assert bytes(result[-1]) == bytes(result[2])
    with pytest.raises(IndexError):
        result[3]
    positions = result.positions.tolist()
    assert [len(b) for b in result] == np.diff(positions).tolist()
    assert [b.base_offset for b in iter_batches(result.data)] == [40, 42, 44]
    assert result.data.readonly and not result.positions.flags.writeable
    assert not result.first_rows.flags.writeable and not result.max_timestamps.flags.writeable


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        ({"timestamps": [1, -2]}, ValueError, "invalid negative timestamp -2 at row 1"),
        ({"timestamps": [-1, INT64_MAX]}, ValueError, "no int64 delta"),
        ({"timestamps": [1]}, ValueError, "one per row"),
        ({"timestamps": [1.5, 2.0]}, TypeError, "int64 milliseconds"),
        ({"keys": pa.array([b"a"])}, ValueError, "keys has 1 rows"),
        ({"keys": pa.array([1, 2])}, TypeError, "keys must be binary or string"),
        ({"values": [b"a", b"b"]}, TypeError, "values must be a pyarrow array"),
        ({"headers": pa.array([[1], [2]])}, TypeError, "list<struct<key, value>>"),
        ({"headers": pa.array([None])}, ValueError, "headers has 1 rows"),
        ({"max_batch_bytes": 0}, ValueError, "max_batch_bytes"),
        ({"max_batch_records": 0}, ValueError, "max_batch_records"),
        ({"base_offset": -1}, ValueError, "base offset"),
        ({"base_offset": INT64_MAX}, ValueError, "pass offset 2"),
    ],
)
def test_bad_input(change: dict[str, Any], error: type[Exception], match: str) -> None:
    args: dict[str, Any] = {
        "keys": pa.array([b"a", None]),
        "values": pa.array([b"x", b"y"]),
        "timestamps": [1, 2],
        "headers": None,
    }
    options = {k: change.pop(k) for k in list(change) if k not in args}
    args.update(change)
    with pytest.raises(error, match=match):
        encode_batches(args["keys"], args["values"], args["timestamps"], args["headers"], **options)


def test_null_header_key_or_header_is_refused() -> None:
    values = pa.array([b"x", b"y"])
    null_key = pa.array([[], [{"key": None, "value": b"v"}]], HEADERS)
    with pytest.raises(ValueError, match="null header key .* in row 1"):
        encode_batches(None, values, [1, 2], null_key)
    null_header = pa.array([[None], []], HEADERS)
    with pytest.raises(ValueError, match="in row 0"):
        encode_batches(None, values, [1, 2], null_header)


def test_large_input_round_trips() -> None:
    # enough rows for several default-size batches, with every kind of field
    n = 30_000
    rng = np.random.default_rng(3)
    sizes = rng.integers(0, 120, n)
    rows = [
        Row(
            1_700_000_000_000 + int(rng.integers(-1000, 1000)),
            None if i % 7 == 0 else f"key-{i}".encode(),
            None if i % 11 == 0 else bytes(int(sizes[i])),
            None if i % 3 else [("trace", str(i).encode()), ("n", None)],
        )
        for i in range(n)
    ]
    limit = 256 * 1024
    for codec in (CompressionType.NONE, CompressionType.ZSTD):
        result = _encode(rows, compression=codec, max_batch_bytes=limit)
        assert len(result) > 5
        assert _decoded_records(result) == _expected_records(rows, 0)
        bounds = result.first_rows.tolist()
        for b, (first, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            # each batch is the builder's for its rows, and the next row would not have fitted
            builder = _builder(0, codec, NO_PRODUCER, first)
            for row in rows[first:end]:
                _append(builder, row)
            assert bytes(result[b]) == builder.build()
            assert builder.uncompressed_records_size <= limit
            if end < n:
                probe = _builder(0, CompressionType.NONE, NO_PRODUCER, first)
                for row in rows[first : end + 1]:
                    _append(probe, row)
                assert probe.uncompressed_records_size > limit
