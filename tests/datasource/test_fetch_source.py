"""The fetch interface the data source reads through (broker_embedded/storage/fetch_source.py)
and its log-dir implementation, against the source log dir worked out independently
(_logdirs.py), plus the planner's fallback when a source cannot tell bytes."""

from __future__ import annotations

import pickle
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from broker_embedded.errors import OffsetOutOfRangeError
from broker_embedded.record.columnar_decoder import decode
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.fetch_source import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ByteCut,
    FetchedPartition,
    FetchSource,
)
from broker_embedded.storage.log_dir_fetch_source import LogDirFetchSource, LogDirSource
from broker_embedded.storage.topic_partition import TopicPartition
from datasource.kafka_offset_reader import KafkaOffsetReader
from datasource.offset_range import OffsetRange
from tests.datasource._logdirs import (
    EVENTS_PARTITIONS,
    TRIMMED_LOG_START,
    expected_rows,
    first_offset_at,
    partition_facts,
)

COMMITTED, UNCOMMITTED = IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED


@pytest.fixture
def source(source_log_dir: Path):
    with LogDirSource(str(source_log_dir)).open() as opened:
        yield opened


def test_descriptor_is_small_and_pickles(source_log_dir: Path) -> None:
    descriptor = LogDirSource(str(source_log_dir))
    again = pickle.loads(pickle.dumps(descriptor))
    assert again == descriptor and again.location == f"log dir {source_log_dir}"
    with again.open() as opened:
        assert opened.descriptor == descriptor
        assert opened.topics() == {
            "events": tuple(range(EVENTS_PARTITIONS)),
            "txn": (0,),
            "trimmed": (0,),
            "appendtime": (0,),
            "empty": (0,),
        }


@pytest.mark.parametrize(("topic", "partition"), [("events", 1), ("txn", 0), ("trimmed", 0)])
def test_list_offset_is_kafkas(
    source: LogDirFetchSource, source_log_dir: Path, topic: str, partition: int
) -> None:
    facts = partition_facts(source_log_dir, topic, partition)
    tp = TopicPartition(topic, partition)
    assert source.list_offset(tp, EARLIEST_TIMESTAMP, UNCOMMITTED) == facts.log_start
    assert source.list_offset(tp, LATEST_TIMESTAMP, UNCOMMITTED) == facts.high_watermark
    assert source.list_offset(tp, LATEST_TIMESTAMP, COMMITTED) == facts.last_stable
    for ts in sorted({t for _, t in facts.all_offsets})[::7] + [0, 1 << 50]:
        for isolation in (UNCOMMITTED, COMMITTED):
            committed = isolation == COMMITTED
            expected = first_offset_at(facts, ts, committed)
            assert source.list_offset(tp, ts, isolation) == expected, (ts, isolation)


@pytest.mark.parametrize("isolation", [UNCOMMITTED, COMMITTED])
def test_fetches_decode_to_the_partition(
    source: LogDirFetchSource, source_log_dir: Path, isolation: IsolationLevel
) -> None:
    facts = partition_facts(source_log_dir, "txn", 0)
    tp, committed = TopicPartition("txn", 0), isolation == COMMITTED
    offset, rows = facts.log_start, []
    while True:
        fetched = source.fetch(tp, offset, 300, isolation)
        assert (fetched.topic_partition, fetched.fetch_offset) == (tp, offset)
        assert (fetched.high_watermark, fetched.log_start_offset) == (
            facts.high_watermark,
            facts.log_start,
        )
        assert fetched.last_stable_offset == (facts.last_stable if committed else -1)
        assert (fetched.aborted_transactions is None) is not committed
        decoded = decode(
            fetched.records,
            topic="txn",
            partition=0,
            start_offset=offset,
            aborted_transactions=fetched.aborted_transactions,
        )
        rows += [o for b in decoded.batches for o in b.column("offset").to_pylist()]
        if decoded.next_offset == offset:
            break
        offset = decoded.next_offset
    assert fetched.records == b"" and offset == fetched.bound(isolation)
    assert rows == [r.offset for r in expected_rows(facts, read_committed=committed)]


@pytest.mark.parametrize(("topic", "partition"), [("events", 1), ("txn", 0), ("trimmed", 0)])
@pytest.mark.parametrize("max_bytes", [1, 300, 1 << 20])
def test_in_place_fetches_equal_copied_ones_and_stay_valid(
    source_log_dir: Path, topic: str, partition: int, max_bytes: int
) -> None:
    """``fetch_in_place`` answers what ``fetch`` answers, field by field, under both isolations,
    from every batch boundary and from inside batches; its read_uncommitted records are a view
    of the mapping, not a copy; a view kept across later fetches (whose pages those fetches
    released) and past ``close`` still holds the same bytes."""
    facts = partition_facts(source_log_dir, topic, partition)
    tp = TopicPartition(topic, partition)
    offsets = sorted({o for o, _ in facts.all_offsets if o >= facts.log_start})
    kept: list[tuple[memoryview, bytes]] = []
    with (
        LogDirSource(str(source_log_dir)).open() as copying,
        LogDirSource(str(source_log_dir)).open() as in_place,
    ):
        for offset in [*offsets[::5], facts.high_watermark]:
            for isolation in (UNCOMMITTED, COMMITTED):
                copied = copying.fetch(tp, offset, max_bytes, isolation)
                viewed = in_place.fetch_in_place(tp, offset, max_bytes, isolation)
                assert bytes(viewed.records) == copied.records, (offset, isolation)
                assert _fields(viewed) == _fields(copied), (offset, isolation)
                if isolation == UNCOMMITTED and copied.records:
                    assert isinstance(viewed.records, memoryview)
                    kept.append((viewed.records, copied.records))
    assert kept and all(bytes(view) == copy for view, copy in kept)


def _fields(fetched: FetchedPartition) -> tuple:
    """Every field but the records (``FetchedPartition`` compares by identity)."""
    return tuple(getattr(fetched, f.name) for f in fields(fetched) if f.name != "records")


def test_fetch_below_the_log_start_is_out_of_range(source: LogDirFetchSource) -> None:
    with pytest.raises(OffsetOutOfRangeError, match="trimmed"):
        source.fetch(TopicPartition("trimmed", 0), TRIMMED_LOG_START - 1, 1000, UNCOMMITTED)


def test_byte_cut_answers_for_the_whole_range(source: LogDirFetchSource) -> None:
    tp = TopicPartition("events", 0)
    latest = source.list_offset(tp, LATEST_TIMESTAMP, UNCOMMITTED)
    whole = source.byte_cut(tp, 0, latest, 1 << 40)
    assert whole.offset == latest and whole.size > 0
    assert source.byte_cut(tp, 0, latest, 0) == ByteCut(0, 0)
    assert source.byte_cuts(tp, 0, latest, whole.size) == []


def test_byte_cuts_list_the_segments_again_when_a_cleaner_swapped_them(source_log_dir, tmp_path):
    """A cleaner that merged a segment into the one before it between the listing and the cut
    (its files gone): the cut lists the segments again rather than failing on the lost file."""
    import shutil

    copy = Path(shutil.copytree(source_log_dir, tmp_path / "logdir"))
    tp = TopicPartition("events", 0)
    with LogDirSource(str(copy)).open() as source:
        latest = source.list_offset(tp, LATEST_TIMESTAMP, UNCOMMITTED)
        bases = source.view(tp).base_offsets
        assert len(bases) >= 3
        for f in (copy / "events-0").glob(f"{bases[1]:020d}.*"):
            f.unlink()
        cut = source.byte_cut(tp, 0, latest, 1 << 40)
        assert cut.offset == latest and cut.size > 0
        assert source.byte_cuts(tp, 0, latest, 1 << 40) == []


@dataclass(frozen=True)
class _NoBytesSource:
    """A descriptor of a log-dir source that cannot tell bytes, as a wire source may not."""

    path: str

    @property
    def location(self) -> str:
        return f"log dir {self.path} (no byte cuts)"

    def open(self) -> FetchSource:
        return _NoBytes(LogDirSource(self.path))


class _NoBytes(LogDirFetchSource):
    def byte_cut(self, *args, **kwargs) -> None:  # type: ignore[override]
        return None

    def byte_cuts(self, *args, **kwargs) -> None:  # type: ignore[override]
        return None


def test_planner_falls_back_to_offsets_when_bytes_are_unknown(source_log_dir: Path) -> None:
    tp = TopicPartition("events", 0)
    with KafkaOffsetReader(_NoBytesSource(str(source_log_dir)), "read_uncommitted") as offsets:
        latest = offsets.latest(tp)
        assert offsets.byte_cuts(OffsetRange("events", 0, 0, latest), 100) == []
        assert offsets.byte_cut(tp, 10, latest, 100, min_one_batch=True) == (latest, 0)
        assert offsets.log_bytes(tp, 0, latest) == 0
    with KafkaOffsetReader(source_log_dir, "read_uncommitted") as offsets:
        assert len(offsets.byte_cuts(OffsetRange("events", 0, 0, latest), 1000)) > 5
