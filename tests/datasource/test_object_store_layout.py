"""Stored log dirs that are not a plain mirror, on a real S3 server (SeaweedFS, the session's
``s3``): a segment whose last batches the cleaner removed, a gap or an overlap between stored
segments, a ``.log`` of another size than its manifest says, stale segments ``--replace`` must
delete, a stale last stable offset, and segments a broker deletes during an upload. Each reads
as the local log dir does, or fails naming bucket, key and offsets."""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from broker_embedded.errors import KafkaLogError
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.log_dir_fetch_source import LogDirSource
from broker_embedded.storage.log_dir_lock import LogDirLock
from broker_embedded.storage.log_dir_upload import LAST_STABLE_OFFSET_CHECKPOINT, upload_log_dir
from broker_embedded.storage.object_store import ObjectChangedError, StoreLocation
from broker_embedded.storage.object_store_fetch_source import (
    ObjectStoreSource,
    UnsupportedOnObjectStoreError,
)
from broker_embedded.storage.offset_checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker_embedded.storage.partition_metadata import PartitionMetadataFile, new_topic_id
from broker_embedded.storage.remote_log_segment_metadata import RemoteLogSegmentMetadata, StoredFile
from broker_embedded.storage.topic_partition import TopicPartition
from datasource.kafka_input_partition import KafkaInputPartition
from datasource.offset_range_reader import read_offset_range
from tests.datasource.test_object_store_read import batches
from tests.seaweedfs import S3Server

TP = TopicPartition("events", 0)
SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")


@pytest.fixture
def log_dir(source_log_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(source_log_dir, tmp_path / "logdir"))


def store_of(s3: S3Server, name: str) -> StoreLocation:
    return StoreLocation(f"s3://{s3.new_bucket(name)}/p", s3.settings)


def bases_of(log_dir: Path, tp: TopicPartition = TP) -> list[int]:
    return sorted(int(p.stem) for p in (log_dir / tp.dir_name).glob("*.log"))


def rows(source, tp: TopicPartition = TP) -> int:
    """The rows the executor's reader gives of ``tp`` from its log start to its end."""
    opened = source.open()
    start, end = opened.list_offset(tp, -2, UNCOMMITTED), opened.list_offset(tp, -1, UNCOMMITTED)
    part = KafkaInputPartition(source, tp.topic, tp.partition, start, end, fetch_bytes=1 << 12)
    return sum(b.num_rows for b in read_offset_range(part))


UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED


def drop_last_batch(directory: Path, base: int) -> tuple[int, int]:
    """Remove the last batch of segment ``base`` (what the cleaner leaves when a batch of a
    non-idempotent producer is compacted away), its index entries with it; its offsets."""
    stem = directory / f"{base:020d}"
    data = stem.with_suffix(".log").read_bytes()
    last = list(iter_batches(data))[-1]
    stem.with_suffix(".log").write_bytes(data[: last.position])
    index = stem.with_suffix(".index").read_bytes()
    entries = (index[i : i + 8] for i in range(0, len(index), 8))
    stem.with_suffix(".index").write_bytes(
        b"".join(e for e in entries if int.from_bytes(e[4:], "big") < last.position)
    )
    times = stem.with_suffix(".timeindex").read_bytes()
    entries = (times[i : i + 12] for i in range(0, len(times), 12))
    stem.with_suffix(".timeindex").write_bytes(
        b"".join(e for e in entries if base + int.from_bytes(e[8:], "big") < last.base_offset)
    )
    return last.base_offset, last.last_offset


def test_a_segment_whose_last_batch_was_compacted_away_reads_on_into_the_next(
    s3: S3Server, log_dir: Path, source_log_dir: Path
) -> None:
    bases = bases_of(log_dir)
    gone = drop_last_batch(log_dir / TP.dir_name, bases[0])
    location = store_of(s3, "tail")
    upload_log_dir(log_dir, location.open())
    local, remote = LogDirSource(str(log_dir)), ObjectStoreSource(location)
    fetched = remote.open().fetch(TP, gone[0], 1 << 20, UNCOMMITTED)
    assert next(iter_batches(fetched.records)).base_offset == bases[1]  # not nothing
    expected = batches(local.open(), TP, 1 << 20)
    assert gone not in [b[:2] for b in expected] and len(expected) > 10
    assert batches(remote.open(), TP, 1 << 20) == expected
    whole = rows(LogDirSource(str(source_log_dir)))
    assert rows(remote) == rows(local) == whole - (gone[1] - gone[0] + 1) and whole > 600
    key = f"{TP.dir_name}/{RemoteLogSegmentMetadata.name_of(0)}"
    manifest = RemoteLogSegmentMetadata.from_json(location.open().read(key), key)
    assert manifest.next_offset == bases[1]  # Kafka's endOffset + 1, not past the last batch
    # an older kafkalog's manifest ended at the last batch: a gap, repaired by a rerun
    location.open().write(key, replace(manifest, next_offset=gone[0]).to_json())
    with pytest.raises(KafkaLogError, match=rf"offsets \[{gone[0]}, {bases[1]}\) of events-0"):
        ObjectStoreSource(location).open().partition(TP)
    assert upload_log_dir(log_dir, location.open()).repaired == ("events-0/0",)
    assert batches(remote.open(), TP, 1 << 20) == expected


def test_a_gap_between_stored_segments_is_an_error_naming_both_keys(s3, log_dir) -> None:
    bases = bases_of(log_dir)
    location = store_of(s3, "gap")
    upload_log_dir(log_dir, location.open())
    store = location.open()
    for name in sorted(store.list(TP.dir_name + "/"), key=lambda n: "segment.json" not in n):
        if name.startswith(f"{TP.dir_name}/{bases[1]:020d}."):
            store.delete(name)  # the manifest first: the segment is gone from the store
    key = f"p/{TP.dir_name}/{{:020d}}.segment.json"
    bucket = location.bucket
    with pytest.raises(KafkaLogError) as e:
        ObjectStoreSource(location).open().partition(TP)
    assert str(e.value).startswith(
        f"offsets [{bases[1]}, {bases[2]}) of events-0 are not in the store: bucket {bucket!r} "
        f"key {key.format(bases[0])!r} ends at {bases[1]}, and the next segment, bucket "
        f"{bucket!r} key {key.format(bases[2])!r}, starts at {bases[2]}"
    )


def test_an_overlapping_segment_is_read_from_the_previous_one_s_end(
    s3, log_dir, source_log_dir
) -> None:
    """A segment based below the previous one's next offset (a new leader copied a segment
    straddling the store's end): each offset read once, from the segment before first."""
    bases = bases_of(log_dir)
    location = store_of(s3, "overlap")
    upload_log_dir(log_dir, location.open())
    store = location.open()
    d = log_dir / TP.dir_name
    first = (d / f"{bases[0]:020d}.log").read_bytes()
    middle = list(iter_batches(first))[len(list(iter_batches(first))) // 2]
    data = first[middle.position :] + (d / f"{bases[1]:020d}.log").read_bytes()
    for name in sorted(store.list(TP.dir_name + "/"), key=lambda n: "segment.json" not in n):
        if name.startswith(f"{TP.dir_name}/{bases[1]:020d}."):
            store.delete(name)
    stem = f"{middle.base_offset:020d}"
    files = []
    for suffix, content in ((".log", data), (".index", b""), (".timeindex", b"")):
        store.write(f"{TP.dir_name}/{stem}{suffix}", content)
        files.append(StoredFile(stem + suffix, len(content), hashlib.sha256(content).hexdigest()))
    manifest = RemoteLogSegmentMetadata(middle.base_offset, bases[2], len(data), tuple(files))
    store.write(f"{TP.dir_name}/{stem}.segment.json", manifest.to_json())
    remote = ObjectStoreSource(location)
    p = remote.open().partition(TP)
    assert p.bases[:3] == (0, middle.base_offset, bases[2])
    assert p.starts[:3] == (0, bases[1], bases[2])
    local = LogDirSource(str(log_dir))
    assert batches(remote.open(), TP, 1 << 20) == batches(local.open(), TP, 1 << 20)
    assert batches(remote.open(), TP, 1 << 12) == batches(local.open(), TP, 1 << 12)
    assert rows(remote) == rows(local) == rows(LogDirSource(str(source_log_dir))) > 600


def test_a_log_of_another_size_than_its_manifest_says_is_named(s3, log_dir) -> None:
    bases = bases_of(log_dir)
    location = store_of(s3, "size")
    upload_log_dir(log_dir, location.open())
    store = location.open()
    name = f"{TP.dir_name}/{bases[1]:020d}.log"
    data = (log_dir / name).read_bytes()
    for changed in (data[:-100], data + data[:100]):
        store.write(name, changed)
        with pytest.raises(ObjectChangedError) as e:
            ObjectStoreSource(location).open().partition(TP)
        assert str(e.value).startswith(
            f"bucket {location.bucket!r} key 'p/{name}' holds {len(changed)} bytes, but its "
            f"manifest ({TP.dir_name}/{bases[1]:020d}.segment.json) says {len(data)}: "
        )


def merge_first_two(log_dir: Path) -> list[int]:
    """Segments 0 and 1 of events-0 as one (the cleaner merges small segments); the bases."""
    d = log_dir / TP.dir_name
    bases = bases_of(log_dir)
    merged = b"".join((d / f"{b:020d}.log").read_bytes() for b in bases[:2])
    for suffix in SUFFIXES:
        (d / f"{bases[1]:020d}{suffix}").unlink(missing_ok=True)
    (d / f"{bases[0]:020d}.log").write_bytes(merged)
    (d / f"{bases[0]:020d}.index").write_bytes(b"")  # a sparse index may be empty
    (d / f"{bases[0]:020d}.timeindex").write_bytes(b"")
    return bases


def stored_segments(location: StoreLocation, tp: TopicPartition = TP) -> list[int]:
    names = location.open().list(tp.dir_name + "/")
    found = (RemoteLogSegmentMetadata.base_offset_of(n.split("/")[1]) for n in names)
    return sorted(b for b in found if b is not None)


def test_replace_deletes_the_stored_segments_the_log_dir_no_longer_has(s3, log_dir) -> None:
    location = store_of(s3, "replace")
    upload_log_dir(log_dir, location.open())
    bases = merge_first_two(log_dir)
    orphan = f"{TP.dir_name}/{bases[1] + 1:020d}.log"  # a run killed between its deletions
    location.open().write(orphan, b"left")
    run = upload_log_dir(log_dir, location.open(), replace=True)
    assert run.repaired == ("events-0/0",)
    assert run.deleted == (f"events-0/{bases[1]}", f"events-0/{bases[1] + 1}")
    assert stored_segments(location) == [0, *bases[2:]]
    assert not [
        n
        for n in location.open().list(TP.dir_name + "/")
        if n.startswith(f"{TP.dir_name}/{bases[1]:020d}.")
    ]
    local, remote = LogDirSource(str(log_dir)), ObjectStoreSource(location)
    assert batches(remote.open(), TP, 1 << 20) == batches(local.open(), TP, 1 << 20)
    # the topic deleted and created again, with fewer segments: the old topic's later go too
    d = log_dir / TP.dir_name
    for suffix in SUFFIXES:
        (d / f"{bases[-1]:020d}{suffix}").unlink(missing_ok=True)
    (d / "partition.metadata").unlink()
    PartitionMetadataFile(d / "partition.metadata").write(new_topic_id())
    run = upload_log_dir(log_dir, location.open(), replace=True)
    assert run.deleted == (f"events-0/{bases[-1]}",)
    assert stored_segments(location) == [0, *bases[2:-1]]
    assert batches(remote.open(), TP, 1 << 20) == batches(local.open(), TP, 1 << 20)


def test_a_held_log_dir_s_upload_deletes_the_stored_last_stable_offsets(s3, log_dir) -> None:
    location = store_of(s3, "lso")
    upload_log_dir(log_dir, location.open())
    txn = TopicPartition("txn", 0)
    assert ObjectStoreSource(location).open().list_offset(txn, -1, COMMITTED) is not None
    with LogDirLock.acquire(log_dir, "a running broker"):
        upload_log_dir(log_dir, location.open())
    assert LAST_STABLE_OFFSET_CHECKPOINT not in location.open().list()
    with pytest.raises(UnsupportedOnObjectStoreError, match="last stable offset of txn-0"):
        ObjectStoreSource(location).open().list_offset(txn, -1, COMMITTED)


COMMITTED = IsolationLevel.READ_COMMITTED


def test_segments_retention_deletes_during_an_upload_are_skipped(s3, log_dir) -> None:
    """A broker holds the log dir; once the first segment of events-1 is stored, its retention
    deletes that segment and the next one and moves the log start offset past them."""
    tp = TopicPartition("events", 1)
    bases = bases_of(log_dir, tp)
    d = log_dir / tp.dir_name

    def retention(line: str) -> None:
        if line == f"uploaded events-1/{bases[0]}":
            for base in bases[:2]:
                for suffix in SUFFIXES:
                    (d / f"{base:020d}{suffix}").unlink(missing_ok=True)
            checkpoint = OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT)
            starts = checkpoint.parse((log_dir / LOG_START_OFFSET_CHECKPOINT).read_bytes())
            starts[tp] = bases[2]
            (log_dir / LOG_START_OFFSET_CHECKPOINT).write_bytes(checkpoint.format(starts))

    location = store_of(s3, "retention")
    with LogDirLock.acquire(log_dir, "a running broker"):
        run = upload_log_dir(log_dir, location.open(), progress=retention)
    assert run.gone == (f"events-1/{bases[1]}",)
    assert stored_segments(location, tp) == [bases[0], *bases[2:-1]]
    assert not [
        n
        for n in location.open().list(tp.dir_name + "/")
        if n.startswith(f"{tp.dir_name}/{bases[1]:020d}.")
    ]
    remote = ObjectStoreSource(location).open()
    p = remote.partition(tp)
    assert (p.log_start_offset, p.bases[0], p.high_watermark) == (bases[2], bases[2], bases[-1])
    local = batches(LogDirSource(str(log_dir)).open(), tp, 1 << 20)
    assert batches(remote, tp, 1 << 20) == [b for b in local if b[1] < bases[-1]]
