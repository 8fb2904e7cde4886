"""The executor's read of one planned range, without Spark: rows equal an independent reading
(kafka-python over the files) for every fetch size, sub-ranges and isolation; data vanishing
between planning and reading; corrupt data; the Arrow schema and batch sizes."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from broker_embedded.broker import Broker
from broker_embedded.errors import CorruptRecordError
from broker_embedded.record.columnar_decoder import kafka_schema
from broker_embedded.storage.log_dir_fetch_source import LogDirSource
from datasource.errors import DataLossError
from datasource.kafka_batch_reader import KafkaBatchReader
from datasource.kafka_input_partition import KafkaInputPartition
from datasource.kafka_source_options import KafkaSourceOptions
from datasource.offset_range_reader import COALESCE_ROWS, read_offset_range
from tests.datasource._logdirs import Row, expected_rows, partition_facts

PARTITIONS = [
    ("events", 0),
    ("events", 2),
    ("txn", 0),
    ("trimmed", 0),
    ("appendtime", 0),
    ("empty", 0),
]


def rows_of(batches: list[pa.RecordBatch], include_headers: bool) -> list[Row]:
    table = pa.Table.from_batches(batches, schema=kafka_schema(include_headers))
    cols = {name: table.column(name).to_pylist() for name in table.column_names}
    ts = table.column("timestamp").cast("int64").to_pylist()
    out = []
    for i in range(table.num_rows):
        h = (
            tuple((e["key"], e["value"]) for e in cols["headers"][i] or ())
            if include_headers
            else ()
        )
        out.append(
            Row(
                cols["key"][i],
                cols["value"][i],
                cols["topic"][i],
                cols["partition"][i],
                cols["offset"][i],
                ts[i],
                cols["timestampType"][i],
                h,
            )
        )
    return out


def read(log_dir: Path, topic: str, partition: int, start: int, end: int, **kw) -> list:
    return list(
        read_offset_range(
            KafkaInputPartition(LogDirSource(str(log_dir)), topic, partition, start, end, **kw)
        )
    )


@pytest.mark.parametrize(("topic", "partition"), PARTITIONS)
@pytest.mark.parametrize("fetch_bytes", [1, 700, 1 << 20])
@pytest.mark.parametrize("read_committed", [False, True])
def test_whole_partition_equals_independent_reading(
    source_log_dir: Path, topic: str, partition: int, fetch_bytes: int, read_committed: bool
) -> None:
    facts = partition_facts(source_log_dir, topic, partition)
    end = facts.last_stable if read_committed else facts.high_watermark
    batches = read(
        source_log_dir,
        topic,
        partition,
        facts.log_start,
        end,
        read_committed=read_committed,
        include_headers=True,
        fetch_bytes=fetch_bytes,
    )
    assert all(b.schema.equals(kafka_schema(True)) and b.num_rows for b in batches)
    assert rows_of(batches, True) == expected_rows(
        facts, read_committed=read_committed, include_headers=True
    )


def test_sub_ranges_start_and_end_inside_batches(source_log_dir: Path) -> None:
    facts = partition_facts(source_log_dir, "events", 1)
    for start, end in [(0, 1), (5, 6), (13, 333), (333, 334), (400, facts.high_watermark)]:
        got = rows_of(read(source_log_dir, "events", 1, start, end, fetch_bytes=500), False)
        assert got == expected_rows(facts, start, end), (start, end)
    assert read(source_log_dir, "events", 1, 7, 7) == []


def test_read_committed_from_inside_an_aborted_transaction(source_log_dir: Path) -> None:
    facts = partition_facts(source_log_dir, "txn", 0)
    assert facts.aborted
    inside = min(facts.aborted) + 1
    for fetch_bytes in (1, 1 << 20):
        got = read(
            source_log_dir,
            "txn",
            0,
            inside,
            facts.last_stable,
            read_committed=True,
            fetch_bytes=fetch_bytes,
        )
        assert rows_of(got, False) == expected_rows(facts, inside, read_committed=True)
        assert not {r.offset for r in rows_of(got, False)} & facts.aborted
    uncommitted = rows_of(read(source_log_dir, "txn", 0, inside, facts.high_watermark), False)
    assert {r.offset for r in uncommitted} & facts.aborted  # read_uncommitted shows them


def test_small_fetches_are_coalesced(source_log_dir: Path) -> None:
    facts = partition_facts(source_log_dir, "events", 0)
    batches = read(source_log_dir, "events", 0, 0, facts.high_watermark, fetch_bytes=1)
    assert len(batches) == 1 and batches[0].num_rows == len(facts.rows) < COALESCE_ROWS


def test_placeholder_partition_reads_nothing(source_log_dir: Path) -> None:
    from pyspark.sql.datasource import InputPartition

    opts = KafkaSourceOptions.parse({"path": str(source_log_dir), "subscribe": "events"})
    assert list(KafkaBatchReader(opts).read(InputPartition(None))) == []


@pytest.fixture
def log_dir_copy(source_log_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(source_log_dir, tmp_path / "copy"))


def test_records_deleted_after_planning(log_dir_copy: Path, caplog) -> None:
    # planned [0, 300) of "trimmed", then DeleteRecords moves the log start to 230
    with Broker(log_dir_copy, create=True) as broker:
        assert broker.delete_records("trimmed", 0, 230) == 230
    facts = partition_facts(log_dir_copy, "trimmed", 0)
    with pytest.raises(
        DataLossError,
        match=r"trimmed-0: offsets \[100, 230\) of the planned "
        r"range \[100, 300\) were deleted",
    ):
        read(log_dir_copy, "trimmed", 0, 100, 300)
    with caplog.at_level(logging.WARNING, logger="datasource.offset_range_reader"):
        got = read(log_dir_copy, "trimmed", 0, 100, 300, fail_on_data_loss=False, fetch_bytes=1)
    assert rows_of(got, False) == expected_rows(facts, 230, 300)
    assert "reading on from offset 230" in caplog.text


def test_high_watermark_moved_back_below_the_plan(log_dir_copy: Path, caplog) -> None:
    checkpoint = log_dir_copy / "replication-offset-checkpoint"
    lines = checkpoint.read_text().splitlines()
    lines = [("trimmed 0 250" if line.startswith("trimmed 0 ") else line) for line in lines]
    checkpoint.write_text("\n".join(lines) + "\n")
    facts = partition_facts(log_dir_copy, "trimmed", 0)
    assert facts.high_watermark == 250
    with pytest.raises(DataLossError, match=r"offsets \[250, 300\) .* high watermark is now 250"):
        read(log_dir_copy, "trimmed", 0, 200, 300)
    with caplog.at_level(logging.WARNING, logger="datasource.offset_range_reader"):
        got = read(log_dir_copy, "trimmed", 0, 200, 300, fail_on_data_loss=False)
    assert rows_of(got, False) == expected_rows(facts, 200, 250)
    assert "ends at offset 250" in caplog.text


def test_corrupt_batch_is_an_error_naming_the_file(log_dir_copy: Path) -> None:
    segment = sorted((log_dir_copy / "appendtime-0").glob("*.log"))[0]
    data = bytearray(segment.read_bytes())
    data[-5] ^= 0xFF  # inside the last batch's records: its CRC no longer matches
    segment.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match=r"appendtime-0.*CRC mismatch"):
        read(log_dir_copy, "appendtime", 0, 0, 50)
