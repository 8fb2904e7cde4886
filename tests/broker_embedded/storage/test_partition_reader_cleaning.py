"""A read-only ``PartitionReader`` against the log cleaner swapping segments under it.

Logs are written by a real ``LogManager``/``UnifiedLog`` (batches built by kafka-python) and
compacted by the real cleaner (``LogCleaner.clean_log``); what a reader returns is decoded with
kafka-python and compared with a fresh reader's result and with an independent expectation from
the writer's model: below the cleaned end, the latest record of each key; from it on (the head),
every record. Covered: a reader listed before a swap, reading from the start and from an offset
of a segment merged away; one that holds the old segments open (keeps its old view); one that
holds only the first segment of a merged group (switches to the cleaned data at the same
offset); ``batches`` and ``TXN_COMMITTED`` fetches across a swap; a listing caught in the middle
of a swap (waited out); a swap that never finishes and a file that stays missing (errors naming
topic, partition, offset and file); readers in threads while the cleaner runs rounds.
"""

from __future__ import annotations

import os
import random
import shutil
import threading
import time
import uuid
from pathlib import Path

import pytest

from broker_embedded.cleaner.log_cleaner_manager import LogCleaner, LogCleanerConfig
from broker_embedded.errors import KafkaStorageError
from broker_embedded.record.compression import CompressionType
from broker_embedded.storage import partition_reader
from broker_embedded.storage.fetch_data_info import FetchIsolation
from broker_embedded.storage.log_file_utils import segment_file_stem
from broker_embedded.storage.log_loader import SEGMENT_SUFFIXES
from broker_embedded.storage.log_manager import LogManager
from broker_embedded.storage.partition_reader import PartitionReader
from broker_embedded.storage.topic_config_file import TopicEntry
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import UnifiedLog

from ..cleaner._workload import T0, Writer
from ..record._peers import kafka_python_read

TP = TopicPartition("compacted", 0)
KEYS = 8
Rec = tuple[int, bytes | None, bytes | None]


class Log:
    """A compacted topic in a log dir, its writer (with the model) and a cleaner."""

    def __init__(self, log_dir: Path, seed: int, *, segment_bytes: int = 6000) -> None:
        self.manager = LogManager(log_dir, create=True)
        config = {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)}
        self.manager.put_topic(TP.topic, TopicEntry(uuid.UUID(int=7), 1, 1, config))
        self.log: UnifiedLog = self.manager.get_or_create_log(TP)
        self.writer = Writer(self.log, seed, keys=KEYS)
        self.rng = random.Random(seed)
        self.cleaner = LogCleaner(
            LogCleanerConfig(dedupe_buffer_size=1 << 20),
            log_dir,
            lambda: dict(self.manager.logs),
            clock_ms=lambda: T0,
        )

    @property
    def directory(self) -> Path:
        return self.log.directory

    def append(self, batches: int) -> None:
        for _ in range(batches):
            records = [
                (self.writer.key(), self.writer.value()) for _ in range(self.rng.randint(1, 4))
            ]
            codec = self.rng.choice([CompressionType.NONE, CompressionType.GZIP])
            self.writer.batch(records, codec=codec)
        self.log.update_high_watermark(self.log.log_end_offset)

    def seal(self) -> None:
        """Roll: everything written so far becomes cleanable."""
        self.log.roll()
        self.log.update_high_watermark(self.log.log_end_offset)

    def clean(self) -> int:
        """One cleaning round; the cleaned end offset (every older offset is compacted)."""
        result = self.cleaner.clean_log(TP, now_ms=T0)
        assert result is not None and result.cleaned
        assert result.end_offset == result.first_uncleanable_offset
        return result.end_offset

    def records(self) -> dict[int, tuple[bytes, bytes]]:
        return dict(self.writer.model.records)

    def close(self) -> None:
        self.manager.close()


@pytest.fixture
def log(tmp_path: Path):
    lg = Log(tmp_path, 11)
    for _ in range(15):  # small segments, which the cleaner merges by groups of a few
        lg.append(8)
        lg.seal()
    lg.append(6)  # the head: in the active segment, never cleaned
    yield lg
    lg.close()


def compacted(records: dict[int, tuple[bytes, bytes]], end: int, start: int = 0) -> list[Rec]:
    """The independent expectation: below ``end`` the latest record of each key, from ``end``
    on every record; offsets from ``start``."""
    latest: dict[bytes, int] = {}
    for offset in sorted(records):
        if offset < end:
            latest[records[offset][0]] = offset
    return [
        (o, k, v)
        for o, (k, v) in sorted(records.items())
        if o >= start and (o >= end or latest[k] == o)
    ]


def everything(records: dict[int, tuple[bytes, bytes]], start: int = 0, end: int | None = None):
    return [
        (o, k, v)
        for o, (k, v) in sorted(records.items())
        if o >= start and (end is None or o < end)
    ]


def decoded(data: bytes, start: int) -> tuple[list[Rec], int | None]:
    """Records at or after ``start`` in fetched bytes (kafka-python), and the offset after the
    last complete batch (``None``: no complete batch)."""
    batches = kafka_python_read(data)
    out = [(r.offset, r.key, r.value) for b in batches for r in b.records if r.offset >= start]
    return out, (batches[-1].last_offset + 1 if batches else None)


def read_all(reader: PartitionReader, start: int, max_bytes: int = 700) -> list[Rec]:
    """Consume the partition from ``start`` to the high watermark with small reads."""
    out: list[Rec] = []
    offset = start
    while offset < reader.high_watermark:
        records, following = decoded(bytes(reader.read(offset, max_bytes).records), offset)
        if following is None:
            break
        out += records
        offset = following
    return out


def merged_away(before: list[int], after: list[int], end: int) -> list[int]:
    """Base offsets of segments that the swap removed (merged into an earlier one)."""
    return [b for b in before if b < end and b not in after]


# -- a reader listed before the swap -----------------------------------------------------------


@pytest.mark.parametrize("where", ["start", "inside a merged group"])
def test_a_reader_listed_before_a_swap_reads_the_cleaned_log(log: Log, where: str) -> None:
    before = log.log.segment_base_offsets
    reader = PartitionReader(log.directory)
    assert reader.base_offsets == before
    end = log.clean()
    after = log.log.segment_base_offsets
    gone = merged_away(before, after, end)
    assert len(gone) >= 2 and len(after) < len(before) - 1  # groups of several segments merged
    assert not (log.directory / f"{segment_file_stem(gone[0])}.log").exists()
    start = 0 if where == "start" else gone[0] + 1
    assert start < end  # inside the cleaned part
    records = read_all(reader, start)
    assert records == compacted(log.records(), end, start)
    with PartitionReader(log.directory) as fresh:
        assert read_all(fresh, start) == records
    if where != "start":  # from the start every file it opened was still there
        assert reader.base_offsets == after  # it re-listed
    reader.close()


def test_a_reader_holding_its_segments_open_keeps_its_view(log: Log) -> None:
    reader = PartitionReader(log.directory)
    assert len(reader.segments()) == len(reader.base_offsets)  # every segment open (mapped)
    before = read_all(reader, 0)
    assert before == everything(log.records())
    end = log.clean()
    gone = merged_away(reader.base_offsets, log.log.segment_base_offsets, end)
    assert gone and not any(
        (log.directory / f"{segment_file_stem(b)}.log").exists() for b in gone
    )  # unlinked, read through the mappings
    assert read_all(reader, 0) == before
    assert read_all(reader, gone[0]) == everything(log.records(), gone[0])
    with PartitionReader(log.directory) as fresh:
        assert read_all(fresh, 0) == compacted(log.records(), end) != before
    reader.close()


def test_a_reader_holding_the_first_segment_of_a_group_goes_on_at_the_same_offset(
    log: Log,
) -> None:
    """Segment 0 (old) is open, the rest of its group is not: the old data up to where the old
    segment ends, then the cleaned data from that offset on (the old segment 0 must not answer
    for the offsets of the merged one)."""
    reader = PartitionReader(log.directory)
    first = reader.segment(0)
    boundary = first.next_offset  # where the old segment 0 ends
    assert boundary == reader.base_offsets[1]
    end = log.clean()
    assert 0 in log.log.segment_base_offsets and boundary not in log.log.segment_base_offsets
    records = read_all(reader, 0)
    expected = everything(log.records(), 0, boundary) + compacted(log.records(), end, boundary)
    assert records == expected
    assert reader.segment(0) is not first  # dropped at the re-listing
    assert read_all(reader, 0) == compacted(log.records(), end)  # now the cleaned segment 0
    reader.close()


def test_batches_walk_on_across_a_swap(log: Log) -> None:
    reader = PartitionReader(log.directory)
    walk = reader.batches()
    first = next(walk)  # segment 0 open, the walk stopped inside it
    boundary = reader.segment(0).next_offset
    end = log.clean()
    rest = list(walk)
    records = [(r.offset, r.key, r.value) for b in (first, *rest) for r in b.records()]
    expected = everything(log.records(), 0, boundary) + compacted(log.records(), end, boundary)
    assert records == expected
    offsets = [b.base_offset for b in (first, *rest)]
    assert offsets == sorted(set(offsets))  # no batch twice
    reader.close()


def test_a_committed_fetch_does_not_use_a_segment_replaced_since_it_was_opened(log: Log) -> None:
    """The old segment 0 is open; a second round rewrites segment 0: the TXN_COMMITTED fetch
    (which reads the ``.txnindex`` files by name, so they must be those of the records) reads
    the new segment 0, not the old one."""
    log.clean()
    reader = PartitionReader(log.directory)
    old = reader.segment(0)
    log.append(40)
    log.seal()
    end = log.clean()
    path = log.directory / f"{segment_file_stem(0)}.log"
    assert old.file_id != (path.stat().st_dev, path.stat().st_ino)  # rewritten
    info = reader.fetch(0, 1 << 20, FetchIsolation.TXN_COMMITTED)
    assert info.aborted_transactions == ()
    bound = min(log.log.segment_base_offsets[1], reader.high_watermark)
    assert decoded(info.records, 0)[0] == [r for r in compacted(log.records(), end) if r[0] < bound]
    with PartitionReader(log.directory, high_watermark=reader.high_watermark) as fresh:
        assert info.records == fresh.fetch(0, 1 << 20, FetchIsolation.TXN_COMMITTED).records
    reader.close()


# -- a listing in the middle of a swap -------------------------------------------------------------


def mid_swap(log: Log, copy: Path) -> tuple[list[int], int, list[tuple[Path, Path]]]:
    """Clean the log, then bring ``copy`` (a copy of the partition taken before) to the middle
    of the swap of its first group: the old segments of the group renamed ``.deleted``, the
    cleaned ones (the real cleaned files) as ``.swap``. Returns the bases merged away in that
    group, the offset where the group ends and the renames left to finish the swap."""
    before = log.log.segment_base_offsets
    end = log.clean()
    after = log.log.segment_base_offsets
    group_end = min(b for b in after if b > 0)  # the group based at 0 covers [0, group_end)
    members = [b for b in before if b < group_end]
    assert len(members) >= 2 and group_end <= end
    for base in members:
        for p in copy.glob(f"{segment_file_stem(base)}.*"):
            if p.suffix in SEGMENT_SUFFIXES:
                p.rename(p.with_name(p.name + ".deleted"))
    left = []
    for p in sorted(log.directory.glob(f"{segment_file_stem(0)}.*")):
        if p.suffix in SEGMENT_SUFFIXES:
            swap = copy / (p.name + ".swap")
            shutil.copyfile(p, swap)
            left.append((swap, copy / p.name))
    left.sort(key=lambda pair: pair[1].suffix != ".log")  # the .log first, as the cleaner does
    return members[1:], group_end, left


def copy_of(log: Log, tmp_path: Path) -> Path:
    copy = tmp_path / "copy" / log.directory.name
    shutil.copytree(log.directory, copy)
    return copy


def test_a_listing_in_the_middle_of_a_swap_is_waited_out(log: Log, tmp_path: Path) -> None:
    copy = copy_of(log, tmp_path)
    before = log.log.segment_base_offsets
    reader = PartitionReader(copy)  # listed before the swap
    gone, group_end, left = mid_swap(log, copy)
    cleaned_end = log.log.active_segment_base_offset

    def finish() -> None:
        time.sleep(0.1)
        for swap, final in left:
            os.rename(swap, final)

    finisher = threading.Thread(target=finish)
    finisher.start()
    try:
        records = read_all(reader, gone[0])  # its file is gone: re-list, wait, read
    finally:
        finisher.join()
    assert not list(copy.glob("*.swap"))
    expected = [r for r in compacted(log.records(), cleaned_end, gone[0]) if r[0] < group_end]
    assert records == expected + everything(log.records(), group_end)
    assert reader.base_offsets == [0] + [b for b in before if b >= group_end]
    with PartitionReader(copy) as fresh:
        assert read_all(fresh, gone[0]) == records
    reader.close()


def test_a_swap_that_never_finishes_is_an_error(
    log: Log, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(partition_reader, "_SETTLE_DELAYS", (0.001, 0.001, 0.001))
    copy = copy_of(log, tmp_path)
    reader = PartitionReader(copy)
    gone, _, _ = mid_swap(log, copy)
    missing = copy / f"{segment_file_stem(gone[0])}.log"
    with pytest.raises(KafkaStorageError) as e:
        reader.read(gone[0], 1 << 20)
    assert str(e.value) == (
        f"topic 'compacted' partition 0: reading at offset {gone[0]}: segment file {missing} "
        f"is gone, and {copy} is still in the middle of a segment swap after 0.00 s "
        f"({segment_file_stem(0)}.log.swap without its .log: a cleaner that stopped during a "
        "swap? opening the log dir with a broker recovers it)"
    )
    reader.close()


# -- a file that stays missing ---------------------------------------------------------------------


def test_a_file_that_stays_missing_is_an_error_naming_it(log: Log, tmp_path: Path) -> None:
    """A ``.log`` that the listing keeps showing but that cannot be opened (a dangling link):
    the reads re-list a bounded number of times, then fail naming the file."""
    copy = copy_of(log, tmp_path)
    bases = log.log.segment_base_offsets
    base = bases[2]
    path = copy / f"{segment_file_stem(base)}.log"
    path.unlink()
    path.symlink_to(copy / "nowhere.log")
    reader = PartitionReader(copy)
    assert base in reader.base_offsets
    expected = (
        f"topic 'compacted' partition 0: reading at offset {base + 1}: segment file {path} is "
        f"gone, still after {partition_reader._RELIST_ATTEMPTS} re-listings of {copy}"
    )
    with pytest.raises(KafkaStorageError) as e:
        reader.read(base + 1, 1 << 20)
    assert str(e.value) == expected
    with pytest.raises(KafkaStorageError) as e:
        list(reader.batches(base))
    assert str(e.value) == expected.replace(
        f"reading at offset {base + 1}", f"reading batches at offset {base}"
    )
    with pytest.raises(FileNotFoundError):  # segment() itself does not re-list
        reader.segment(base)
    first = decoded(bytes(reader.read(0, 1 << 20).records), 0)[0]  # what lies before it reads
    assert first == everything(log.records(), 0, bases[1])
    reader.close()


# -- readers in threads while the cleaner runs rounds ------------------------------------------


def test_readers_in_threads_while_the_cleaner_runs_rounds(tmp_path: Path) -> None:
    """Every record read is the one appended at its offset, offsets only go up, no read fails;
    the last read after the rounds equals the independent expectation."""
    log = Log(tmp_path, 23)
    stop = threading.Event()
    passes: list[list[Rec]] = []
    errors: list[BaseException] = []

    def read_repeatedly(long_lived: bool) -> None:
        kept = PartitionReader(log.directory)
        try:
            while not stop.is_set():
                reader = kept if long_lived else PartitionReader(log.directory)
                passes.append(read_all(reader, 0, max_bytes=300))
                if not long_lived:
                    reader.close()
                time.sleep(0.002)  # leave the cleaner some of the GIL
        except BaseException as e:  # noqa: BLE001 (reported by the test)
            errors.append(e)
        finally:
            kept.close()

    for _ in range(4):
        log.append(8)
        log.seal()
    threads = [threading.Thread(target=read_repeatedly, args=(x,)) for x in (True, False)]
    for t in threads:
        t.start()
    try:
        for _ in range(5):
            for _ in range(4):
                log.append(8)
                log.seal()
            end = log.clean()
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
    records = log.records()
    assert len(passes) >= 2
    for found in passes:
        assert [o for o, _, _ in found] == sorted({o for o, _, _ in found})
        assert all(records[o] == (k, v) for o, k, v in found)
    with PartitionReader(log.directory) as fresh:
        assert read_all(fresh, 0) == compacted(records, end)
    log.close()
