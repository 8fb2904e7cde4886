"""The columnar decoder against ground truth: Kafka's Java library (kafka-java-ref), real Kafka
log dirs, and independent decoders (kafka-python, aiokafka) on generated data; plus range
filtering, transactions, legacy entries, partial tails, corrupt input and output chunking."""

from __future__ import annotations

import mmap
import struct
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import cramjam
import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder as AioLegacyBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from broker_embedded.errors import CorruptRecordError, TornTailError
from broker_embedded.record import columnar_decoder, crc_check, decode_kernel, kernel_primitives
from broker_embedded.record.batch_layout import (
    ATTRIBUTES_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    CRC_OFFSET,
    RECORD_BATCH_OVERHEAD,
)
from broker_embedded.record.columnar_decoder import decode, decode_records, kafka_schema
from broker_embedded.record.compression import CompressionType
from broker_embedded.record.control_record import EndTransactionMarker
from broker_embedded.record.decode_kernel import MAX_TIMESTAMP_MS
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import (
    LOG_APPEND_TIME,
    Record,
    crc32c_of,
    set_base_offset,
    set_max_timestamp,
)
from broker_embedded.record.varint import INT64_MAX, encode_varint, encode_varlong

from ._java_ref import BATCHES_BY_NAME, JAVA_REF, LOG_DIRS, MANIFEST_BATCHES
from ._peers import (
    aiokafka_read,
    aiokafka_read_records,
    kafka_python_read,
    kafka_python_read_records,
)

TOPIC = "orders"
PARTITION = 3
Row = tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]


# -- helpers ---------------------------------------------------------------------------------------


def _decode(data: Any, **options: Any) -> list[pa.RecordBatch]:
    options.setdefault("include_headers", True)
    return decode_records(data, topic=TOPIC, partition=PARTITION, **options)


def _records(batches: Iterable[pa.RecordBatch], include_headers: bool = True) -> list[Record]:
    """The rows as Records (timestamps back in ms), after checking every batch's structure."""
    out = []
    for batch in batches:
        assert batch.schema.equals(kafka_schema(include_headers))
        batch.validate(full=True)
        n = batch.num_rows
        assert batch.column("topic").to_pylist() == [TOPIC] * n
        assert batch.column("partition").to_pylist() == [PARTITION] * n
        micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
        assert all(us % 1000 == 0 for us in micros)
        headers = batch.column("headers").to_pylist() if include_headers else [[]] * n
        for offset, us, key, value, hs in zip(
            batch.column("offset").to_pylist(),
            micros,
            batch.column("key").to_pylist(),
            batch.column("value").to_pylist(),
            headers,
            strict=True,
        ):
            pairs = tuple((h["key"], h["value"]) for h in hs or ())
            out.append(Record(offset, us // 1000, key, value, pairs))
    return out


def _timestamp_types(batches: Iterable[pa.RecordBatch]) -> list[int]:
    return [t for b in batches for t in b.column("timestampType").to_pylist()]


def _batch(
    base_offset: int,
    rows: Sequence[Row],
    codec: CompressionType = CompressionType.NONE,
    **options: Any,
) -> bytes:
    """Our builder; rows are (timestamp, key, value, headers) at consecutive offsets."""
    builder = MemoryRecordsBuilder(base_offset, codec, **options)
    for ts, key, value, headers in rows:
        builder.append(None, ts, key, value, headers)
    return builder.build()


def _simple_rows(n: int, start: int = 0) -> list[Row]:
    return [
        (1_700_000_000_000 + i, f"k{i}".encode(), f"value-{i}".encode() * 3, [])
        for i in range(start, start + n)
    ]


def _fix_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c_of(bytes(batch[21:])))
    return bytes(batch)


def _rewrite(batch: bytes, fmt: str, at: int, value: int) -> bytes:
    """A batch with one header field changed and its CRC made valid again."""
    out = bytearray(batch)
    struct.pack_into(fmt, out, at, value)
    return _fix_crc(out)


def _with_section(batch: bytes, section: bytes, count: int, last_delta: int) -> bytes:
    """A batch whose records section is replaced (length, count, delta and CRC made to fit)."""
    out = bytearray(batch[:RECORD_BATCH_OVERHEAD] + section)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">i", out, 23, last_delta)
    struct.pack_into(">i", out, 57, count)
    return _fix_crc(out)


def _record_bytes(
    offset_delta: int,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: bytes = b"\x00",
    extra: bytes = b"",
) -> bytes:
    """A hand-made v2 record; ``headers`` is the raw header count and headers."""
    body = b"\x00" + encode_varlong(0) + encode_varint(offset_delta)
    for field in (key, value):
        body += encode_varint(-1) if field is None else encode_varint(len(field)) + field
    body += headers + extra
    return encode_varint(len(body)) + body


# -- schema ----------------------------------------------------------------------------------------


def test_schema_is_sparks_kafka_schema() -> None:
    header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    assert kafka_schema(False).equals(pa.schema(fields))
    with_headers = pa.schema([*fields, pa.field("headers", pa.list_(pa.field("element", header)))])
    assert kafka_schema(True).equals(with_headers)
    assert kafka_schema(True).field("headers").type.value_field.name == "element"
    assert all(f.nullable for f in kafka_schema(True))
    assert all(f.nullable for f in header)
    assert kafka_schema(True).field("headers").type.value_field.nullable


def test_schema_equals_what_spark_converts_its_kafka_schema_to() -> None:
    spark_types = pytest.importorskip("pyspark.sql.types")
    to_arrow_schema = pytest.importorskip("pyspark.sql.pandas.types").to_arrow_schema
    t = spark_types
    headers = t.ArrayType(
        t.StructType([t.StructField("key", t.StringType()), t.StructField("value", t.BinaryType())])
    )
    fields = [
        t.StructField("key", t.BinaryType()),
        t.StructField("value", t.BinaryType()),
        t.StructField("topic", t.StringType()),
        t.StructField("partition", t.IntegerType()),
        t.StructField("offset", t.LongType()),
        t.StructField("timestamp", t.TimestampType()),
        t.StructField("timestampType", t.IntegerType()),
    ]
    spark = to_arrow_schema(t.StructType(fields), timezone="UTC")
    assert kafka_schema(False).equals(spark)
    spark = to_arrow_schema(
        t.StructType([*fields, t.StructField("headers", headers)]), timezone="UTC"
    )
    assert kafka_schema(True).equals(spark)


# -- Kafka's Java library --------------------------------------------------------------------------


@pytest.mark.parametrize("batch", MANIFEST_BATCHES, ids=lambda b: b.name)
def test_java_reference_batches(batch: Any) -> None:
    batches = _decode(batch.data(), source=batch.name)
    if batch.is_control:
        assert batches == []
        return
    assert _records(batches) == list(batch.records)
    assert _timestamp_types(batches) == [batch.timestamp_type] * batch.count


def test_java_reference_log_append_time_uses_max_timestamp() -> None:
    batch = BATCHES_BY_NAME["batch_logappendtime_none"]
    decoded = _records(_decode(batch.data()))
    assert {r.timestamp for r in decoded} == {batch.max_timestamp} == {1_700_000_009_999}


def test_java_reference_file_records() -> None:
    data = (JAVA_REF / "filerecords_00000000000000000000.log").read_bytes()
    result = decode(data, topic=TOPIC, partition=PARTITION, include_headers=True)
    template = BATCHES_BY_NAME["batch_none"].records
    expected = [
        Record(r.offset + 4 * i, r.timestamp, r.key, r.value, r.headers)
        for i in range(3)
        for r in template
    ]
    assert _records(result.batches) == expected
    assert (result.num_rows, result.next_offset, result.end_position) == (12, 12, len(data))


def test_control_batch_gives_no_rows() -> None:
    data = BATCHES_BY_NAME["batch_txn_none"].data() + BATCHES_BY_NAME["batch_control_commit"].data()
    result = decode(data, topic=TOPIC, partition=PARTITION)
    assert [r.offset for r in _records(result.batches, False)] == [100, 101, 102, 103]
    assert result.next_offset == 105  # past the marker


# -- transactions ----------------------------------------------------------------------------------


def _txn(base: int, producer: int, n: int) -> bytes:
    rows = _simple_rows(n, base)
    return _batch(
        base, rows, producer_id=producer, producer_epoch=0, base_sequence=0, is_transactional=True
    )


def _marker(offset: int, producer: int, commit: bool) -> bytes:
    marker = EndTransactionMarker.commit(5) if commit else EndTransactionMarker.abort(5)
    return marker.build_batch(
        base_offset=offset, timestamp=1_700_000_000_000, producer_id=producer, producer_epoch=0
    )


# producer 7: txn [0, 3) aborted at 5; producer 8: txn [3, 5) committed at 6;
# producer 7 again: txn [7, 9) committed at 9; a non-transactional batch [10, 12)
TXN_LOG = b"".join(
    [
        _txn(0, 7, 3),
        _txn(3, 8, 2),
        _marker(5, 7, commit=False),
        _marker(6, 8, commit=True),
        _txn(7, 7, 2),
        _marker(9, 7, commit=True),
        _batch(10, _simple_rows(2, 10)),
    ]
)


@pytest.mark.parametrize(
    ("aborted", "offsets"),
    [
        (None, [0, 1, 2, 3, 4, 7, 8, 10, 11]),  # read_uncommitted: only markers skipped
        ([], [0, 1, 2, 3, 4, 7, 8, 10, 11]),
        ([(7, 0)], [3, 4, 7, 8, 10, 11]),
        ([(8, 3)], [0, 1, 2, 7, 8, 10, 11]),
        ([(7, 0), (8, 3)], [7, 8, 10, 11]),
        ([(7, 7)], [0, 1, 2, 3, 4, 10, 11]),  # no ABORT marker follows: stays aborted
        ([(9, 0)], [0, 1, 2, 3, 4, 7, 8, 10, 11]),  # another producer
    ],
)
def test_aborted_transactions(aborted: list[tuple[int, int]] | None, offsets: list[int]) -> None:
    batches = _decode(TXN_LOG, aborted_transactions=aborted)
    assert [r.offset for r in _records(batches)] == offsets


def test_aborted_transactions_apply_to_batches_below_the_start_offset() -> None:
    # the ABORT marker at 5 lies below start 6: it still ends producer 7's aborted transaction
    batches = _decode(TXN_LOG, aborted_transactions=[(7, 0)], start_offset=6)
    assert [r.offset for r in _records(batches)] == [7, 8, 10, 11]


# -- offset ranges ---------------------------------------------------------------------------------

RANGE_LOG = b"".join(_batch(base, _simple_rows(10, base)) for base in (0, 10, 20))


@pytest.mark.parametrize(
    ("start", "end"),
    [(0, INT64_MAX), (5, 25), (10, 20), (12, 13), (9, 10), (12, 12), (30, 40), (0, 0), (29, 30)],
)
def test_offset_range(start: int, end: int) -> None:
    result = decode(RANGE_LOG, topic=TOPIC, partition=PARTITION, start_offset=start, end_offset=end)
    assert [r.offset for r in _records(result.batches, False)] == list(range(start, min(end, 30)))
    assert result.next_offset == max(start, 30)


def test_offsets_with_gaps_as_after_compaction() -> None:
    rows = _simple_rows(3)
    builder = MemoryRecordsBuilder(100)
    for offset, (ts, key, value, headers) in zip((100, 104, 109), rows, strict=True):
        builder.append(offset, ts, key, value, headers)
    data = builder.build()
    assert [r.offset for r in _records(_decode(data))] == [100, 104, 109]
    assert [r.offset for r in _records(_decode(data, start_offset=101, end_offset=109))] == [104]


# -- codecs ----------------------------------------------------------------------------------------

ROWS: list[Row] = [
    (1_700_000_000_000, b"key-0", b"value-0" * 20, [("h1", b"v1"), ("h2", None)]),
    (1_700_000_000_001, None, b"value-1" * 20, []),
    (1_700_000_000_005, b"key-2", None, [("trace-id", b"")]),
    (1_699_999_999_000, b"", b"", []),
    (1_700_000_000_002, b"key-4", b"\x00\xff" * 50, [("\u00e9t\u00e9", b"\x00\xff")]),
]
EXPECTED = [Record(i, ts, k, v, tuple(h)) for i, (ts, k, v, h) in enumerate(ROWS)]


def _peer_batch(cls: type, codec: CompressionType, rows: Sequence[Row] = ROWS) -> bytes:
    builder = cls(2, int(codec), False, -1, -1, -1, 1 << 22)
    for offset, (ts, key, value, headers) in enumerate(rows):
        builder.append(offset, ts, key, value, headers)
    return bytes(builder.build())


@pytest.mark.parametrize(
    "codec",
    [CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD],
    ids=lambda c: c.name.lower(),
)
def test_codecs_kafka_python_built(codec: CompressionType) -> None:
    assert _records(_decode(_peer_batch(KafkaPythonBuilder, codec))) == EXPECTED


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
def test_codecs_aiokafka_built(codec: CompressionType) -> None:
    assert _records(_decode(_peer_batch(AioBuilder, codec))) == EXPECTED


def test_snappy_raw_as_librdkafka_writes_it() -> None:
    plain = _batch(0, ROWS)
    section = bytes(cramjam.snappy.compress_raw(plain[RECORD_BATCH_OVERHEAD:]))
    raw = bytearray(plain[:RECORD_BATCH_OVERHEAD] + section)
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    struct.pack_into(">h", raw, 21, int(CompressionType.SNAPPY))
    assert _records(_decode(_fix_crc(raw))) == EXPECTED


def test_snappy_xerial_from_our_builder() -> None:
    data = _batch(0, ROWS, CompressionType.SNAPPY)
    assert _records(_decode(data)) == EXPECTED


def test_log_append_time_set_by_the_broker() -> None:
    data = bytearray(_batch(0, ROWS, CompressionType.LZ4))
    set_max_timestamp(data, LOG_APPEND_TIME, 1_800_000_000_000)
    batches = _decode(bytes(data))
    assert {r.timestamp for r in _records(batches)} == {1_800_000_000_000}
    assert _timestamp_types(batches) == [1] * len(ROWS)


def test_input_buffer_kinds(tmp_path: Path) -> None:
    data = RANGE_LOG + _batch(30, ROWS, CompressionType.GZIP)
    expected = _records(_decode(data))
    path = tmp_path / "segment.log"
    path.write_bytes(data)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert _records(_decode(mapped)) == expected
    kinds = [bytearray(data), memoryview(data), np.frombuffer(data, np.uint8).copy()]
    for kind in kinds:
        assert _records(_decode(kind)) == expected
    assert _records(_decode(np.frombuffer(b"xx" + data, np.uint8)[2:])) == expected
    # one compiled specialisation of each kernel, whatever the input kind
    assert len(decode_kernel.decode_sections.signatures) == 1
    assert len(decode_kernel.scan_entries.signatures) == 1


def test_headers_with_invalid_utf8_keys_read_as_java_does() -> None:
    header = encode_varint(1) + encode_varint(2) + b"\xff\xfe" + encode_varint(1) + b"x"
    data = _with_section(_batch(0, ROWS[:1]), _record_bytes(0, headers=header), 1, 0)
    [record] = _records(_decode(data))
    assert record.headers == (("\ufffd\ufffd", b"x"),)


def test_without_headers_column() -> None:
    batches = _decode(_batch(0, ROWS), include_headers=False)
    assert [b.schema for b in batches] == [kafka_schema(False)]
    assert _records(batches, False) == [
        Record(r.offset, r.timestamp, r.key, r.value, ()) for r in EXPECTED
    ]


def test_empty_inputs() -> None:
    assert _decode(b"") == []
    empty_batch_rows = _decode(b"", start_offset=5)
    assert empty_batch_rows == []
    result = decode(b"", topic=TOPIC, partition=PARTITION, start_offset=5)
    assert (result.num_rows, result.next_offset, result.end_position) == (0, 5, 0)


# -- independent decoders on generated data --------------------------------------------------------

_header = st.tuples(
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6),
    st.none() | st.binary(max_size=8),
)
_row = st.tuples(
    st.integers(1_600_000_000_000, 1_800_000_000_000),
    st.none() | st.binary(max_size=24),
    st.none() | st.binary(max_size=300),
    st.lists(_header, max_size=3),
)
_batch_spec = st.tuples(
    st.sampled_from(list(CompressionType)),
    st.lists(_row, min_size=1, max_size=12),
    st.integers(0, 5),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(_batch_spec, min_size=1, max_size=6), max_rows=st.integers(1, 40))
def test_equals_aiokafka_and_kafka_python(specs: list[Any], max_rows: int) -> None:
    parts = []
    base = 0
    for codec, rows, gap in specs:
        batch = bytearray(_peer_batch(AioBuilder, codec, rows))
        set_base_offset(batch, base)
        parts.append(bytes(batch))
        base += len(rows) + gap
    data = b"".join(parts)
    expected = aiokafka_read_records(data)
    batches = _decode(data, max_rows_per_batch=max_rows)
    assert all(b.num_rows <= max_rows for b in batches)
    assert _records(batches) == expected
    if not any(codec == CompressionType.SNAPPY for codec, _, _ in specs):  # no python-snappy
        assert [r for b in kafka_python_read(data) for r in b.records] == expected


# -- real Kafka log dirs ---------------------------------------------------------------------------

REAL_LOGS = sorted(p for p in LOG_DIRS.glob("*/*/*.log") if p.stat().st_size)


@pytest.mark.parametrize("path", REAL_LOGS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_real_kafka_logs_equal_kafka_python(path: Path) -> None:
    data = path.read_bytes()
    peer = kafka_python_read(data)
    expected = [r for b in peer if not b.is_control for r in b.records]
    result = decode(data, topic=TOPIC, partition=PARTITION, include_headers=True, source=str(path))
    assert _records(result.batches) == expected
    assert result.next_offset == peer[-1].last_offset + 1
    types = [b.timestamp_type for b in peer if not b.is_control for _ in b.records]
    assert _timestamp_types(result.batches) == types


# -- legacy magic 0/1 entries ----------------------------------------------------------------------


def _legacy(magic: int, codec: CompressionType, rows: Sequence[Row], base: int = 0) -> bytes:
    # kafka-python writes no snappy here (no python-snappy): aiokafka's builder does
    cls = AioLegacyBuilder if codec == CompressionType.SNAPPY else LegacyRecordBatchBuilder
    builder = cls(magic, int(codec), 1 << 22)
    for i, (ts, key, value, _) in enumerate(rows):
        builder.append(base + i, ts, key, value)
    return bytes(builder.build())


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize(
    "codec",
    [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4],
    ids=lambda c: c.name.lower(),
)
def test_legacy_entries(magic: int, codec: CompressionType) -> None:
    if codec == CompressionType.LZ4 and magic == 0:
        pytest.skip("neither peer writes magic 0 lz4 here (kafka-python needs xxhash)")
    data = _legacy(magic, codec, ROWS)
    batches = _decode(data)
    assert _records(batches) == aiokafka_read_records(data)
    assert _timestamp_types(batches) == [-1 if magic == 0 else 0] * len(ROWS)
    if magic == 0:
        assert {r.timestamp for r in _records(batches)} == {-1}


def test_legacy_then_v2_in_one_run() -> None:
    data = _legacy(1, CompressionType.GZIP, ROWS[:3]) + _legacy(0, CompressionType.NONE, ROWS, 3)
    data += _batch(8, ROWS[:2])
    batches = _decode(data, start_offset=2, max_rows_per_batch=3)
    # (aiokafka fails on a legacy entry followed by a v2 batch: kafka-python reads it)
    expected = [r for r in kafka_python_read_records(data) if r.offset >= 2]
    assert _records(batches) == expected
    assert [r.offset for r in expected] == list(range(2, 10))
    assert _timestamp_types(batches) == [0] + [-1] * 5 + [0, 0]


# -- partial tails ---------------------------------------------------------------------------------


def test_partial_tail_every_cut() -> None:
    data = (JAVA_REF / "filerecords_00000000000000000000.log").read_bytes()
    boundaries = [0, 123, 257, 392]
    for cut in range(len(data) + 1):
        complete = max(b for b in boundaries if b <= cut)
        result = decode(data[:cut], topic=TOPIC, partition=PARTITION, tail="stop")
        assert result.end_position == complete
        assert result.num_rows == 4 * boundaries.index(complete)
        if cut == complete:
            decode(data[:cut], topic=TOPIC, partition=PARTITION, tail="error")
            continue
        with pytest.raises(TornTailError) as info:
            _decode(data[:cut], tail="error", source="x.log", base_position=1000)
        assert info.value.position == 1000 + complete
        assert info.value.source == "x.log"
        assert info.value.base_offset == (
            4 * boundaries.index(complete) if cut - complete >= 17 else None
        )


# -- corrupt input ---------------------------------------------------------------------------------

GOOD = BATCHES_BY_NAME["batch_none"].data()  # offsets 0-3, 123 bytes
VICTIM = _batch(4, [(1_700_000_000_000, b"k", b"v", [])])  # base offset 4, one record
SECTION = VICTIM[RECORD_BATCH_OVERHEAD:]


def _raw_record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


def _two(section: bytes, count: int = 1, last_delta: int = 0) -> bytes:
    return _with_section(VICTIM, section, count, last_delta)


CORRUPT: dict[str, tuple[bytes, str]] = {
    "crc": (bytes(VICTIM[:-1]) + bytes([VICTIM[-1] ^ 1]), "CRC mismatch"),
    "over-long varint": (_two(b"\xff" * 6 + b"\x01" + SECTION[1:]), "over-long varint"),
    "truncated record": (_two(SECTION[:-2]), "record length"),
    "record past the batch": (_two(encode_varint(100) + SECTION[1:]), "record length 100"),
    "impossible key length": (
        _two(_raw_record(b"\x00\x00\x00" + encode_varint(1 << 30) + b"kv\x00")),
        "length 1073741824 runs past the record",
    ),
    "negative length": (
        _two(_raw_record(b"\x00\x00\x00" + encode_varint(-2) + b"\x00\x00")),
        "negative length -2",
    ),
    "too few records": (
        _two(SECTION, count=2, last_delta=1),
        "declares 2 records but holds only 1",
    ),
    "too many records": (_two(SECTION + _record_bytes(1), count=1, last_delta=1), "left over"),
    "offset delta": (_two(SECTION + _record_bytes(3), count=2, last_delta=1), "offset delta 3"),
    "null header key": (
        _two(_record_bytes(0, headers=encode_varint(1) + encode_varint(-1) + encode_varint(-1))),
        "null header key",
    ),
    "header count": (_two(_record_bytes(0, headers=encode_varint(100))), "header count 100"),
    "stray bytes": (_two(_record_bytes(0, extra=b"\x00\x00")), "2 stray bytes"),
    "unknown codec": (_rewrite(VICTIM, ">h", 21, 5), "codec id 5"),
    "unknown magic": (_rewrite(VICTIM, ">b", 16, 3), "unknown magic 3"),
    "entry too short": (_rewrite(VICTIM, ">i", 8, 30), "below the minimum"),
    "negative count": (_rewrite(VICTIM, ">i", 57, -1), "negative record count"),
    "garbage gzip": (
        _with_section(_rewrite(VICTIM, ">h", 21, 1), b"\x1f\x8b\x08garbage", 1, 0),
        "gzip",
    ),
    "legacy crc": (_legacy(1, CompressionType.NONE, ROWS[:1], 4)[:-1] + b"!", "CRC mismatch"),
}


@pytest.mark.parametrize("case", list(CORRUPT))
def test_corrupt_input_names_source_position_and_base_offset(case: str) -> None:
    victim, reason = CORRUPT[case]
    with pytest.raises(CorruptRecordError) as info:
        _decode(GOOD + victim, source="seg.log", base_position=1000)
    error = info.value
    assert not isinstance(error, TornTailError)
    assert (error.source, error.position, error.base_offset) == ("seg.log", 1123, 4)
    message = str(error)
    assert "seg.log" in message and "at byte 1123" in message and "base offset 4" in message
    assert reason in message


def test_corrupt_crc_passes_without_verification() -> None:
    victim = bytearray(VICTIM)
    victim[-2] ^= 1  # the value's byte: still a well-formed record
    assert len(_decode(GOOD + bytes(victim), verify_crc=False)) == 1


def test_corrupt_crc_found_on_the_helper_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crc_check, "PARALLEL_CRC_BYTES", 0)
    bad = bytearray(RANGE_LOG)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as info:
        _decode(bytes(bad))
    assert info.value.base_offset == 20
    assert len(_records(_decode(RANGE_LOG))) == 30


_MUTATIONS = st.lists(
    st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4
)
FUZZ_BASE = (
    GOOD
    + _batch(4, ROWS, CompressionType.GZIP)
    + _batch(9, ROWS)
    + _legacy(1, CompressionType.NONE, ROWS[:2], 14)
)


@settings(max_examples=300, deadline=None)
@given(mutations=_MUTATIONS, cut=st.integers(0, len(FUZZ_BASE)), verify=st.booleans())
def test_fuzzed_input_raises_only_corrupt_record_errors(
    mutations: list[tuple[int, int]], cut: int, verify: bool
) -> None:
    data = bytearray(FUZZ_BASE[:cut])
    for at, value in mutations:
        if data:
            data[at % len(data)] = value
    try:
        batches = _decode(bytes(data), verify_crc=verify, tail="error")
    except CorruptRecordError as e:
        assert e.source == "<buffer>" and e.position is not None
    else:
        _records(batches)


def _forge_base_timestamp(batch: bytes, ts: int) -> bytes:
    """The batch with its base timestamp replaced and its CRC recomputed (a valid batch)."""
    out = bytearray(batch)
    struct.pack_into(">q", out, BASE_TIMESTAMP_OFFSET, ts)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)


@pytest.mark.parametrize("ts", [MAX_TIMESTAMP_MS + 1, -MAX_TIMESTAMP_MS - 1, INT64_MAX])
def test_timestamp_beyond_spark_microseconds_is_an_error_not_a_wrapped_value(ts: int) -> None:
    # a valid batch (CRC and all) may carry any int64 timestamp; ms * 1000 would wrap around
    first = _batch(0, _simple_rows(3))
    data = first + _forge_base_timestamp(_batch(3, [(0, b"k", b"v", [])]), ts)
    with pytest.raises(CorruptRecordError) as e:
        _decode(data)
    assert e.value.base_offset == 3 and e.value.position == len(first)
    assert f"timestamp {ts} ms is out of Spark's range" in str(e.value)


def test_timestamp_at_spark_limit_decodes() -> None:
    (batch,) = _decode(_batch(0, [(MAX_TIMESTAMP_MS, b"k", b"v", [])]))
    assert batch.column("timestamp").cast(pa.int64()).to_pylist() == [MAX_TIMESTAMP_MS * 1000]


# -- output chunking -------------------------------------------------------------------------------


def test_large_run_split_into_record_batches() -> None:
    data = b"".join(_batch(base, _simple_rows(250, base)) for base in range(0, 10_000, 250))
    batches = _decode(data, max_rows_per_batch=3000, include_headers=False)
    assert [b.num_rows for b in batches] == [3000, 3000, 3000, 1000]
    assert [r.offset for r in _records(batches, False)] == list(range(10_000))
    default = _decode(data, include_headers=False)
    assert [b.num_rows for b in default] == [10_000]


def test_chunks_cut_before_a_column_passes_the_byte_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columnar_decoder, "MAX_CHUNK_BYTES", 2_000)
    rows = [
        (1_700_000_000_000 + i, b"k" * (i % 50), b"v" * (i * 7 % 300), [("h", b"x" * (i % 9))])
        for i in range(400)
    ]
    data = b"".join(_batch(b, rows[b : b + 40]) for b in range(0, 400, 40))
    batches = _decode(data, max_rows_per_batch=100)
    assert len(batches) > 4
    for batch in batches:
        assert batch.num_rows <= 100
        header_values = batch.column("headers").values.field("value")
        for column in (batch.column("key"), batch.column("value"), header_values):
            assert pc.sum(pc.binary_length(column)).as_py() <= 2_000
    expected = [Record(i, ts, k, v, tuple(h)) for i, (ts, k, v, h) in enumerate(rows)]
    assert _records(batches) == expected


# -- numba -----------------------------------------------------------------------------------------


def test_kernels_compile_without_a_writable_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    real_njit = kernel_primitives.numba.njit

    def njit(*args: Any, **options: Any) -> Any:
        if options.get("cache"):
            raise RuntimeError("cannot cache function: no locator available")
        return real_njit(*args, **options)

    monkeypatch.setattr(kernel_primitives.numba, "njit", njit)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        add_one = kernel_primitives.jit(lambda x: x + 1)
    assert add_one(1) == 2
    assert any("numba cache unavailable" in str(w.message) for w in caught)


def test_warm_up_is_fast_once_compiled() -> None:
    columnar_decoder.warm_up()
    assert columnar_decoder.warm_up() < 0.5


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="tail"):
        _decode(GOOD, tail="drop")
    with pytest.raises(ValueError, match="max_rows_per_batch"):
        _decode(GOOD, max_rows_per_batch=0)
    with pytest.raises(TypeError):
        _decode(np.zeros((2, 2), np.uint8))
    assert aiokafka_read(GOOD)[0].crc_valid
