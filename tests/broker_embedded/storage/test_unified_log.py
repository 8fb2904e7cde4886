"""UnifiedLog on real files: leader appends and their validation, LogAppendTime, idempotence,
rolls, retention, flushing, recovery, truncation, reads and transactions.

Client batches are built by kafka-python and what lands on disk is decoded by it (an independent
implementation); headers are also checked with ``struct`` straight from the bytes. Transaction
markers come from ``EndTransactionMarker.build_batch`` (what a coordinator sends).
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import crc32c
import pytest

from broker_embedded.errors import (
    BrokerClosedError,
    CorruptMessageError,
    InvalidRecordError,
    KafkaLogError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)
from broker_embedded.record.control_record import EndTransactionMarker
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.fetch_data_info import FetchIsolation
from broker_embedded.storage.leader_epoch_checkpoint import EpochEntry
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.log_segment import LogSegment
from broker_embedded.storage.producer_state_manager import AppendOrigin
from broker_embedded.storage.segment_indexer import SegmentIndexer
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.transaction_index import AbortedTxn
from broker_embedded.storage.unified_log import UnifiedLog
from spark_kafkalog.dump_log import dump

from ..record._peers import kafka_python_read

with warnings.catch_warnings():  # kafka-python's import-time DeprecationWarnings (its own code)
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

TP = TopicPartition("orders", 3)
WHERE = "topic 'orders' partition 3"
T0 = 1_700_000_000_000
KAFKALOG = Path(sys.executable).with_name("kafkalog")
HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61-byte v2 batch header, field by field
SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")


class Clock:
    """An injected wall clock (ms)."""

    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def client_batch(
    values: list[bytes],
    *,
    ts: int = T0,
    keys: list[bytes | None] | None = None,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    txn: bool = False,
    compression: int = 0,
) -> bytes:
    """A batch as a kafka-python producer sends it (base offset 0)."""
    builder = DefaultRecordBatchBuilder(2, compression, txn, pid, epoch, seq, 1 << 24)
    for i, value in enumerate(values):
        key = b"k%d" % i if keys is None else keys[i]
        builder.append(i, ts, key, value, [])
    return bytes(builder.build())


def marker(commit: bool, pid: int, *, epoch: int = 0, ts: int = T0) -> bytes:
    m = EndTransactionMarker.commit(0) if commit else EndTransactionMarker.abort(0)
    return m.build_batch(base_offset=0, timestamp=ts, producer_id=pid, producer_epoch=epoch)


def open_log(
    log_dir: Path, overrides: dict | None = None, clock: Clock | None = None, **kw
) -> UnifiedLog:
    config = LogConfig().with_overrides(overrides or {})
    return UnifiedLog(log_dir, TP, config, clock_ms=clock or Clock(), **kw)


def part_dir(log_dir: Path) -> Path:
    return log_dir / TP.dir_name


def files(directory: Path, suffix: str) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(suffix))


def file_sizes(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in directory.iterdir() if p.is_file()}


def log_bytes(log_dir: Path) -> bytes:
    d = part_dir(log_dir)
    return b"".join((d / n).read_bytes() for n in files(d, ".log"))


def headers(data: bytes) -> list[tuple]:
    """(position, base offset, leader epoch, attributes, max timestamp) of each batch, walked by
    batchLength only."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        h = HEADER.unpack_from(data, pos)
        out.append((pos, h[0], h[2], h[5], h[8]))
        pos += 12 + h[1]
    return out


def offsets_and_values(data: bytes) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for b in kafka_python_read(data) for r in b.records]


def verify_dump(log_dir: Path) -> str:
    out = io.StringIO()
    assert dump([part_dir(log_dir)], out, verify=True, summary_only=True) == 0
    return out.getvalue()


def assert_indexes_equal_a_rebuild(directory: Path, interval: int) -> None:
    for name in files(directory, ".log"):
        log = directory / name
        batches = list(iter_batches(log.read_bytes(), str(log), tail="error"))
        oi, ti = SegmentIndexer.rebuild(batches, int(log.stem), index_interval_bytes=interval)
        assert log.with_suffix(".index").read_bytes() == oi.to_bytes(), name
        assert log.with_suffix(".timeindex").read_bytes() == ti.to_bytes(), name


def snapshot_entries(path: Path) -> list[tuple]:
    """A producer snapshot parsed with struct, after checking its version and CRC-32C."""
    data = path.read_bytes()
    version, crc, count = struct.unpack_from(">hIi", data, 0)
    assert (version, crc, len(data)) == (1, crc32c.crc32c(data[6:]), 10 + 46 * count)
    return [SNAPSHOT_ENTRY.unpack_from(data, 10 + 46 * i) for i in range(count)]


# -- leader appends --------------------------------------------------------------------------------


def test_leader_append_assigns_offsets_and_stamps_leader_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    sent = [client_batch([b"a", b"b", b"c"]), client_batch([b"d"])]
    infos = [log.append_as_leader(sent[0], 5), log.append_as_leader(sent[1], 5)]
    two = client_batch([b"e", b"f"]) + client_batch([b"g", b"h"])  # one request, two batches
    infos.append(log.append_as_leader(two, 7))
    assert [(i.first_offset, i.last_offset, i.num_records, i.size) for i in infos] == [
        (0, 2, 3, len(sent[0])),
        (3, 3, 1, len(sent[1])),
        (4, 7, 4, len(two)),
    ]
    assert [i.duplicate for i in infos] == [False] * 3
    assert log.log_end_offset == 8
    data = (part_dir(tmp_path) / "00000000000000000000.log").read_bytes()
    assert [(h[1], h[2]) for h in headers(data)] == [(0, 5), (3, 5), (4, 7), (6, 7)]
    peers = kafka_python_read(data)
    assert [p.crc_valid for p in peers] == [True] * 4
    assert offsets_and_values(data) == list(
        enumerate([b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"])
    )
    # Only baseOffset and partitionLeaderEpoch changed: the rest is the client's bytes.
    assert data[:12] == b"\0" * 8 + sent[0][8:12] and data[16:91] == sent[0][16:]
    epochs = (part_dir(tmp_path) / "leader-epoch-checkpoint").read_text()
    assert epochs == "0\n2\n5 0\n7 4\n"
    assert log.leader_epoch_cache.entries() == [EpochEntry(5, 0), EpochEntry(7, 4)]
    assert log.end_offset_for_epoch(5) == (5, 4)
    log.close()


def _count_mismatch() -> bytes:
    buf = bytearray(client_batch([b"a", b"b", b"c"]))
    struct.pack_into(">i", buf, 23, 1)  # lastOffsetDelta 1 for 3 records
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def _crc_broken() -> bytes:
    buf = bytearray(client_batch([b"payload"]))
    buf[-3] ^= 0xFF
    return bytes(buf)


def _magic_1() -> bytes:
    builder = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    builder.append(0, T0, b"k", b"v")
    return bytes(builder.build())


REJECTED = {
    "count_vs_last_offset_delta": (
        {},
        _count_mismatch,
        InvalidRecordError,
        "record count 3 does not match last offset delta 1",
    ),
    "client_control_batch": (
        {},
        lambda: marker(True, 9),
        InvalidRecordError,
        "clients may not send control batches",
    ),
    "keyless_record_on_compacted_topic": (
        {"cleanup.policy": "compact"},
        lambda: client_batch([b"a", b"b"], keys=[b"k", None]),
        InvalidRecordError,
        "does not accept records without a key",
    ),
    "larger_than_max_message_bytes": (
        {"max.message.bytes": "100"},
        lambda: client_batch([b"x" * 60]),
        RecordTooLargeError,
        "batch of 131 bytes exceeds max.message.bytes 100",
    ),
    "crc_mismatch": ({}, _crc_broken, CorruptMessageError, "CRC mismatch"),
    "magic_1": ({}, _magic_1, InvalidRecordError, "magic 1 is not supported"),
    "empty": ({}, lambda: b"", InvalidRecordError, "holds no record batch"),
    "torn_batch": ({}, lambda: client_batch([b"abc"])[:-2], CorruptMessageError, "produce request"),
    "idempotent_without_sequence": (
        {},
        lambda: client_batch([b"a"], pid=7, epoch=0),
        InvalidRecordError,
        "producer 7 sent a batch without a sequence number",
    ),
    "second_batch_bad": (
        {},
        lambda: client_batch([b"ok"]) + _crc_broken(),
        CorruptMessageError,
        "CRC mismatch",
    ),
}


@pytest.mark.parametrize("case", list(REJECTED))
def test_rejected_append_raises_kafka_error_and_writes_nothing(tmp_path: Path, case: str) -> None:
    overrides, build, error, fragment = REJECTED[case]
    log = open_log(tmp_path, overrides)
    log.append_as_leader(client_batch([b"first"]), 0)
    log.flush()
    before = file_sizes(part_dir(tmp_path)), log_bytes(tmp_path)
    with pytest.raises(error) as info:
        log.append_as_leader(build(), 1)
    message = str(info.value)
    assert WHERE in message and fragment in message
    assert (
        info.value.code
        == {InvalidRecordError: 87, RecordTooLargeError: 10, CorruptMessageError: 2}[error]
    )
    assert log.log_end_offset == 1
    assert (file_sizes(part_dir(tmp_path)), log_bytes(tmp_path)) == before
    assert log.leader_epoch_cache.entries() == [EpochEntry(0, 0)]
    assert log.append_as_leader(client_batch([b"next"]), 1).first_offset == 1
    log.close()


def test_log_append_time_sets_max_timestamp_type_bit_and_crc(tmp_path: Path) -> None:
    clock = Clock(1_700_000_123_456)
    log = open_log(tmp_path, {"message.timestamp.type": "LogAppendTime"}, clock)
    sent = client_batch([b"x", b"y"], ts=1_000)
    info = log.append_as_leader(sent, 2)
    assert (info.log_append_time, info.max_timestamp) == (clock.ms, clock.ms)
    data = log_bytes(tmp_path)
    ((_, base, epoch, attributes, max_ts),) = headers(data)
    assert (base, epoch, attributes & 0x08, max_ts) == (0, 2, 0x08, clock.ms)
    assert struct.unpack_from(">q", data, 27)[0] == 1_000  # baseTimestamp untouched
    stored_crc = struct.unpack_from(">I", data, 17)[0]
    assert stored_crc == crc32c.crc32c(data[21:]) != struct.unpack_from(">I", sent, 17)[0]
    (peer,) = kafka_python_read(data)
    assert (peer.crc_valid, peer.timestamp_type, peer.max_timestamp) == (True, 1, clock.ms)
    assert [r.timestamp for r in peer.records] == [clock.ms, clock.ms]
    # A retried idempotent batch answers with the original offsets and append time.
    retried = client_batch([b"z"], pid=5, epoch=0, seq=0)
    first = log.append_as_leader(retried, 2)
    clock.ms += 5000
    again = log.append_as_leader(retried, 2)
    assert (first.first_offset, first.log_append_time) == (2, clock.ms - 5000)
    assert (again.first_offset, again.log_append_time, again.duplicate) == (
        2,
        clock.ms - 5000,
        True,
    )
    log.close()


@pytest.mark.parametrize(
    ("topic_codec", "sent_codec", "stored_codec"),
    [("zstd", 0, 4), ("uncompressed", 3, 0), ("gzip", 1, 1), ("producer", 2, 2)],
)
def test_compression_type_recompresses_batches_in_another_codec(
    tmp_path: Path, topic_codec: str, sent_codec: int, stored_codec: int
) -> None:
    log = open_log(tmp_path, {"compression.type": topic_codec})
    sent = client_batch([b"a" * 300, None, b"c"], compression=sent_codec, pid=7, epoch=1, seq=4)
    info = log.append_as_leader(sent, 1)
    assert (info.first_offset, info.last_offset, info.num_records) == (0, 2, 3)
    data = log_bytes(tmp_path)
    (peer,) = kafka_python_read(data)
    assert (peer.crc_valid, peer.compression, peer.producer_id) == (True, stored_codec, 7)
    assert (peer.producer_epoch, peer.base_sequence) == (1, 4)
    assert [(r.offset, r.value) for r in peer.records] == [(0, b"a" * 300), (1, None), (2, b"c")]
    if topic_codec == "producer":
        assert data[61:] == sent[61:]  # kept byte for byte
    log.close()


def test_idempotent_retry_returns_original_offsets_and_is_stored_once(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(client_batch([b"plain"]), 0)
    retried = client_batch([b"a", b"b"], pid=42, epoch=0, seq=0)
    first = log.append_as_leader(retried, 0)
    size = log_bytes(tmp_path)
    again = log.append_as_leader(retried, 0)
    assert (first.first_offset, first.last_offset, first.duplicate) == (1, 2, False)
    assert (again.first_offset, again.last_offset, again.duplicate) == (1, 2, True)
    assert log.log_end_offset == 3 and log_bytes(tmp_path) == size
    nxt = log.append_as_leader(client_batch([b"c"], pid=42, epoch=0, seq=2), 0)
    assert (nxt.first_offset, nxt.duplicate) == (3, False)
    before = log_bytes(tmp_path)
    with pytest.raises(OutOfOrderSequenceError, match="producer 42") as e:
        log.append_as_leader(client_batch([b"d"], pid=42, epoch=0, seq=5), 0)
    assert e.value.code == 45 and "orders-3" in str(e.value)
    assert log_bytes(tmp_path) == before and log.log_end_offset == 4
    assert offsets_and_values(log_bytes(tmp_path)) == [
        (0, b"plain"),
        (1, b"a"),
        (2, b"b"),
        (3, b"c"),
    ]
    log.close()
    log = open_log(tmp_path)  # the snapshot written at close keeps the last batch
    dup = log.append_as_leader(client_batch([b"c"], pid=42, epoch=0, seq=2), 0)
    assert (dup.first_offset, dup.last_offset, dup.duplicate) == (3, 3, True)
    assert log.log_end_offset == 4
    log.close()


def test_follower_append_keeps_leader_offsets_and_epochs(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    leader.append_as_leader(client_batch([b"a", b"b"]), 3)
    leader.append_as_leader(client_batch([b"c"], pid=42, epoch=0, seq=0), 4)
    leader.append_as_leader(client_batch([b"d", b"e"]), 6)
    fetched = leader.read(0, 1 << 20, FetchIsolation.LOG_END).records
    follower = open_log(tmp_path / "follower")
    partial = client_batch([b"next"])
    info = follower.append_as_follower(fetched + partial[:30])  # a partial last batch is dropped
    assert (info.first_offset, info.last_offset, follower.log_end_offset) == (0, 4, 5)
    assert log_bytes(tmp_path / "follower") == fetched
    assert (
        follower.leader_epoch_cache.entries()
        == leader.leader_epoch_cache.entries()
        == [EpochEntry(3, 0), EpochEntry(4, 2), EpochEntry(6, 3)]
    )
    assert follower.producer_state.last_entry(42).last_seq == 0
    assert follower.append_as_follower(fetched) is None  # nothing new
    leader.close()
    follower.close()


def test_follower_roll_after_an_offset_gap_snapshots_at_the_new_base(tmp_path: Path) -> None:
    def at(base: int, seq: int) -> bytes:
        buf = bytearray(client_batch([b"v" * 40], pid=42, epoch=0, seq=seq))
        struct.pack_into(">qii", buf, 0, base, len(buf) - 12, 1)  # leader's offset and epoch
        return bytes(buf)

    log = open_log(tmp_path, {"segment.bytes": str(len(at(0, 0)) + 1)})
    log.append_as_follower(at(0, 0))
    log.append_as_follower(at(10, 1))  # offsets 1-9 were compacted away on the leader
    assert (log.segment_base_offsets, log.log_end_offset) == ([0, 10], 11)
    assert files(part_dir(tmp_path), ".snapshot") == ["00000000000000000010.snapshot"]
    # pid, epoch, last seq, last offset, delta, timestamp, coordinator epoch, txn first offset
    entries = snapshot_entries(part_dir(tmp_path) / "00000000000000000010.snapshot")
    assert entries == [(42, 0, 0, 0, 0, T0, -1, -1)]
    assert log.producer_state.last_entry(42).last_seq == 1
    log.close()


# -- rolls ---------------------------------------------------------------------------------------


def test_roll_by_segment_bytes_with_a_producer_snapshot_at_each_roll(tmp_path: Path) -> None:
    size = len(client_batch([b"v" * 50, b"w" * 50], pid=42, epoch=0, seq=0))
    log = open_log(tmp_path, {"segment.bytes": str(3 * size + 10)})
    for i in range(10):  # 2 records each: a segment holds 3 batches (3 * size > 2 * size + 10)
        batch = client_batch([b"v" * 50, b"w" * 50], ts=T0 + i, pid=42, epoch=0, seq=2 * i)
        assert len(batch) == size
        log.append_as_leader(batch, 0)
    d = part_dir(tmp_path)
    assert log.segment_base_offsets == [0, 6, 12, 18]
    assert files(d, ".log") == [f"{b:020d}.log" for b in (0, 6, 12, 18)]
    assert [(d / n).stat().st_size for n in files(d, ".log")] == [3 * size] * 3 + [size]
    # Kafka snapshots the producer state at the new segment's base offset when it rolls.
    assert files(d, ".snapshot") == [f"{b:020d}.snapshot" for b in (6, 12, 18)]
    for base in (6, 12, 18):  # pid, epoch, last seq, last offset, delta, ts, coord epoch, txn
        entry = (42, 0, base - 1, base - 1, 1, T0 + base // 2 - 1, -1, -1)
        assert snapshot_entries(d / f"{base:020d}.snapshot") == [entry]
    # The closed segments were fsynced when they rolled: recovery starts at the active one.
    assert log.recovery_point == 18
    log.close()
    assert_indexes_equal_a_rebuild(d, 4096)
    verify_dump(tmp_path)


def test_roll_by_segment_ms_uses_batch_timestamps(tmp_path: Path) -> None:
    log = open_log(tmp_path, {"segment.ms": "1000"})
    for ts in (T0, T0 + 400, T0 + 1000, T0 + 1001, T0 + 1500, T0 + 2002, T0 + 2003):
        log.append_as_leader(client_batch([b"x"], ts=ts), 0)
    # A roll when the incoming max timestamp is more than segment.ms past the segment's first.
    assert log.segment_base_offsets == [0, 3, 5]
    log.close()


def test_roll_by_segment_ms_with_log_append_time_uses_the_clock(tmp_path: Path) -> None:
    clock = Clock()
    overrides = {"segment.ms": "1000", "message.timestamp.type": "LogAppendTime"}
    log = open_log(tmp_path, overrides, clock)
    for now in (T0, T0 + 999, T0 + 1000, T0 + 1001, T0 + 1600, T0 + 2002):
        clock.ms = now
        log.append_as_leader(client_batch([b"x"], ts=5), 0)
    assert log.segment_base_offsets == [0, 3, 5]
    log.close()


# -- retention and DeleteRecords -------------------------------------------------------------------


def one_batch_segments(tmp_path: Path, count: int, overrides: dict, clock: Clock) -> UnifiedLog:
    """``count`` one-record batches, each in its own segment, timestamps T0 + 1000 * i."""
    size = len(client_batch([b"x" * 20]))
    log = open_log(tmp_path, {"segment.bytes": str(size + 1), **overrides}, clock)
    for i in range(count):
        log.append_as_leader(client_batch([b"x" * 20], ts=T0 + 1000 * i), i)
    assert log.segment_base_offsets == list(range(count))
    return log


def test_retention_ms_deletes_old_segments_below_the_hw_never_the_active(tmp_path: Path) -> None:
    clock = Clock(T0 + 5000)
    log = one_batch_segments(tmp_path, 6, {"retention.ms": "2500"}, clock)
    d = part_dir(tmp_path)
    log.update_high_watermark(2)
    assert log.delete_old_segments() == 2  # segments 0..2 are old enough, only 0, 1 below the HW
    assert (log.log_start_offset, log.segment_base_offsets) == (2, [2, 3, 4, 5])
    assert files(d, ".log") == [f"{b:020d}.log" for b in (2, 3, 4, 5)]
    assert files(d, ".index") == [f"{b:020d}.index" for b in (2, 3, 4, 5)]
    assert files(d, ".snapshot") == [f"{b:020d}.snapshot" for b in (2, 3, 4, 5)]
    assert log.leader_epoch_cache.entries()[0] == EpochEntry(2, 2)
    log.update_high_watermark(6)
    assert log.delete_old_segments() == 1 and log.log_start_offset == 3
    assert log.delete_old_segments(T0 + 10**9) == 2  # everything is old: all but the active one
    assert (log.log_start_offset, log.segment_base_offsets) == (5, [5])
    assert files(d, ".log") == ["00000000000000000005.log"]
    with pytest.raises(OffsetOutOfRangeError, match="fetch offset 4 of topic 'orders' partition"):
        log.read(4, 1000)
    assert offsets_and_values(log.read(5, 1000).records) == [(5, b"x" * 20)]
    log.close()


def test_retention_bytes_deletes_exactly_the_excess_segments(tmp_path: Path) -> None:
    size = len(client_batch([b"x" * 20]))
    log = one_batch_segments(tmp_path, 6, {"retention.bytes": str(3 * size + 5)}, Clock())
    log.update_high_watermark(6)
    assert log.size_in_bytes == 6 * size
    # excess 3 * size - 5: deleting a segment may not take the log below retention.bytes
    assert log.delete_old_segments() == 2
    assert (log.log_start_offset, log.segment_base_offsets) == (2, [2, 3, 4, 5])
    assert log.size_in_bytes == 4 * size
    assert log.delete_old_segments() == 0
    log.close()


def test_compacted_topics_keep_old_segments(tmp_path: Path) -> None:
    overrides = {"retention.ms": "1", "retention.bytes": "1", "cleanup.policy": "compact"}
    log = one_batch_segments(tmp_path, 4, overrides, Clock(T0 + 10**9))
    log.update_high_watermark(4)
    assert log.delete_old_segments() == 0 and log.segment_base_offsets == [0, 1, 2, 3]
    log.close()


def test_delete_records_before_moves_log_start_and_deletes_whole_segments(tmp_path: Path) -> None:
    size = len(client_batch([b"a", b"b"]))
    log = open_log(tmp_path, {"segment.bytes": str(size + 1)})
    for i in range(5):  # bases 0, 2, 4, 6, 8
        log.append_as_leader(client_batch([b"a%d" % i, b"b%d" % i]), i)
    log.update_high_watermark(8)
    with pytest.raises(OffsetOutOfRangeError, match=f"{WHERE} before offset 9") as e:
        log.delete_records_before(9)
    assert e.value.code == 1 and log.log_start_offset == 0
    assert log.delete_records_before(5) == 5
    assert (log.log_start_offset, log.segment_base_offsets) == (5, [4, 6, 8])
    assert files(part_dir(tmp_path), ".log") == [f"{b:020d}.log" for b in (4, 6, 8)]
    assert log.leader_epoch_cache.entries() == [
        EpochEntry(2, 5),
        EpochEntry(3, 6),
        EpochEntry(4, 8),
    ]
    assert log.delete_records_before(3) == 5  # never moves back
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 1000)
    # A read at 5 starts with the batch holding it, which begins at 4.
    assert offsets_and_values(log.read(5, 10_000).records)[:2] == [(4, b"a2"), (5, b"b2")]
    assert log.delete_records_before(8) == 8 and log.segment_base_offsets == [8]
    log.close()
    reopened = open_log(tmp_path, log_start_offset=8, high_watermark=8)
    assert (reopened.log_start_offset, reopened.high_watermark) == (8, 8)
    reopened.close()


# -- flushing --------------------------------------------------------------------------------------


def test_flush_messages_moves_the_recovery_point_to_the_log_end(tmp_path: Path) -> None:
    seen: list[int] = []
    log = open_log(
        tmp_path,
        {"flush.messages": "5"},
        on_offsets_changed=lambda lg: seen.append(lg.recovery_point),
    )
    log.append_as_leader(client_batch([b"a", b"b", b"c"]), 0)
    assert (log.recovery_point, seen) == (0, [])
    log.append_as_leader(client_batch([b"d", b"e"]), 0)
    assert log.recovery_point == log.log_end_offset == 5 and seen == [5]
    log.append_as_leader(client_batch([b"f"] * 4), 0)
    assert log.recovery_point == 5
    log.append_as_leader(client_batch([b"g"]), 0)
    assert log.recovery_point == log.log_end_offset == 10
    log.close()


def test_flush_ms_flushes_through_maybe_flush_by_time(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path, {"flush.ms": "1000"}, clock)
    assert log.maybe_flush_by_time(T0 + 5000) is False  # nothing waiting
    log.append_as_leader(client_batch([b"a", b"b"]), 0)
    assert log.maybe_flush_by_time(T0 + 999) is False and log.recovery_point == 0
    clock.ms = T0 + 1000
    assert log.maybe_flush_by_time(T0 + 1000) is True
    assert log.recovery_point == log.log_end_offset == 2
    assert log.maybe_flush_by_time(T0 + 10_000) is False  # flushed, nothing new
    log.append_as_leader(client_batch([b"c"]), 0)
    assert log.maybe_flush_by_time(T0 + 1999) is False
    assert log.maybe_flush_by_time(T0 + 2000) is True and log.recovery_point == 3
    log.close()


# -- recovery --------------------------------------------------------------------------------------

INTERVAL = {"index.interval.bytes": "200"}


def filled_log(tmp_path: Path, batches: int = 47) -> tuple[UnifiedLog, list]:
    """A log of 3-record batches (varied sizes) over several segments, leader epoch 0 for the
    first 10 batches, then 1, then 2; flushed once near the end so that the active segment's
    index files hold entries. Returns the (offset, value) pairs."""
    log = open_log(tmp_path, {"segment.bytes": "2000", **INTERVAL})
    expected = []
    for i in range(batches):
        if i == batches - 2:
            log.flush()
        values = [b"%d-%d-" % (i, j) + b"z" * (i * 7 % 40) for j in range(3)]
        info = log.append_as_leader(client_batch(values, ts=T0 + i), i // 10)
        expected += list(zip(range(info.first_offset, info.last_offset + 1), values, strict=True))
    return log, expected


@pytest.mark.parametrize("tail", ["garbage", "half_batch"])
def test_unclean_open_truncates_a_torn_tail_and_rebuilds_indexes(tmp_path: Path, tail: str) -> None:
    log, expected = filled_log(tmp_path)
    bases, leo = log.segment_base_offsets, log.log_end_offset
    assert len(bases) >= 3
    log.close_without_flush()
    d = part_dir(tmp_path)
    last = d / f"{bases[-1]:020d}.log"
    valid_size = last.stat().st_size
    torn = client_batch([b"torn" * 30])
    with open(last, "ab") as f:
        f.write(b"\x17garbage\x00\xff" * 5 if tail == "garbage" else torn[: len(torn) // 2])
    for base in (bases[-1], bases[0]):  # the active segment's index and a closed one's
        index = d / f"{base:020d}.index"
        assert index.stat().st_size >= 16
        with open(index, "r+b") as f:
            f.truncate(index.stat().st_size - 3)
    with pytest.raises(KafkaLogError, match="corrupt"):
        verify_dump(tmp_path)
    log = open_log(
        tmp_path,
        INTERVAL | {"segment.bytes": "2000"},
        had_clean_shutdown=False,
        recovery_point=bases[-1],
    )
    assert (log.log_end_offset, log.segment_base_offsets) == (leo, bases)
    assert last.stat().st_size == valid_size
    assert log.recovery_point == leo
    verify_dump(tmp_path)
    assert_indexes_equal_a_rebuild(d, 200)
    assert offsets_and_values(log_bytes(tmp_path)) == expected
    assert log.append_as_leader(client_batch([b"after"]), 9).first_offset == leo
    log.close()
    if tail == "garbage":
        return  # the command line once is enough
    cli = subprocess.run(
        [str(KAFKALOG), "dump", "--verify", str(d)], capture_output=True, text=True, timeout=60
    )
    assert cli.returncode == 0, cli.stderr
    assert f"Summary {last}" in cli.stdout


def test_unclean_open_with_a_corrupt_middle_segment_deletes_later_segments(tmp_path: Path) -> None:
    log, expected = filled_log(tmp_path)
    bases = log.segment_base_offsets
    log.close_without_flush()
    d = part_dir(tmp_path)
    middle = d / f"{bases[1]:020d}.log"
    data = bytearray(middle.read_bytes())
    first_size = headers(bytes(data))[1][0]  # the second batch starts here
    second = headers(bytes(data))[1][1]  # and holds this base offset
    data[first_size + 70] ^= 0x01  # a record byte of the second batch: its CRC fails
    middle.write_bytes(bytes(data))
    log = open_log(tmp_path, INTERVAL | {"segment.bytes": "2000"}, had_clean_shutdown=False)
    assert log.segment_base_offsets == bases[:2]
    assert log.log_end_offset == second
    assert middle.stat().st_size == first_size
    assert files(d, ".log") == [f"{b:020d}.log" for b in bases[:2]]
    assert all(int(n[:20]) <= second for n in files(d, ".snapshot"))
    epochs = [EpochEntry(k, 30 * k) for k in range(5)]  # batch i starts at 3 * i
    assert log.leader_epoch_cache.entries() == [e for e in epochs if e.start_offset < second]
    verify_dump(tmp_path)
    assert offsets_and_values(log_bytes(tmp_path)) == expected[:second]
    log.close()


def test_clean_open_rebuilds_corrupt_or_missing_indexes_of_closed_segments(tmp_path: Path) -> None:
    log, expected = filled_log(tmp_path)
    bases = log.segment_base_offsets
    log.close()
    d = part_dir(tmp_path)
    index = d / f"{bases[0]:020d}.index"
    with open(index, "r+b") as f:
        f.truncate(index.stat().st_size - 5)
    (d / f"{bases[1]:020d}.timeindex").unlink()
    log = open_log(tmp_path, INTERVAL | {"segment.bytes": "2000"})
    verify_dump(tmp_path)
    assert_indexes_equal_a_rebuild(d, 200)
    assert offsets_and_values(log_bytes(tmp_path)) == expected
    # Batch i (3 records from offset 3 * i) has timestamp T0 + i: found through the time index.
    found = log.fetch_offset_by_timestamp(T0 + 20)
    assert (found.timestamp, found.offset, found.leader_epoch) == (T0 + 20, 60, 2)
    log.update_high_watermark(log.log_end_offset)
    assert offsets_and_values(log.read(61, 1 << 20).records)[:2] == expected[60:62]
    log.close()


# -- truncation ------------------------------------------------------------------------------------


def txn_log(tmp_path: Path) -> UnifiedLog:
    """Three segments (rolled by segment.ms), an idempotent producer 42, two aborted
    transactions of producer 77 and four leader epochs:

    segment 0:  [0,1] pid 42 e1 | [2,3] pid 42 e1 | [4,5] txn 77 e2
    segment 6:  6 ABORT 77 e2   | [7,8] pid 42 e3 | [9,10] txn 77 e3
    segment 11: 11 ABORT 77 e3  | [12,13] pid 42 e4
    """
    log = open_log(tmp_path, {"segment.ms": "1000"})
    c = AppendOrigin.COORDINATOR

    def idem(seq: int, ts: int, epoch: int) -> None:
        log.append_as_leader(
            client_batch([b"i%d" % seq, b"j%d" % seq], ts=ts, pid=42, epoch=0, seq=seq), epoch
        )

    idem(0, T0, 1)
    idem(2, T0, 1)
    log.append_as_leader(client_batch([b"t0", b"t1"], pid=77, epoch=0, seq=0, txn=True), 2)
    log.append_as_leader(marker(False, 77, ts=T0 + 2000), 2, c)
    idem(4, T0 + 2000, 3)
    log.append_as_leader(
        client_batch([b"t2", b"t3"], ts=T0 + 2000, pid=77, epoch=0, seq=2, txn=True), 3
    )
    log.append_as_leader(marker(False, 77, ts=T0 + 4000), 3, c)
    idem(6, T0 + 4000, 4)
    assert log.segment_base_offsets == [0, 6, 11] and log.log_end_offset == 14
    return log


def txn_index_bytes(log_dir: Path, base: int) -> bytes | None:
    path = part_dir(log_dir) / f"{base:020d}.txnindex"
    return path.read_bytes() if path.exists() else None


def entry(pid: int, first: int, last: int, lso: int) -> bytes:
    return struct.pack(">hqqqq", 0, pid, first, last, lso)


def open_txn_index_files() -> list[str]:
    names = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own descriptor
            names.append(os.readlink(f"/proc/self/fd/{fd}"))
    return sorted(Path(n).name for n in names if n.endswith(".txnindex"))


def test_each_segment_owns_its_txnindex(tmp_path: Path) -> None:
    log = txn_log(tmp_path)
    d = part_dir(tmp_path)
    # the active segment holds the descriptor of the .txnindex it appended to; segment 6 closed
    # its own when the log rolled away from it
    assert open_txn_index_files() == [f"{11:020d}.txnindex"]
    for base, aborted in (
        (0, ()),
        (6, (AbortedTxn(77, 4, 6, 7),)),
        (11, (AbortedTxn(77, 9, 11, 12),)),
    ):
        with LogSegment.open(d, base) as seg:
            assert seg.txn_index.path == d / f"{base:020d}.txnindex"
            assert seg.collect_aborted(0, 14).aborted_txns == aborted
    assert log.collect_aborted_transactions(0, 14) == (
        AbortedTxn(77, 4, 6, 7),
        AbortedTxn(77, 9, 11, 12),
    )
    log.close()
    assert open_txn_index_files() == []


def test_truncate_to_mid_segment_then_across_segments(tmp_path: Path) -> None:
    log = txn_log(tmp_path)
    log.update_high_watermark(14)
    assert txn_index_bytes(tmp_path, 6) == entry(77, 4, 6, 7)
    assert txn_index_bytes(tmp_path, 11) == entry(77, 9, 11, 12)

    assert log.truncate_to(9) is True  # a batch boundary inside segment 6
    assert (log.log_end_offset, log.high_watermark, log.segment_base_offsets) == (9, 9, [0, 6])
    assert files(part_dir(tmp_path), ".log") == [f"{b:020d}.log" for b in (0, 6)]
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries()] == [
        (1, 0),
        (2, 4),
        (3, 7),
    ]
    assert log.producer_state.last_entry(42).last_seq == 5
    assert log.producer_state.ongoing_transactions() == {}
    assert txn_index_bytes(tmp_path, 6) == entry(77, 4, 6, 7)
    assert all(int(n[:20]) <= 9 for n in files(part_dir(tmp_path), ".snapshot"))
    assert [h[1] for h in headers(log_bytes(tmp_path))] == [0, 2, 4, 6, 7]

    assert log.truncate_to(6) is True  # drops the ABORT marker: the transaction is open again
    assert log.log_end_offset == 6 and log.segment_base_offsets == [0]  # segment 6 emptied
    assert log.producer_state.ongoing_transactions() == {77: 4}
    assert log.last_stable_offset == 4
    assert txn_index_bytes(tmp_path, 6) in (None, b"")
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries()] == [(1, 0), (2, 4)]

    assert log.truncate_to(4) is True  # across segments: segment 6 goes, segment 0 is cut
    assert (log.log_end_offset, log.segment_base_offsets) == (4, [0])
    assert log.producer_state.ongoing_transactions() == {}
    assert log.producer_state.last_entry(77) is None
    assert log.producer_state.last_entry(42).last_seq == 3
    assert log.last_stable_offset == log.high_watermark == 4
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries()] == [(1, 0)]
    assert files(part_dir(tmp_path), ".log") == ["00000000000000000000.log"]
    assert log.truncate_to(4) is False and log.truncate_to(10) is False

    # The log goes on from the truncation point with the producer's sequence after it.
    info = log.append_as_leader(client_batch([b"n"], pid=42, epoch=0, seq=4), 5)
    assert (info.first_offset, info.duplicate) == (4, False)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(client_batch([b"m"], pid=42, epoch=0, seq=9), 5)
    verify_dump(tmp_path)
    log.close()


def test_truncate_to_below_the_log_start_offset_moves_it_down(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(10):
        log.append_as_leader(client_batch([b"%d" % i]), 0)
    log.update_high_watermark(10)
    assert log.delete_records_before(7) == 7
    assert log.truncate_to(5) is True
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (5, 5, 5)
    assert log.read(5, 100).records == b""
    log.close()


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = txn_log(tmp_path)
    log.update_high_watermark(14)
    log.truncate_fully_and_start_at(100)
    d = part_dir(tmp_path)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (100, 100, 100)
    assert log.recovery_point == 100 and log.segment_base_offsets == [100]
    assert sorted(p.name for p in d.iterdir() if p.name[0].isdigit()) == [
        "00000000000000000100.index",
        "00000000000000000100.log",
        "00000000000000000100.timeindex",
    ]
    assert log.leader_epoch_cache.entries() == []
    assert (d / "leader-epoch-checkpoint").read_text() == "0\n0\n"
    assert dict(log.producer_state.producers) == {}
    info = log.append_as_leader(client_batch([b"fresh"]), 9)
    assert info.first_offset == 100 and log.leader_epoch_cache.entries() == [EpochEntry(9, 100)]
    log.close()
    log = open_log(tmp_path, high_watermark=101, log_start_offset=100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 101, 101)
    assert offsets_and_values(log.read(100, 1000).records) == [(100, b"fresh")]
    log.close()


# -- reads -----------------------------------------------------------------------------------------


def test_read_bounds_by_isolation_and_offset_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(client_batch([b"a", b"b"]), 0)  # 0-1
    log.append_as_leader(client_batch([b"c", b"d"]), 0)  # 2-3
    log.append_as_leader(client_batch([b"t", b"u"], pid=77, epoch=0, seq=0, txn=True), 0)  # 4-5
    log.append_as_leader(client_batch([b"e", b"f"]), 0)  # 6-7
    log.update_high_watermark(6)
    data = log_bytes(tmp_path)
    starts = [h[0] for h in headers(data)]
    leo_read = log.read(0, 1 << 20, FetchIsolation.LOG_END)
    hw_read = log.read(0, 1 << 20, FetchIsolation.HIGH_WATERMARK)
    committed = log.read(0, 1 << 20, FetchIsolation.TXN_COMMITTED)
    assert leo_read.records == data
    assert hw_read.records == data[: starts[3]]
    assert committed.records == data[: starts[2]]
    assert (leo_read.aborted_transactions, committed.aborted_transactions) == (None, ())
    assert (committed.high_watermark, committed.last_stable_offset) == (6, 4)
    assert (committed.log_start_offset, committed.log_end_offset) == (0, 8)
    # A read starting inside a batch returns that whole batch.
    assert (
        log.read(3, 1 << 20, FetchIsolation.HIGH_WATERMARK).records == data[starts[1] : starts[3]]
    )
    for offset, isolation in (
        (6, FetchIsolation.HIGH_WATERMARK),
        (8, FetchIsolation.LOG_END),
        (4, FetchIsolation.TXN_COMMITTED),
        (7, FetchIsolation.LOG_END),
    ):
        expected = b"" if offset != 7 else data[starts[3] :]
        assert log.read(offset, 1 << 20, isolation).records == expected
    with pytest.raises(OffsetOutOfRangeError, match=f"fetch offset 9 of {WHERE}") as e:
        log.read(9, 1000)
    assert e.value.code == 1
    log.delete_records_before(2)
    with pytest.raises(OffsetOutOfRangeError, match=r"outside \[2, 8\]"):
        log.read(1, 1000)
    log.close()
    with pytest.raises(BrokerClosedError, match="orders"):
        log.read(2, 1000)


def test_read_kip74_min_one_message_against_max_bytes(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(client_batch([b"x" * 300]), 0)
    log.append_as_leader(client_batch([b"y" * 300]), 0)
    log.update_high_watermark(2)
    data = log_bytes(tmp_path)
    first = headers(data)[1][0]
    whole = log.read(0, 10, min_one_message=True)
    assert (whole.records, whole.first_entry_incomplete) == (data[:first], False)
    cut = log.read(0, 10, min_one_message=False)
    assert (cut.records, cut.first_entry_incomplete) == (data[:10], True)
    more = log.read(0, first + 5, min_one_message=False)
    # the batch the limit cut is not sent (Kafka sends its first bytes, which clients drop)
    assert (more.records, more.first_entry_incomplete) == (data[:first], False)
    assert offsets_and_values(more.records) == [(0, b"x" * 300)]
    assert log.read(1, 10, min_one_message=True).records == data[first:]
    log.close()


# -- transactions ----------------------------------------------------------------------------------


def test_a_committed_read_bounds_its_aborted_list_by_its_last_whole_batch(tmp_path: Path) -> None:
    """The bound is found by a walk from the last indexed batch before the read's end (every
    batch indexed here): a read cut before an abort's marker gets the same aborted list as a
    walk of the whole read would give, at every byte limit."""
    log = open_log(tmp_path, {"index.interval.bytes": 1})
    c = AppendOrigin.COORDINATOR
    for i in range(6):  # 0-5: data; producer 77's transaction from 2 aborted at 7
        log.append_as_leader(client_batch([b"%d" % i], pid=10 + i, epoch=0, seq=0), 0)
    log.append_as_leader(client_batch([b"t"], pid=77, epoch=0, seq=0, txn=True), 0)  # 6
    log.append_as_leader(marker(False, 77), 0, c)  # 7
    log.update_high_watermark(8)
    whole = log.read(0, 1 << 20, FetchIsolation.TXN_COMMITTED)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in whole.aborted_transactions] == [
        (77, 6, 7)
    ]
    seen = set()
    for limit in range(headers(whole.records)[2][0], len(whole.records) + 1, 7):
        read = log.read(0, limit, FetchIsolation.TXN_COMMITTED)
        last = [b.last_offset for b in iter_batches(read.records, tail="stop")][-1]
        expected = whole.aborted_transactions if last >= 6 else ()
        assert read.aborted_transactions == expected, limit
        seen.add(bool(expected))
    assert seen == {False, True}
    log.close()


def test_transactions_lso_aborted_list_and_txnindex(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    c = AppendOrigin.COORDINATOR
    log.append_as_leader(client_batch([b"a", b"b"], pid=77, epoch=0, seq=0, txn=True), 0)  # 0-1
    log.append_as_leader(client_batch([b"c"], pid=88, epoch=0, seq=0, txn=True), 0)  # 2
    log.update_high_watermark(3)
    assert log.last_stable_offset == 0
    assert log.append_as_leader(marker(False, 77), 0, c).first_offset == 3
    log.append_as_leader(client_batch([b"d"], pid=99, epoch=0, seq=0), 0)  # 4
    log.update_high_watermark(5)
    assert log.last_stable_offset == 2  # producer 88 is still open
    # The LSO stored for the aborted transaction: producer 88's open transaction at 2.
    assert txn_index_bytes(tmp_path, 0) == entry(77, 0, 3, 2)
    assert log.append_as_leader(marker(True, 88), 0, c).first_offset == 5
    log.append_as_leader(client_batch([b"e"], pid=77, epoch=0, seq=2, txn=True), 0)  # 6
    log.update_high_watermark(7)
    assert log.last_stable_offset == 6
    assert txn_index_bytes(tmp_path, 0) == entry(77, 0, 3, 2)  # commits are not indexed
    read = log.read(0, 1 << 20, FetchIsolation.TXN_COMMITTED)
    assert read.aborted_transactions == (AbortedTxn(77, 0, 3, 2),)
    assert [h[1] for h in headers(read.records)] == [0, 2, 3, 4, 5]
    assert log.read(4, 1 << 20, FetchIsolation.TXN_COMMITTED).aborted_transactions == ()
    assert log.collect_aborted_transactions(0, 7) == (AbortedTxn(77, 0, 3, 2),)

    log.close_without_flush()  # recovery rebuilds the .txnindex and the LSO
    (part_dir(tmp_path) / "00000000000000000000.txnindex").unlink()
    log = open_log(tmp_path, had_clean_shutdown=False, high_watermark=7)
    assert txn_index_bytes(tmp_path, 0) == entry(77, 0, 3, 2)
    assert log.last_stable_offset == 6
    assert log.producer_state.ongoing_transactions() == {77: 6}
    log.close()


def test_recovery_rebuilds_txnindex_of_every_recovered_segment(tmp_path: Path) -> None:
    c = AppendOrigin.COORDINATOR
    log = open_log(tmp_path, {"segment.ms": "1000"})
    log.append_as_leader(client_batch([b"a", b"b"], pid=77, epoch=0, seq=0, txn=True), 0)
    log.append_as_leader(marker(False, 77), 0, c)  # 2
    log.close()  # a clean close snapshots the producer state at 3
    log = open_log(tmp_path, {"segment.ms": "1000"})
    log.append_as_leader(client_batch([b"c"], ts=T0 + 5000), 0)  # 3: rolls
    log.append_as_leader(client_batch([b"d"], ts=T0 + 5000, pid=77, epoch=0, seq=2, txn=True), 0)
    log.append_as_leader(marker(False, 77, ts=T0 + 5000), 0, c)  # 5
    assert log.segment_base_offsets == [0, 3]
    before = txn_index_bytes(tmp_path, 0), txn_index_bytes(tmp_path, 3)
    assert before == (entry(77, 0, 2, 3), entry(77, 4, 5, 6))
    log.close_without_flush()
    for base in (0, 3):
        (part_dir(tmp_path) / f"{base:020d}.txnindex").unlink()
    log = open_log(tmp_path, {"segment.ms": "1000"}, had_clean_shutdown=False, recovery_point=0)
    assert (txn_index_bytes(tmp_path, 0), txn_index_bytes(tmp_path, 3)) == before
    assert log.collect_aborted_transactions(0, 6) == (
        AbortedTxn(77, 0, 2, 3),
        AbortedTxn(77, 4, 5, 6),
    )
    log.close()


def test_unclean_open_restores_leader_epochs_of_recovered_batches(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(client_batch([b"a"]), 3)
    log.close_without_flush()
    d = part_dir(tmp_path)
    # A crash between writing a batch of a new epoch and writing the epoch checkpoint.
    batch = bytearray(client_batch([b"b"]))
    struct.pack_into(">qii", batch, 0, 1, len(batch) - 12, 4)
    with open(d / "00000000000000000000.log", "ab") as f:
        f.write(batch)
    assert (d / "leader-epoch-checkpoint").read_text() == "0\n1\n3 0\n"
    log = open_log(tmp_path, had_clean_shutdown=False)
    assert log.log_end_offset == 2
    assert log.leader_epoch_cache.entries() == [EpochEntry(3, 0), EpochEntry(4, 1)]
    assert (d / "leader-epoch-checkpoint").read_text() == "0\n2\n3 0\n4 1\n"
    log.close()
