"""A segment's tail staged for its copy to remote storage: a new leader whose segment holds the
store's end (replicas roll at different offsets, so the store may end inside one of this
broker's segments) copies only the batches from there, as a segment of their own, so that the
store's segments never overlap (remote_log_manager.py).

The staged segment lives in ``<log dir>/remote-log-staging/<topic>-<partition>/``, emptied
before each copy and after it (and at the manager's start, for a copy a kill interrupted): its
``.log`` the original's bytes from the first batch at the store's end, its offset and time
indexes rebuilt from them, its ``.txnindex`` the original's entries whose abort marker lies at
or after that offset, and the partition's ``partition.metadata``. Only the remote log manager's
thread stages.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from broker_embedded.errors import KafkaLogError
from broker_embedded.storage.log_file_utils import LOG_SUFFIX, segment_file_stem
from broker_embedded.storage.log_segment import LogSegment
from broker_embedded.storage.offset_index import INDEX_SUFFIX
from broker_embedded.storage.partition_metadata import PARTITION_METADATA_FILE
from broker_embedded.storage.time_index import TIME_INDEX_SUFFIX
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.transaction_index import FILE_SUFFIX as TXN_INDEX_SUFFIX
from broker_embedded.storage.transaction_index import aborted_txns_of

# in the log dir: a segment's tail staged for its copy (emptied before and after each)
REMOTE_STAGING_DIR = "remote-log-staging"


def stage_tail(log_dir: Path, tp: TopicPartition, base: int, start: int, interval: int) -> Path:
    """Stage the batches of segment ``base`` from offset ``start`` (a batch's base offset) on
    as a segment based at ``start`` in ``<log dir>/remote-log-staging/<topic>-<partition>/``
    (emptied first): its ``.log`` the tail of the original's, its indexes rebuilt from it with
    the topic's ``index.interval.bytes``, its ``.txnindex`` the original's entries whose abort
    marker lies at or after ``start``, and the partition's ``partition.metadata``. Returns the
    staging root (the upload's log dir)."""
    source = log_dir / tp.dir_name
    root = log_dir / REMOTE_STAGING_DIR
    shutil.rmtree(root, ignore_errors=True)
    staged = root / tp.dir_name
    staged.mkdir(parents=True)
    old, new = segment_file_stem(base), segment_file_stem(start)
    with LogSegment.open(source, base) as seg:
        position = seg.position_of(start)
    original = source / (old + LOG_SUFFIX)
    with open(original, "rb") as f, open(staged / (new + LOG_SUFFIX), "wb") as out:
        f.seek(position)
        if f.read(8) != start.to_bytes(8, "big"):
            raise KafkaLogError(
                f"{original}: no batch starts at offset {start} (position "
                f"{position}): its tail cannot be copied"
            )
        f.seek(position)
        shutil.copyfileobj(f, out, 8 << 20)
    with LogSegment.open(staged, start, index_interval_bytes=interval) as seg:
        (staged / (new + INDEX_SUFFIX)).write_bytes(seg.offset_index.to_bytes())
        (staged / (new + TIME_INDEX_SUFFIX)).write_bytes(seg.time_index.to_bytes())
    txns = source / (old + TXN_INDEX_SUFFIX)
    if txns.is_file():
        kept = [a for a in aborted_txns_of(txns.read_bytes(), str(txns)) if a.last_offset >= start]
        if kept:
            (staged / (new + TXN_INDEX_SUFFIX)).write_bytes(b"".join(a.to_bytes() for a in kept))
    metadata = source / PARTITION_METADATA_FILE
    if metadata.is_file():
        shutil.copyfile(metadata, staged / PARTITION_METADATA_FILE)
    return root
