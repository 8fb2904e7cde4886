"""The cleaner against an independent model, on real files.

Logs are written through ``UnifiedLog`` (batches built by kafka-python, see _workload.py) and
read back with kafka-python; the model is plain Python: every record appended by offset, and the
latest value per key of what a read_committed consumer sees. Checked: the compacted read equals
the model, offsets never change and stay in order, a reader in the head sees everything, unchanged
batches are copied byte for byte and rewritten ones keep their header fields, tombstones expire
over two cleanings (controlled clock), aborted transactions go and committed ones stay, a dirty
section larger than the map is cleaned over several rounds at bounded memory, a crash at any step
of a swap recovers to the old or the new segments, and a reader in another process holding the
old segments keeps its view.
"""

from __future__ import annotations

import os
import pathlib
import re
import struct
import subprocess
import sys
import threading
import time
import tracemalloc
import uuid
import warnings
from pathlib import Path

import pytest

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.cleaner.cleaner import Cleaner
from broker_embedded.cleaner.log_cleaner_manager import (
    LogCleaner,
    LogCleanerConfig,
    LogCleanerManager,
)
from broker_embedded.cleaner.skimpy_offset_map import SkimpyOffsetMap
from broker_embedded.record.compression import CompressionType
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.storage.cleaning_session import CleaningAbortedError
from broker_embedded.storage.log_config import InvalidConfigError, LogConfig
from broker_embedded.storage.log_manager import LogManager
from broker_embedded.storage.log_segment import LogSegment
from broker_embedded.storage.offset_checkpoint import OffsetCheckpointFile
from broker_embedded.storage.topic_config_file import TopicEntry
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import UnifiedLog

from ._workload import (
    HEADER,
    SEGMENT_GLOB,
    T0,
    Writer,
    committed_records,
    latest_of,
    read_batches,
    segment_bytes,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

TP = TopicPartition("compacted", 0)
REPO = Path(__file__).resolve().parents[3]
COMPACT = {"cleanup_policy": "compact", "segment_bytes": 6000, "delete_retention_ms": 1000}


def open_log(log_dir: Path, *, had_clean_shutdown: bool = True, **config: object) -> UnifiedLog:
    """The log, its high watermark at its end (as a broker's leader has it once in sync)."""
    return UnifiedLog(
        log_dir,
        TP,
        LogConfig(**{**COMPACT, **config}),
        high_watermark=1 << 62,
        had_clean_shutdown=had_clean_shutdown,
    )


def seal(lg: UnifiedLog) -> None:
    """Roll and move the HW to the end: everything becomes cleanable."""
    lg.roll()
    lg.update_high_watermark(lg.log_end_offset)


def clean_fully(lg: UnifiedLog, cleaner: Cleaner, now: int, checkpoint: int | None = None) -> int:
    """Rounds until the dirty section is clean; returns the rounds taken."""
    rounds = 0
    while True:
        result = cleaner.clean(lg, checkpoint, now_ms=now)
        rounds += 1
        checkpoint = result.end_offset
        if result.end_offset >= result.first_uncleanable_offset:
            return rounds


def verify_segments(lg: UnifiedLog) -> None:
    for base in lg.segment_base_offsets:
        with LogSegment.open(lg.directory, base) as seg:
            seg.verify()
    leftovers = [
        p.name for p in lg.directory.iterdir() if p.suffix in (".cleaned", ".swap", ".deleted")
    ]
    assert leftovers == []


def check_against_model(lg: UnifiedLog, writer: Writer, *, below: int | None = None) -> None:
    """The compacted read equals the model: every record carries the value appended at its
    offset, offsets increase, and the latest value per key is the model's."""
    batches = read_batches(lg.directory)
    assert all(b.crc_valid for b in batches)
    records = committed_records(batches)
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets))
    for offset, key, value in records:
        assert writer.model.records[offset] == (key, value)
    assert latest_of(records) == writer.model.latest()
    if below is not None:  # the cleaned part holds one record per key
        keys = [k for o, k, _ in records if o < below]
        assert len(keys) == len(set(keys))


@pytest.fixture
def cleaner() -> Cleaner:
    return Cleaner(SkimpyOffsetMap(1 << 20))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_compacted_read_equals_the_model(tmp_path: Path, cleaner: Cleaner, seed: int) -> None:
    lg = open_log(tmp_path)
    w = Writer(lg, seed, keys=80)
    for _ in range(300):
        if w.rng.random() < 0.04:
            w.transaction(commit=w.rng.random() < 0.5)
        else:
            w.random_batch(tombstone_rate=0.1)
    seal(lg)
    size_before = lg.size_in_bytes
    check_against_model(lg, w)
    assert clean_fully(lg, cleaner, T0) == 1
    end = lg.log_end_offset
    check_against_model(lg, w, below=end)
    verify_segments(lg)
    assert lg.size_in_bytes < size_before / 3
    # a second cleaning of a clean log changes nothing
    before = segment_bytes(lg.directory)
    assert not cleaner.clean(lg, end, now_ms=T0).cleaned
    assert segment_bytes(lg.directory) == before
    # reopening (a recovery) reads the same
    lg.close()
    lg = open_log(tmp_path)
    check_against_model(lg, w, below=end)
    lg.close()


def test_keyless_records_go_and_the_head_stays(tmp_path: Path, cleaner: Cleaner) -> None:
    """A topic switched from delete to compact: its keyless records are dropped; everything at
    or above the first uncleanable offset (the active segment) is untouched."""
    lg = open_log(tmp_path, cleanup_policy="delete")
    w = Writer(lg, 9, keys=10)
    for i in range(60):
        w.batch([(None if i % 3 == 0 else w.key(), w.value())])
    seal(lg)
    for _ in range(20):  # the head: the active segment
        w.batch([(None, w.value()), (w.key(), w.value())])
    lg.close()
    lg = open_log(tmp_path)
    head = lg.active_segment_base_offset
    head_bytes = (lg.directory / f"{head:020d}.log").read_bytes()
    result = cleaner.clean(lg, None, now_ms=T0)
    assert (result.first_uncleanable_offset, result.end_offset) == (head, head)
    assert (lg.directory / f"{head:020d}.log").read_bytes() == head_bytes
    records = committed_records(read_batches(lg.directory))
    assert all(key is not None for o, key, _ in records if o < head)
    # a reader in the head sees every record appended there, keyless ones included
    assert [(o, k, v) for o, k, v in records if o >= head] == [
        (o, *w.model.records[o]) for o in sorted(w.model.records) if o >= head
    ]
    assert latest_of(r for r in records if r[0] < head) == w.model.latest(below=head)
    lg.close()


def test_batches_copied_byte_for_byte_or_rewritten_with_their_header(
    tmp_path: Path, cleaner: Cleaner
) -> None:
    lg = open_log(tmp_path, segment_bytes=1 << 20)
    kept = MemoryRecordsBuilder(0, producer_id=11, producer_epoch=2, base_sequence=0)
    for key in (b"a", b"b"):
        kept.append(None, T0, key, b"v-" + key)
    info_kept = lg.append_as_leader(kept.build(), leader_epoch=3)
    changed = MemoryRecordsBuilder(
        0, CompressionType.LZ4, producer_id=12, producer_epoch=4, base_sequence=10
    )
    for i, key in enumerate((b"c", b"d", b"e")):
        changed.append(None, T0 + 10 * i, key, b"old-" + key)
    info_changed = lg.append_as_leader(changed.build(), leader_epoch=5)
    later = MemoryRecordsBuilder(0)
    later.append(None, T0 + 100, b"c", b"new-c")
    later.append(None, T0 + 101, b"e", b"new-e")
    lg.append_as_leader(later.build(), leader_epoch=5)
    original = [bytes(b.buffer) for b in lg.batches()]
    seal(lg)
    cleaner.clean(lg, None, now_ms=T0)
    after = [bytes(b.buffer) for b in lg.batches()]
    assert after[0] == original[0]  # every record still the latest: byte for byte
    assert after[2] == original[2]
    old = HEADER.unpack_from(original[1])
    new = HEADER.unpack_from(after[1])
    # base offset, leader epoch, magic, codec bits, last offset delta, producer id/epoch/seq
    for field in (0, 2, 3, 6, 9, 10, 11):
        assert new[field] == old[field], field
    assert new[5] & 7 == CompressionType.LZ4
    assert new[12] == 1  # one record left
    (peer,) = [b for b in read_batches(lg.directory) if b.base_offset == info_changed.first_offset]
    assert peer.crc_valid and peer.last_offset == info_changed.last_offset
    assert [(r.offset, r.key, r.value, r.timestamp) for r in peer.records] == [
        (info_changed.first_offset + 1, b"d", b"old-d", T0 + 10)
    ]
    assert info_kept.first_offset == 0
    lg.close()


def test_tombstones_expire_over_two_cleanings(tmp_path: Path, cleaner: Cleaner) -> None:
    lg = open_log(tmp_path, delete_retention_ms=1000)
    w = Writer(lg, 4, keys=5)
    w.batch([(b"gone", b"v1"), (b"kept", b"v")])
    first, _ = w.batch([(b"gone", None), (b"other", b"x")])
    seal(lg)
    now = T0 + 50_000
    cleaner.clean(lg, None, now_ms=now)
    (batch,) = [b for b in lg.batches() if b.base_offset == first]
    assert batch.has_delete_horizon and batch.delete_horizon_ms == now + 1000
    records = {r.offset: r for r in batch.records()}
    assert records[first].value is None  # still there
    check_against_model(lg, w)
    checkpoint = lg.log_end_offset
    # before the horizon: a later cleaning keeps it
    w.batch([(b"new", b"1")])
    seal(lg)
    result = cleaner.clean(lg, checkpoint, now_ms=now + 999)
    assert result.cleaned
    assert latest_of(committed_records(read_batches(lg.directory)))[b"gone"] == (first, None)
    # at the horizon: gone, and the key with it
    checkpoint = result.end_offset
    w.batch([(b"new", b"2")])
    seal(lg)
    cleaner.clean(lg, checkpoint, now_ms=now + 1000)
    got = latest_of(committed_records(read_batches(lg.directory)))
    expected = {k: v for k, v in w.model.latest().items() if v[1] is not None}
    assert got == expected and b"gone" not in got
    verify_segments(lg)
    lg.close()


def test_tombstone_timestamps_survive_the_horizon_rewrite(tmp_path: Path, cleaner: Cleaner) -> None:
    lg = open_log(tmp_path)
    builder = MemoryRecordsBuilder(0)
    builder.append(None, T0 + 5, b"a", None)
    builder.append(None, T0 + 9, b"b", b"x")
    lg.append_as_leader(builder.build(), 0)
    seal(lg)
    cleaner.clean(lg, None, now_ms=T0 + 10**6)
    (peer,) = read_batches(lg.directory)
    assert [(r.key, r.value, r.timestamp) for r in peer.records] == [
        (b"a", None, T0 + 5),
        (b"b", b"x", T0 + 9),
    ]
    assert peer.max_timestamp == T0 + 9
    (batch,) = lg.batches()
    assert batch.delete_horizon_ms == T0 + 10**6 + 1000
    lg.close()


def test_transactions_aborted_data_goes_committed_stays(tmp_path: Path, cleaner: Cleaner) -> None:
    lg = open_log(tmp_path, delete_retention_ms=1000)
    w = Writer(lg, 5, keys=1000)  # few overwrites: what goes is what was aborted
    for i in range(30):
        w.random_batch(tombstone_rate=0)
        if i % 5 == 0:
            w.transaction(commit=i % 10 == 0, batches=3)
    aborted_before = lg.collect_aborted_transactions(0, lg.log_end_offset)
    assert len(aborted_before) == 3
    seal(lg)
    now = T0 + 10_000
    cleaner.clean(lg, None, now_ms=now)
    batches = read_batches(lg.directory)
    offsets = {r.offset for b in batches for r in b.records if not b.is_control}
    assert not offsets & w.model.aborted
    assert {o for o, _ in w.model.latest().values()} <= offsets
    # the ABORT markers stay this pass (their data was seen), indexed in the cleaned segments
    assert lg.collect_aborted_transactions(0, lg.log_end_offset) == aborted_before
    assert sum(b.is_control for b in batches) == 6
    check_against_model(lg, w)
    # next passes: an ABORT marker whose data is gone gets a horizon, then goes; COMMIT
    # markers stay while their transaction's records do. The producer's last data batch stays
    # (empty) while the producer is active, and with it the marker of that last transaction
    last_txn_batch = max(o for o in w.model.aborted)
    checkpoint = lg.log_end_offset
    for step in (1, 2):
        w.batch([(b"tick", b"%d" % step)])
        seal(lg)
        checkpoint = cleaner.clean(lg, checkpoint, now_ms=now + 2000 * step).end_offset
    batches = read_batches(lg.directory)
    markers = [
        (struct.unpack(">hh", b.records[0].key)[1], b.base_offset)
        for b in batches
        if b.is_control and b.records
    ]
    assert [kind for kind, _ in markers] == [1, 1, 1, 0]
    assert markers[-1][1] == aborted_before[-1].last_offset
    (kept_empty,) = [b for b in batches if b.base_offset <= last_txn_batch <= b.last_offset]
    assert kept_empty.records == () and kept_empty.is_transactional
    assert lg.collect_aborted_transactions(0, lg.log_end_offset) == aborted_before[-1:]
    check_against_model(lg, w)
    verify_segments(lg)
    lg.close()


def test_an_open_transaction_bounds_the_cleaning(tmp_path: Path, cleaner: Cleaner) -> None:
    lg = open_log(tmp_path)
    w = Writer(lg, 6, keys=3)
    for _ in range(20):
        w.random_batch(0)
    builder = MemoryRecordsBuilder(
        0, producer_id=99, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    builder.append(None, T0, b"key-0", b"in an open transaction")
    open_at = lg.append_as_leader(builder.build(), 0).first_offset
    lg.roll()
    for _ in range(20):
        w.random_batch(0)
    seal(lg)
    assert lg.last_stable_offset == open_at
    result = cleaner.clean(lg, None, now_ms=T0)
    assert result.first_uncleanable_offset <= open_at
    offsets = {r.offset for b in read_batches(lg.directory) for r in b.records}
    assert open_at in offsets
    assert {o for o in w.model.records if o > open_at} <= offsets  # the head after it: all
    lg.close()


def interned_table_growth() -> int:
    """Bytes of the interpreter's table of interned strings allocated while tracing: pathlib
    interns every path part, and when the table (as large as everything the process loaded:
    3.8 MB under the whole suite's collection) resizes during a round, the new table is the
    interpreter's memory, not the cleaner's."""
    stats = tracemalloc.take_snapshot().statistics("lineno")
    return sum(s.size for s in stats if s.traceback[0].filename == pathlib.__file__)


def test_more_keys_than_the_map_holds_take_several_rounds_at_bounded_memory(
    tmp_path: Path,
) -> None:
    lg = open_log(tmp_path, segment_bytes=64 << 10)
    w = Writer(lg, 7, keys=3000)
    for _ in range(2500):
        w.batch([(w.key(), w.rng.randbytes(200)) for _ in range(4)])
    seal(lg)
    log_bytes = lg.size_in_bytes
    memory = 24 * 1000
    offset_map = SkimpyOffsetMap(memory, load_factor=0.9)
    cleaner = Cleaner(offset_map, window_bytes=64 << 10)
    cleaner.clean(lg, None, now_ms=T0)  # compile and size the buffers once
    w2 = Writer(lg, 8, keys=3000)
    w2.model = w.model
    for _ in range(2500):
        w2.batch([(w2.key(), w2.rng.randbytes(200)) for _ in range(4)])
    seal(lg)
    checkpoint = cleaner.clean(lg, None, now_ms=T0).end_offset
    rounds, peak = 1, 0
    while True:
        tracemalloc.start()
        result = cleaner.clean(lg, checkpoint, now_ms=T0)
        peak = max(peak, tracemalloc.get_traced_memory()[1] - interned_table_growth())
        tracemalloc.stop()
        rounds += 1
        assert result.map_entries <= offset_map.max_desired_entries
        assert offset_map.buffer.nbytes == memory // 24 * 24
        checkpoint = result.end_offset
        if checkpoint >= result.first_uncleanable_offset:
            break
    assert rounds > 5
    assert log_bytes > 2_000_000
    # the map, the window buffers and per-window tables: far below the log's size
    assert peak < memory + 2_000_000, peak
    check_against_model(lg, w2)
    verify_segments(lg)
    lg.close()


def test_empty_batches_keep_producer_state_and_group_ends(tmp_path: Path, cleaner: Cleaner) -> None:
    lg = open_log(tmp_path, segment_bytes=200)  # each closed segment its own group
    t = int(time.time() * 1000)  # producers expire a day after their last timestamp
    idem = MemoryRecordsBuilder(0, producer_id=42, producer_epoch=1, base_sequence=0)
    idem.append(None, t, b"k", b"old")
    info = lg.append_as_leader(idem.build(), 0)
    plain = MemoryRecordsBuilder(0)
    plain.append(None, t, b"j", b"old")
    plain_info = lg.append_as_leader(plain.build(), 0)
    lg.roll()  # a segment whose last batch is superseded entirely: kept empty (group end)
    later = MemoryRecordsBuilder(0)
    later.append(None, t, b"k", b"new")
    later.append(None, t, b"j", b"new")
    lg.append_as_leader(later.build(), 0)
    mid = MemoryRecordsBuilder(0)
    mid.append(None, t, b"k", b"newest")
    lg.append_as_leader(mid.build(), 0)
    seal(lg)
    cleaner.clean(lg, None, now_ms=t)
    batches = {b.base_offset: b for b in lg.batches()}
    producer_batch = batches[info.first_offset]  # the producer's last batch: an empty header
    assert producer_batch.records_count == 0 and producer_batch.producer_id == 42
    assert producer_batch.last_offset == info.last_offset
    assert batches[plain_info.first_offset].records_count == 0  # the group's last batch
    assert lg.producer_state.last_entry(42).last_seq == 0
    lg.close()
    lg = open_log(tmp_path)
    assert lg.producer_state.last_entry(42).last_seq == 0
    lg.close()


def test_min_compaction_lag_leaves_recent_segments(tmp_path: Path, cleaner: Cleaner) -> None:
    lg = open_log(tmp_path, min_compaction_lag_ms=60_000, segment_bytes=1 << 20)
    old = MemoryRecordsBuilder(0)
    old.append(None, T0, b"k", b"1")
    old.append(None, T0, b"k", b"2")
    lg.append_as_leader(old.build(), 0)
    lg.roll()
    recent = MemoryRecordsBuilder(0)
    recent.append(None, T0 + 100_000, b"k", b"3")
    recent.append(None, T0 + 100_000, b"k", b"4")
    recent_at = lg.append_as_leader(recent.build(), 0).first_offset
    seal(lg)
    result = cleaner.clean(lg, None, now_ms=T0 + 120_000)
    assert result.first_uncleanable_offset == recent_at
    values = [r.value for b in lg.batches() for r in b.records()]
    assert values == [b"2", b"3", b"4"]
    lg.close()


def test_log_append_time_batches_keep_their_timestamps(tmp_path: Path, cleaner: Cleaner) -> None:
    lg = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    w = Writer(lg, 10, keys=4)
    for _ in range(40):
        w.random_batch(0.2)
    stamps = {b.base_offset: (b.max_timestamp, b.timestamp_type) for b in lg.batches()}
    seal(lg)
    cleaner.clean(lg, None, now_ms=T0)
    for b in lg.batches():
        assert (b.max_timestamp, b.timestamp_type) == stamps[b.base_offset]
        assert all(r.timestamp == b.max_timestamp for r in b.records())
    check_against_model(lg, w)
    lg.close()


def test_legacy_entries(tmp_path: Path, cleaner: Cleaner) -> None:
    """Magic 0/1 entries (a log from an old Kafka): superseded ones go, the others stay whole."""
    lg = open_log(tmp_path, segment_bytes=1 << 20)
    data = b""
    for offset, key, value in ((0, b"a", b"1"), (1, b"b", b"1"), (2, b"a", b"2")):
        builder = LegacyRecordBatchBuilder(1, 0, 1 << 20)
        builder.append(0, T0, key, value)
        buf = bytearray(builder.build())
        struct.pack_into(">q", buf, 0, offset)
        data += bytes(buf)
    lg.append_as_follower(data)
    modern = MemoryRecordsBuilder(3)
    modern.append(3, T0, b"b", b"2")
    lg.append_as_follower(modern.build())
    seal(lg)
    cleaner.clean(lg, None, now_ms=T0)
    records = [(r.offset, r.key, r.value) for b in read_batches_any(lg) for r in b]
    assert records == [(2, b"a", b"2"), (3, b"b", b"2")]
    lg.close()


def read_batches_any(lg: UnifiedLog) -> list[list]:
    from ..record._peers import kafka_python_read_records

    return [kafka_python_read_records(segment_bytes(lg.directory))]


# -- crashes in a swap -------------------------------------------------------------------------


class Crash(Exception):
    """A simulated crash: raised by the n-th rename."""


def state(directory: Path, suffixes: tuple[str, ...] = ("log", "index", "timeindex")) -> dict:
    return {
        p.name: p.read_bytes()
        for p in sorted(directory.iterdir())
        if p.name.split(".")[-1] in suffixes
    }


def test_a_crash_at_every_step_of_a_swap_recovers_old_or_new(tmp_path: Path) -> None:
    source = tmp_path / "source"
    lg = open_log(source, segment_bytes=3000)
    w = Writer(lg, 11, keys=30)
    for _ in range(80):
        if w.rng.random() < 0.1:
            w.transaction(commit=False)
        w.random_batch(0.1)
    seal(lg)
    lg.close()
    old = state(source / TP.dir_name)
    # the outcome of an uninterrupted round
    reference = tmp_path / "reference"
    subprocess.run(["cp", "-r", str(source), str(reference)], check=True)
    lg = open_log(reference)
    Cleaner(SkimpyOffsetMap(1 << 16)).clean(lg, None, now_ms=T0)
    groups = sum(1 for _ in (reference / TP.dir_name).glob(SEGMENT_GLOB))
    lg.close()
    new = state(reference / TP.dir_name)
    assert new != old and groups >= 2
    real_rename = os.rename
    crashes = 0
    for n in range(200):
        work = tmp_path / f"crash-{n}"
        subprocess.run(["cp", "-r", str(source), str(work)], check=True)
        lg = open_log(work)
        calls = [0]

        def rename(src: object, dst: object, n: int = n, calls: list = calls) -> None:
            if calls[0] == n:
                raise Crash(f"crash before rename {n}")
            calls[0] += 1
            real_rename(src, dst)

        os.rename = rename  # type: ignore[assignment]
        try:
            Cleaner(SkimpyOffsetMap(1 << 16)).clean(lg, None, now_ms=T0)
            finished = True
        except Crash:
            finished = False
            crashes += 1
        finally:
            os.rename = real_rename  # type: ignore[assignment]
        lg.close_without_flush()
        lg = open_log(work, had_clean_shutdown=False)
        after = state(work / TP.dir_name)
        verify_segments(lg)
        records = committed_records(read_batches(lg.directory))
        assert latest_of(records) == w.model.latest()
        for offset, key, value in records:
            assert w.model.records[offset] == (key, value)
        # every group is either the old segments or its cleaned replacement, never a mix
        bases = sorted(int(name[:20]) for name in after if name.endswith(".log"))
        for name, data in after.items():
            assert data in (old.get(name), new.get(name)), name
        old_bases = sorted(int(name[:20]) for name in old if name.endswith(".log"))
        assert set(bases) <= set(old_bases)
        lg.close()
        if finished:
            assert after == new
            break
    assert crashes >= 4 * groups  # each group's swap renames at least 4 files


def test_recovery_of_leftover_files(tmp_path: Path) -> None:
    """KAFKA-6264's rule: a .swap at or above the lowest .cleaned offset is an unfinished swap
    (removed with the .cleaned files); stray .deleted and .tmp files go."""
    lg = open_log(tmp_path, segment_bytes=2000)
    w = Writer(lg, 12, keys=10)
    for _ in range(40):
        w.random_batch(0)
    seal(lg)
    lg.close()
    d = tmp_path / TP.dir_name
    before = state(d)
    bases = sorted(int(n[:20]) for n in before if n.endswith(".log"))
    stem = f"{bases[1]:020d}"
    (d / f"{stem}.log.cleaned").write_bytes(b"partial")
    (d / f"{stem}.log.swap").write_bytes(b"x")
    (d / f"{bases[2]:020d}.index.swap").write_bytes(b"y")
    (d / f"{bases[0]:020d}.log.deleted").write_bytes(b"z")
    (d / "leader-epoch-checkpoint.tmp").write_bytes(b"w")
    lg = open_log(tmp_path)
    assert state(d) == before
    assert (
        sorted(
            p.name
            for p in d.iterdir()
            if "." in p.name and p.suffix in (".cleaned", ".swap", ".deleted", ".tmp")
        )
        == []
    )
    check_against_model(lg, w)
    lg.close()


# -- readers in other processes ----------------------------------------------------------------

READER = r"""
import sys
from broker_embedded.storage.partition_reader import PartitionReader
reader = PartitionReader(sys.argv[1])
segments = reader.segments()  # hold every segment open (mapped)
def read_all():
    out, offset = [], reader.log_start_offset
    while offset < reader.high_watermark:
        found = reader.read(offset, 1 << 20)
        data = bytes(found.records)
        if not data:
            break
        out.append(data)
        from broker_embedded.record.records import iter_batches
        last = None
        for b in iter_batches(data):
            last = b.next_offset
        offset = last
    return b"".join(out)
before = read_all()
print("ready", flush=True)
sys.stdin.readline()
after = read_all()
print("same" if after == before else "changed", len(before), flush=True)
"""


def test_a_reader_in_another_process_keeps_its_view(tmp_path: Path, cleaner: Cleaner) -> None:
    lg = open_log(tmp_path, segment_bytes=3000)
    w = Writer(lg, 13, keys=10)
    for _ in range(60):
        w.random_batch(0.1)
    seal(lg)
    proc = subprocess.Popen(
        [sys.executable, "-c", READER, str(lg.directory)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        before = segment_bytes(lg.directory)
        result = cleaner.clean(lg, None, now_ms=T0)
        assert result.cleaned and segment_bytes(lg.directory) != before
        proc.stdin.write("go\n")
        proc.stdin.flush()
        verdict, size = proc.stdout.readline().split()
        assert verdict == "same" and int(size) > len(segment_bytes(lg.directory))
    finally:
        proc.kill()
        proc.wait()
    lg.close()


# -- the manager and the threads -------------------------------------------------------------


def test_manager_picks_the_dirtiest_log_and_checkpoints(tmp_path: Path) -> None:
    logs = {}
    for p in range(3):
        tp = TopicPartition("m", p)
        lg = UnifiedLog(tmp_path, tp, LogConfig(**COMPACT), high_watermark=1 << 62)
        for i in range(200):
            b = MemoryRecordsBuilder(0)
            b.append(None, T0, b"k%d" % (i % 20), b"v" * 20)
            lg.append_as_leader(b.build(), 0)
        seal(lg)
        logs[tp] = lg
    cleaner = LogCleaner(
        LogCleanerConfig(dedupe_buffer_size=1 << 20, backoff_ms=10),
        tmp_path,
        lambda: dict(logs),
        clock_ms=lambda: T0,
    )
    manager = cleaner.manager
    # partition 0 a quarter clean, 1 all dirty, 2 mostly clean (below min.cleanable.dirty.ratio)
    bases = logs[TopicPartition("m", 0)].segment_base_offsets
    manager.update_checkpoint(TopicPartition("m", 0), bases[1])
    manager.update_checkpoint(TopicPartition("m", 2), bases[-2])
    ratios = {tp: manager.log_to_clean(tp, lg, T0).cleanable_ratio for tp, lg in logs.items()}
    assert ratios[TopicPartition("m", 1)] == 1.0
    assert 0.5 < ratios[TopicPartition("m", 0)] < 1.0 and ratios[TopicPartition("m", 2)] < 0.5
    picked = manager.grab_filthiest_compacted_log(T0)
    assert picked.log.topic_partition == TopicPartition("m", 1)
    assert manager.grab_filthiest_compacted_log(T0).log.topic_partition == TopicPartition("m", 0)
    assert manager.grab_filthiest_compacted_log(T0) is None  # 1 and 0 in progress, 2 not dirty
    manager.done_cleaning(TopicPartition("m", 0), None)
    manager.done_cleaning(TopicPartition("m", 1), None)
    c = cleaner.new_cleaner()
    assert cleaner.clean_once(c) and cleaner.clean_once(c) and not cleaner.clean_once(c)
    checkpoints = OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").read()
    assert checkpoints == {
        TopicPartition("m", 0): logs[TopicPartition("m", 0)].log_end_offset,
        TopicPartition("m", 1): logs[TopicPartition("m", 1)].log_end_offset,
        TopicPartition("m", 2): bases[-2],
    }
    # a new manager reads the file; an invalid checkpoint is reset to the log start
    manager.update_checkpoint(TopicPartition("m", 0), 10**9)
    again = LogCleanerManager(tmp_path, lambda: dict(logs))
    ltc = again.log_to_clean(TopicPartition("m", 0), logs[TopicPartition("m", 0)], T0)
    assert ltc.first_dirty_offset == 0
    assert again.all_cleaner_checkpoints()[TopicPartition("m", 0)] == 0
    # a truncation below the checkpoint lowers it to the log end it left
    lg1 = logs[TopicPartition("m", 1)]
    lg1.truncate_to(lg1.log_end_offset - 1)
    assert again.all_cleaner_checkpoints()[TopicPartition("m", 1)] > lg1.log_end_offset
    again.log_to_clean(TopicPartition("m", 1), lg1, T0)
    assert again.all_cleaner_checkpoints()[TopicPartition("m", 1)] == lg1.log_end_offset
    # deleted partitions leave the file
    again.forget([TopicPartition("m", 2)])
    assert (
        TopicPartition("m", 2)
        not in OffsetCheckpointFile(tmp_path / "cleaner-offset-checkpoint").read()
    )
    for lg in logs.values():
        lg.close()


def test_max_compaction_lag_forces_a_barely_dirty_log(tmp_path: Path) -> None:
    lg = open_log(tmp_path, max_compaction_lag_ms=1000, segment_bytes=1 << 20)
    for i in range(100):
        b = MemoryRecordsBuilder(0)
        b.append(None, T0 - 10**6, b"k%d" % i, b"v" * 50)
        lg.append_as_leader(b.build(), 0)
    seal(lg)
    manager = LogCleanerManager(tmp_path, lambda: {TP: lg})
    manager.update_checkpoint(TP, lg.log_end_offset)  # all of it clean
    b = MemoryRecordsBuilder(0)
    b.append(None, T0, b"k1", b"dirty")
    lg.append_as_leader(b.build(), 0)
    seal(lg)
    ltc = manager.log_to_clean(TP, lg, T0 + 500)
    assert 0 < ltc.cleanable_ratio < 0.5 and not ltc.need_compaction_now
    assert manager.grab_filthiest_compacted_log(T0 + 500) is None
    picked = manager.grab_filthiest_compacted_log(T0 + 5000)  # its first batch is 5 s old
    assert picked is not None and picked.need_compaction_now
    lg.close()


def test_compact_delete_logs_also_get_retention(tmp_path: Path) -> None:
    lg = open_log(
        tmp_path, cleanup_policy="compact,delete", retention_ms=1000, segment_bytes=1 << 20
    )
    for i in range(3):
        b = MemoryRecordsBuilder(0)
        b.append(None, T0 + i, b"k%d" % i, b"v")
        lg.append_as_leader(b.build(), 0)
        lg.roll()
    lg.update_high_watermark(lg.log_end_offset)
    cleaner = LogCleaner(
        LogCleanerConfig(dedupe_buffer_size=1 << 20),
        tmp_path,
        lambda: {TP: lg},
        clock_ms=lambda: T0 + 10_000,
    )
    cleaner.clean_once(cleaner.new_cleaner())
    assert lg.segment_base_offsets == [3]  # every closed segment past retention.ms
    lg.close()


def test_log_manager_cleaner_threads_compact_a_topic(tmp_path: Path) -> None:
    config = LogCleanerConfig(dedupe_buffer_size=1 << 20, backoff_ms=20)
    with LogManager(tmp_path, cleaner_config=config, create=True) as lm:
        lm.put_topic(
            "t",
            TopicEntry(
                uuid.UUID(int=1), 1, 1, {"cleanup.policy": "compact", "segment.bytes": "4000"}
            ),
        )
        lg = lm.get_or_create_log(TopicPartition("t", 0))
        w = Writer(lg, 14, keys=5)
        for _ in range(200):
            w.random_batch(0)
        seal(lg)
        for _ in range(500):
            if lm.cleaner.manager.all_cleaner_checkpoints().get(TopicPartition("t", 0)):
                break
            time.sleep(0.02)
        assert lm.cleaner.is_started
        assert lm.cleaner.manager.all_cleaner_checkpoints()[TopicPartition("t", 0)] == (
            lg.active_segment_base_offset
        )
        check_against_model(lg, w)
    assert (tmp_path / "cleaner-offset-checkpoint").exists()


# -- stopping a round --------------------------------------------------------------------------


def many_segments(tmp_path: Path, seed: int) -> tuple[UnifiedLog, Writer]:
    lg = open_log(tmp_path, segment_bytes=3000)
    w = Writer(lg, seed, keys=20)
    for _ in range(120):
        w.random_batch(0.1)
    seal(lg)
    return lg, w


@pytest.mark.parametrize("where", ["active segment", "closed segment"])
def test_a_truncation_during_a_round_aborts_it(tmp_path: Path, where: str) -> None:
    """Truncating the active segment makes the swap refuse; truncating a segment being read
    stops the round at once. Either way nothing of the round's output is left."""
    lg, w = many_segments(tmp_path, 15)
    if where == "active segment":
        for _ in range(3):
            w.random_batch(0)  # above the HW: the follower's divergent tail
    calls = [0]

    def truncate_once() -> bool:  # polled between windows, in the cleaner's thread
        calls[0] += 1
        if calls[0] == 3:
            lg.truncate_to(lg.log_end_offset - 1)
        return False

    closed_before = {
        b: (lg.directory / f"{b:020d}.log").read_bytes() for b in lg.segment_base_offsets[:-1]
    }
    cleaner = Cleaner(SkimpyOffsetMap(1 << 16), should_stop=truncate_once)
    message = "truncated" if where == "active segment" else "shrank"
    with pytest.raises(CleaningAbortedError, match=message):
        cleaner.clean(lg, None, now_ms=T0)
    verify_segments(lg)  # no .cleaned file left
    if where == "active segment":  # nothing was swapped: the first group's swap refused
        assert {
            b: (lg.directory / f"{b:020d}.log").read_bytes() for b in lg.segment_base_offsets[:-1]
        } == closed_before
    records = committed_records(read_batches(lg.directory))
    for offset, key, value in records:
        assert w.model.records[offset] == (key, value)
    lg.close()


def test_closing_the_log_stops_a_round_and_waits_for_it(tmp_path: Path) -> None:
    lg, w = many_segments(tmp_path, 16)
    inside = threading.Event()
    closed = []

    def pause() -> bool:
        inside.set()
        time.sleep(0.01)
        return False

    cleaner = Cleaner(SkimpyOffsetMap(1 << 16), should_stop=pause)

    def run() -> None:
        try:
            cleaner.clean(lg, None, now_ms=T0)
            closed.append("finished")
        except CleaningAbortedError:
            closed.append("aborted")

    t = threading.Thread(target=run)
    t.start()
    assert inside.wait(10)
    lg.close()  # returns once the round ended
    assert closed == ["aborted"]
    t.join()
    with pytest.raises(CleaningAbortedError):
        cleaner.clean(lg, None, now_ms=T0)
    lg = open_log(tmp_path)
    verify_segments(lg)
    check_against_model(lg, w)
    lg.close()


def test_broker_config_carries_the_cleaner_settings(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(
        '[broker]\n"log.cleaner.threads" = 2\n'
        '[log_cleaner]\n"log.cleaner.dedupe.buffer.size" = 1048576\n'
        '"log.cleaner.io.buffer.load.factor" = 0.5\n"log.cleaner.backoff.ms" = 100\n',
        "utf-8",
    )
    config = LogCleanerConfig.from_broker_config(BrokerConfig.load(path))
    assert config == LogCleanerConfig(
        threads=2, dedupe_buffer_size=1 << 20, load_factor=0.5, backoff_ms=100
    )
    assert config.map_memory == 1 << 19
    assert LogCleanerConfig.from_broker_config(BrokerConfig()) == LogCleanerConfig()
    for text, needle in (
        ('[log_cleaner]\n"log.cleaner.io.buffer.load.factor" = 1.5\n', "(0, 1]"),
        ('[log_cleaner]\n"fetch.max.bytes" = 1\n', "unknown log cleaner config"),
        (
            '[broker]\n"log.cleaner.threads" = 1\n[log_cleaner]\n"log.cleaner.threads" = 1\n',
            "set twice",
        ),
    ):
        path.write_text(text, "utf-8")
        with pytest.raises(InvalidConfigError, match=re.escape(needle)):
            BrokerConfig.load(path)
