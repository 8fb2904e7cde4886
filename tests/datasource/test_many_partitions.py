"""Many small partitions: packed into few Spark tasks (range_packing.py), each task opening its
partitions with the checkpoint entries its planner read (log_dir_fetch_source.py).

The log dir (built once, with the embedded broker): :data:`SMALL_TOPICS` topics of
:data:`SMALL_PARTITIONS` partitions holding :data:`SMALL_RECORDS` records each, and one topic
``big`` of one partition of :data:`BIG_RECORDS` 1 KiB records, which ``maxBytesPerPartition``
cuts. Read in place, over the wire (a server over a copy of it) and from an S3 server (a copy
uploaded to the session's ``s3``).
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_embedded.broker import Broker
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.storage.log_dir_upload import upload_log_dir
from broker_embedded.storage.object_store import StoreLocation
from datasource.errors import DataLossError, InvalidOptionError
from datasource.kafka_batch_reader import KafkaBatchReader
from datasource.kafka_input_partition import KafkaInputPartition, PackedInputPartition, ranges_of
from datasource.kafka_source_options import KafkaSourceOptions
from datasource.offset_range import OffsetRange
from datasource.range_packing import ESTIMATED_BYTES_PER_OFFSET, RangePacker
from tests.datasource.conftest import ReadSource

SMALL_TOPICS = 3
SMALL_PARTITIONS = 30
SMALL_RECORDS = 10
BIG_RECORDS = 3000
NO_RETENTION = {"retention.ms": -1, "retention.bytes": -1}
# 4 small ranges per task: 3 * (300k + b) + b <= 1 MiB < 4 * (300k + b) + b for b < 37 KiB
PACK = {"packBytesPerPartition": "1m", "packOpenCostInBytes": "300k"}
SMALL_PER_TASK = 4


@pytest.fixture(scope="module")
def many_log_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("many") / "logdir"
    with Broker(path, create=True) as broker:
        for t in range(SMALL_TOPICS):
            topic = f"small{t}"
            broker.create_topic(topic, SMALL_PARTITIONS, config=NO_RETENTION)
            for p in range(SMALL_PARTITIONS):
                broker.produce(
                    topic,
                    p,
                    [
                        ProducerRecord(f"v{t}-{p}-{i}".encode(), key=f"k{i}".encode())
                        for i in range(SMALL_RECORDS)
                    ],
                    acks=1,
                )
        broker.create_topic("big", 1, config=NO_RETENTION)
        for lo in range(0, BIG_RECORDS, 100):
            broker.produce(
                "big",
                0,
                [ProducerRecord(bytes([i % 251]) * 1024) for i in range(lo, lo + 100)],
                acks=1,
            )
    return path


@pytest.fixture(scope="module")
def many_sources(many_log_dir: Path, tmp_path_factory, s3) -> Iterator[dict[str, ReadSource]]:
    from tests.broker_embedded.server._serve import served

    copy = Path(shutil.copytree(many_log_dir, tmp_path_factory.mktemp("served") / "logdir"))
    location = StoreLocation(f"s3://{s3.new_bucket('many')}/logdir", s3.settings)
    upload_log_dir(many_log_dir, location.open())
    stored = (("path", location.uri), *s3.options().items())
    with served(copy) as running:
        yield {
            "logdir": ReadSource("logdir", many_log_dir),
            "wire": ReadSource("wire", copy, running.bootstrap),
            "s3": ReadSource("s3", many_log_dir, store=stored),
        }


def _rows(df) -> list[tuple]:
    return sorted(
        tuple(r) for r in df.select("topic", "partition", "offset", "key", "value").collect()
    )


@pytest.mark.parametrize("transport", ["logdir", "wire", "s3"])
def test_packed_read_gives_the_unpacked_rows(spark, many_sources, transport: str) -> None:
    source = many_sources[transport]
    common = {"subscribePattern": "small.*|big", "maxBytesPerPartition": "256k"}
    unpacked = source.load(spark, packBytesPerPartition="0", **common)
    packed = source.load(spark, **common)
    want = _rows(unpacked)
    assert len(want) == SMALL_TOPICS * SMALL_PARTITIONS * SMALL_RECORDS + BIG_RECORDS
    assert _rows(packed) == want
    small = SMALL_TOPICS * SMALL_PARTITIONS
    if transport != "wire":  # the big partition cut by bytes, into about 3 MiB / 256 KiB
        assert unpacked.rdd.getNumPartitions() >= small + 10
    else:  # over the wire bytes are unknown: not cut
        assert unpacked.rdd.getNumPartitions() == small + 1
    assert packed.rdd.getNumPartitions() < unpacked.rdd.getNumPartitions() // 10


@pytest.mark.parametrize("transport", ["logdir", "wire", "s3"])
def test_tasks_as_packed(spark, many_sources, transport: str) -> None:
    """Small ranges cost their bytes (over the wire 1 KiB an offset) plus the open cost:
    SMALL_PER_TASK to a task."""
    df = many_sources[transport].load(spark, subscribePattern="small.*", **PACK)
    small = SMALL_TOPICS * SMALL_PARTITIONS
    assert df.rdd.getNumPartitions() == math.ceil(small / SMALL_PER_TASK)
    assert df.count() == small * SMALL_RECORDS


def _reader(log_dir: Path, **options: str) -> KafkaBatchReader:
    return KafkaBatchReader(KafkaSourceOptions.parse({"path": str(log_dir), **options}))


def test_tasks_carry_their_partitions_checkpoint_entries(many_log_dir: Path) -> None:
    tasks = _reader(many_log_dir, subscribePattern="small.*", **PACK).partitions()
    assert all(isinstance(t, PackedInputPartition) for t in tasks[:-1])
    for task in tasks:
        parts = ranges_of(task)
        planned = dict(parts[0].source.planned)  # type: ignore[attr-defined]
        assert sorted(planned) == sorted({p.offset_range.topic_partition for p in parts})
        assert all(c.high_watermark == SMALL_RECORDS for c in planned.values())
        assert all(p.source is parts[0].source for p in parts)  # one descriptor per task


def test_min_partitions_and_max_records_keep_their_meaning(many_log_dir: Path) -> None:
    small = SMALL_TOPICS * SMALL_PARTITIONS
    tasks = _reader(many_log_dir, subscribePattern="small.*", minPartitions="60").partitions()
    assert len(tasks) >= 60
    tasks = _reader(
        many_log_dir, subscribePattern="small.*", maxRecordsPerPartition=str(2 * SMALL_RECORDS)
    ).partitions()
    assert len(tasks) == small // 2
    assert all(sum(p.end - p.start for p in ranges_of(t)) == 2 * SMALL_RECORDS for t in tasks)


def test_latest_view_packs_whole_partitions(spark, many_sources) -> None:
    """One topic's partitions (packing is per partition, not per topic; the unpacked reference
    read costs a Spark task per partition)."""
    source = many_sources["logdir"]
    packed = source.load(spark, subscribe="small0", view="latest", **PACK)
    unpacked = source.load(spark, subscribe="small0", view="latest", packBytesPerPartition="0")
    assert packed.rdd.getNumPartitions() == math.ceil(SMALL_PARTITIONS / SMALL_PER_TASK)
    assert unpacked.rdd.getNumPartitions() == SMALL_PARTITIONS
    rows = _rows(packed)
    assert rows == _rows(unpacked)
    assert len(rows) == SMALL_PARTITIONS * SMALL_RECORDS  # ten distinct keys per partition


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("packBytesPerPartition", "-1", "expected a byte size"),
        ("packBytesPerPartition", "lots", "expected a byte size"),
        ("packOpenCostInBytes", "4 parsecs", "expected a byte size"),
    ],
)
def test_invalid_packing_options_name_the_option(option: str, value: str, message: str) -> None:
    with pytest.raises(
        InvalidOptionError, match=f"option {option}={value!r} is invalid: {message}"
    ):
        KafkaSourceOptions.parse({"path": "/x", "subscribe": "t", option: value})


def test_data_loss_inside_a_packed_task_names_the_partition(many_log_dir: Path, tmp_path) -> None:
    copy = Path(shutil.copytree(many_log_dir, tmp_path / "logdir"))
    reader = _reader(copy, subscribePattern="small.*", **PACK)
    task = reader.partitions()[3]
    assert isinstance(task, PackedInputPartition)
    victim: KafkaInputPartition = task.parts[2]
    for log in (copy / victim.offset_range.topic_partition.dir_name).glob("*.log"):
        log.write_bytes(b"")  # truncated after planning
    with pytest.raises(
        DataLossError,
        match=rf"{victim.topic}-{victim.partition}: offsets "
        rf"\[0, {SMALL_RECORDS}\) of the planned range .* high watermark is now 0",
    ):
        list(reader.read(task))


# -- the packing rule alone ----------------------------------------------------------------------


def _r(partition: int, size: int) -> OffsetRange:
    return OffsetRange("t", partition, 0, size)


def test_packer_follows_sparks_next_fit_largest_first() -> None:
    sizes = {0: 10, 1: 70, 2: 30, 3: 50, 4: 20, 5: 80}
    packer = RangePacker(max_bytes=200, open_cost=80)
    tasks = packer.pack([_r(p, 1) for p in sizes], lambda r: sizes[r.partition])
    # 80 is not small (>= the open cost): alone; then 70 + 50 (150 + 50 <= 200); 30 + 20
    # (110 + 20); 10: plan order inside a task
    assert [[r.partition for r in t] for t in tasks] == [[5], [1, 3], [2, 4], [0]]
    assert RangePacker(max_bytes=0).pack([_r(0, 1), _r(1, 1)], lambda r: 1) == [
        [_r(0, 1)],
        [_r(1, 1)],
    ]
    assert RangePacker(open_cost=0).pack([_r(0, 1), _r(1, 1)], lambda r: 1) == [
        [_r(0, 1)],
        [_r(1, 1)],
    ]


def test_packer_estimates_unknown_bytes_by_offsets() -> None:
    e = ESTIMATED_BYTES_PER_OFFSET
    packer = RangePacker(max_bytes=12 * e, open_cost=4 * e)
    tasks = packer.pack([_r(p, 2) for p in range(4)], lambda r: None)
    assert [len(t) for t in tasks] == [2, 2]


def test_packer_keeps_min_partitions_and_max_records() -> None:
    ranges = [_r(p, 10) for p in range(8)]
    assert len(RangePacker(100, 11, min_partitions=4).pack(ranges, lambda r: 10)) == 4
    assert len(RangePacker(100, 50, min_partitions=8).pack(ranges, lambda r: 10)) == 8
    assert len(RangePacker(1000, 11, max_records=30).pack(ranges, lambda r: 10)) == 3
