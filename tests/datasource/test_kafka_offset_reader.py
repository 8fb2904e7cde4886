"""Driver-side planning over a real log dir written by the embedded broker: subscriptions,
bounds, offsets by timestamp, data loss and byte cuts, checked against an independent reading of
the same files (kafka-python, checkpoint files parsed in the test)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from broker_embedded.errors import UnknownTopicOrPartitionError
from broker_embedded.storage.topic_partition import TopicPartition
from datasource.errors import DataLossError, InvalidOptionError
from datasource.kafka_offset_reader import KafkaOffsetReader
from datasource.offset_range import OffsetRange
from datasource.offset_spec import (
    EarliestOffsets,
    GlobalTimestamp,
    LatestOffsets,
    SpecificOffsets,
    SpecificTimestamps,
)
from datasource.subscription import Assign, Subscribe, SubscribePattern
from tests.datasource._logdirs import (
    EVENTS_PARTITIONS,
    T0,
    TRIMMED_LOG_START,
    batch_bounds,
    first_offset_at,
    partition_facts,
)

EVENTS = [TopicPartition("events", p) for p in range(EVENTS_PARTITIONS)]
TXN, TRIMMED = TopicPartition("txn", 0), TopicPartition("trimmed", 0)


@pytest.fixture(scope="module")
def uncommitted(source_log_dir: Path):
    with KafkaOffsetReader(source_log_dir, "read_uncommitted") as reader:
        yield reader


@pytest.fixture(scope="module")
def committed(source_log_dir: Path):
    with KafkaOffsetReader(source_log_dir, "read_committed") as reader:
        yield reader


def test_topics_and_subscriptions(uncommitted: KafkaOffsetReader, source_log_dir: Path) -> None:
    assert uncommitted.location == f"log dir {source_log_dir.resolve()}"
    assert uncommitted.topics() == {
        "appendtime": (0,),
        "empty": (0,),
        "events": (0, 1, 2),
        "trimmed": (0,),
        "txn": (0,),
    }
    assert uncommitted.partitions(Subscribe(("txn", "events"))) == [*EVENTS, TXN]
    assert uncommitted.partitions(Assign.parse('{"events":[2,0]}')) == [EVENTS[0], EVENTS[2]]
    assert uncommitted.partitions(SubscribePattern("^e.*")) == [TopicPartition("empty", 0), *EVENTS]
    assert uncommitted.partitions(SubscribePattern("m")) == [  # found anywhere, as Spark finds
        TopicPartition("appendtime", 0),
        TopicPartition("empty", 0),
        TopicPartition("trimmed", 0),
    ]
    assert uncommitted.partitions(SubscribePattern("nothing.*")) == []


def test_unknown_topics_are_named_and_missing_partitions_left_out(
    uncommitted: KafkaOffsetReader, caplog: pytest.LogCaptureFixture
) -> None:
    """Spark's Admin path: the topic's partitions filtered by the assignment."""
    with caplog.at_level("WARNING"):
        assert uncommitted.partitions(Assign.parse('{"events":[0,7]}')) == [EVENTS[0]]
    assert [r.getMessage() for r in caplog.records] == [
        'assign={"events":[0,7]}: events-7 not in ' + uncommitted.location + ", left out (as "
        "Spark's Kafka source leaves them out); topic events has the partitions [0, 1, 2]"
    ]
    with pytest.raises(UnknownTopicOrPartitionError, match="topic nope .*the topics here are"):
        uncommitted.partitions(Assign.parse('{"events":[0],"nope":[0]}'))
    with pytest.raises(UnknownTopicOrPartitionError, match="topic nope .*the topics here are"):
        uncommitted.partitions(Subscribe(("events", "nope")))


def test_partition_listed_in_topic_config_without_directory(
    source_log_dir: Path, tmp_path: Path
) -> None:
    copy = Path(shutil.copytree(source_log_dir, tmp_path / "copy"))
    shutil.rmtree(copy / "events-2")
    with KafkaOffsetReader(copy, "read_uncommitted") as reader:
        with pytest.raises(UnknownTopicOrPartitionError, match="kafkalog-topics.json lists it"):
            reader.partitions(Assign.parse('{"events":[2]}'))
        assert reader.partitions(Subscribe(("events",))) == EVENTS[:2]


def test_missing_log_dir_is_an_option_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidOptionError, match="option path=.*not a directory"):
        KafkaOffsetReader(tmp_path / "nope", "read_uncommitted")


@pytest.mark.parametrize("tp", [*EVENTS, TXN, TRIMMED, TopicPartition("empty", 0)], ids=str)
def test_bounds_match_the_files(
    uncommitted: KafkaOffsetReader, committed: KafkaOffsetReader, source_log_dir: Path, tp
) -> None:
    facts = partition_facts(source_log_dir, tp.topic, tp.partition)
    assert uncommitted.earliest(tp) == committed.earliest(tp) == facts.log_start
    assert uncommitted.latest(tp) == facts.high_watermark
    assert committed.latest(tp) == facts.last_stable


def test_bounds_of_special_partitions(uncommitted, committed) -> None:
    assert uncommitted.earliest(TRIMMED) == TRIMMED_LOG_START
    assert committed.latest(TXN) < uncommitted.latest(TXN)  # an open transaction


def test_offsets_by_timestamp_match_a_scan(
    uncommitted: KafkaOffsetReader, source_log_dir: Path
) -> None:
    for tp in EVENTS:
        facts = partition_facts(source_log_dir, tp.topic, tp.partition)
        largest = max(ts for _, ts in facts.all_offsets)
        for ts in [0, T0, T0 + 1, T0 + 123_456, T0 + 400_000, largest, largest + 1]:
            assert uncommitted.offset_for_timestamp(tp, ts) == first_offset_at(facts, ts), ts


def test_starting_and_ending_offsets(uncommitted: KafkaOffsetReader) -> None:
    tps = [TRIMMED, TXN]
    assert uncommitted.starting_offsets(EarliestOffsets(), tps, fail_on_data_loss=True) == {
        TRIMMED: TRIMMED_LOG_START,
        TXN: 0,
    }
    assert uncommitted.ending_offsets(LatestOffsets(), tps, fail_on_data_loss=True) == {
        TRIMMED: 300,
        TXN: uncommitted.latest(TXN),
    }
    spec = SpecificOffsets({TRIMMED: 120, TXN: -2})
    assert uncommitted.starting_offsets(spec, tps, fail_on_data_loss=True) == {TRIMMED: 120, TXN: 0}
    spec = SpecificOffsets({TRIMMED: 150, TXN: -1})
    assert uncommitted.ending_offsets(spec, tps, fail_on_data_loss=True) == {
        TRIMMED: 150,
        TXN: uncommitted.latest(TXN),
    }


def test_starting_below_log_start_is_data_loss(uncommitted, caplog) -> None:
    spec = SpecificOffsets({TRIMMED: 10})
    with pytest.raises(DataLossError, match=r"trimmed-0, below its log start offset 95.*\[10, 95"):
        uncommitted.starting_offsets(spec, [TRIMMED], fail_on_data_loss=True)
    with caplog.at_level(logging.WARNING, logger="datasource.kafka_offset_reader"):
        got = uncommitted.starting_offsets(spec, [TRIMMED], fail_on_data_loss=False)
    assert got == {TRIMMED: TRIMMED_LOG_START}
    assert "failOnDataLoss=false: using offset 95 of trimmed-0" in caplog.text


def test_ending_past_latest_is_data_loss(uncommitted, committed, caplog) -> None:
    spec = SpecificOffsets({TRIMMED: 400})
    with pytest.raises(DataLossError, match=r"trimmed-0 up to 400, past its high watermark 300"):
        uncommitted.ending_offsets(spec, [TRIMMED], fail_on_data_loss=True)
    assert uncommitted.ending_offsets(spec, [TRIMMED], fail_on_data_loss=False) == {TRIMMED: 300}
    hw = uncommitted.latest(TXN)
    with pytest.raises(DataLossError, match="past its last stable offset"):
        committed.ending_offsets(SpecificOffsets({TXN: hw}), [TXN], fail_on_data_loss=True)
    spec = SpecificOffsets({TRIMMED: 20})  # below the log start: nothing left to read
    assert uncommitted.ending_offsets(spec, [TRIMMED], fail_on_data_loss=False) == {TRIMMED: 95}


def test_per_partition_json_must_name_every_partition(uncommitted) -> None:
    with pytest.raises(InvalidOptionError, match="startingOffsets=.*does not name events-1"):
        uncommitted.starting_offsets(
            SpecificOffsets({EVENTS[0]: 1, EVENTS[2]: 1}), EVENTS, fail_on_data_loss=True
        )
    with pytest.raises(InvalidOptionError, match="endingOffsetsByTimestamp=.*names txn-0, which"):
        uncommitted.ending_offsets(
            SpecificTimestamps({EVENTS[0]: T0, TXN: T0}), EVENTS[:1], fail_on_data_loss=True
        )


def test_timestamps_without_a_match(uncommitted) -> None:
    late = GlobalTimestamp(T0 + 10**9)
    with pytest.raises(InvalidOptionError, match="no offset of events-0 has a record timestamp"):
        uncommitted.starting_offsets(late, EVENTS, fail_on_data_loss=True)
    got = uncommitted.starting_offsets(late, EVENTS, fail_on_data_loss=True, strategy="latest")
    assert got == {tp: uncommitted.latest(tp) for tp in EVENTS}
    assert uncommitted.ending_offsets(late, EVENTS, fail_on_data_loss=True) == got


def test_offset_ranges_and_an_end_before_the_start(uncommitted) -> None:
    got = uncommitted.offset_ranges(
        SpecificOffsets({TRIMMED: 100}),
        SpecificOffsets({TRIMMED: 200}),
        [TRIMMED],
        fail_on_data_loss=True,
    )
    assert got == [OffsetRange("trimmed", 0, 100, 200)]
    with pytest.raises(
        InvalidOptionError,
        match=r"trimmed-0: the ending offset 300 .* before the "
        r"starting offset 350.*\[95, 300\)",
    ):
        uncommitted.offset_ranges(
            SpecificOffsets({TRIMMED: 350}), LatestOffsets(), [TRIMMED], fail_on_data_loss=True
        )


@pytest.mark.parametrize("max_bytes", [1, 2_000, 5_000, 10**9])
def test_byte_cuts_fall_on_batch_starts(
    uncommitted: KafkaOffsetReader, source_log_dir: Path, max_bytes: int
) -> None:
    tp = EVENTS[1]
    whole = OffsetRange("events", 1, 0, uncommitted.latest(tp))
    bounds = batch_bounds(source_log_dir, "events", 1)  # (base offset, size) of every batch
    starts = {base for base, _ in bounds}
    total = sum(size for _, size in bounds)
    cuts = uncommitted.byte_cuts(whole, max_bytes)
    assert cuts == sorted(set(cuts)) and all(0 < c < whole.end for c in cuts)
    assert set(cuts) <= starts
    pieces = whole.split_at(cuts)
    if max_bytes >= total:
        assert cuts == []
    elif max_bytes == 1:  # a cut at every candidate: each segment start and index entry
        assert len(pieces) > 20
    else:
        expected = total / max_bytes
        assert expected / 3 <= len(pieces) <= expected * 2 + 2, (len(pieces), expected)
    largest = max(s for _, s in bounds)
    for piece in pieces:  # about max_bytes: at most one index interval and two batches more
        size = sum(s for b, s in bounds if piece.start <= b < piece.end)
        assert size <= max_bytes + 512 + 2 * largest or len(pieces) == 1


def test_byte_cuts_of_a_sub_range(uncommitted: KafkaOffsetReader) -> None:
    r = OffsetRange("events", 0, 100, 400)
    cuts = uncommitted.byte_cuts(r, 3_000)
    assert cuts and all(100 < c < 400 for c in cuts)
    assert uncommitted.byte_cuts(OffsetRange("empty", 0, 0, 0), 10) == []


def test_offset_by_timestamp_looks_past_a_segment_cut_by_the_log_start(tmp_path: Path) -> None:
    # segment 0 holds one batch: a late record (offset 0) and early ones (1-2); segment 3 late
    # ones. The log start moves to 1: the first record at or after "late" is offset 3
    from broker_embedded.broker import Broker
    from broker_embedded.common.producer_record import ProducerRecord

    late, early = T0 + 1_000_000, T0
    with Broker(tmp_path, create=True) as broker:
        broker.create_topic("t", 1, config={"retention.ms": -1, "segment.bytes": 200})
        for batch in ((late, early, early), (late, late)):
            broker.produce("t", 0, [ProducerRecord(b"x" * 60, timestamp=ts) for ts in batch])
        assert broker.delete_records("t", 0, 1) == 1
    tp = TopicPartition("t", 0)
    with KafkaOffsetReader(tmp_path, "read_uncommitted") as reader:
        assert reader.source.view(tp).base_offsets[:2] == [0, 3], "segments as planned"
        assert reader.offset_for_timestamp(tp, late) == 3
        assert reader.offset_for_timestamp(tp, early) == 1
        assert reader.offset_for_timestamp(tp, late + 1) is None
