"""Committing offsets of a consumer group into a log dir's ``__consumer_offsets``, as Kafka's
group coordinator writes an OffsetCommit: what a streaming query with
``commitOffsetsToGroup=<group id>`` publishes (kafka_stream_reader.py), so that ``kafkalog
groups describe --log-dir`` and Kafka's lag tools show its lag.

Records (group_metadata_record.py, Kafka's formats): one per partition, key ``OffsetCommitKey``
v1 (group, topic, partition), value ``OffsetCommitValue`` v3 (offset, leader epoch -1, metadata
"", commit timestamp = now), as Kafka 2.1+ writes a commit without an expire timestamp; record
timestamps = the commit timestamp (CreateTime), no compression, no producer id. A commit's
records go to the group's partition (``partition_for(group id, partition count)``, where
group_offsets.py's ``find_group`` finds the group), in one batch as Kafka writes one OffsetCommit
request, split into batches of at most ``MAX_BATCH_BYTES`` when it is larger (the topic's
``max.message.bytes`` default is 1 MiB). No group metadata record is written: like a consumer
that assigns partitions itself and commits, the group has offsets and no members (``Empty`` in
``kafkalog groups describe``).

Appending (the datasource writer's path, the log dir's write port
broker_embedded/storage/log_dir_produce_sink.py): the batches are staged beside the log dir and
appended by :meth:`LogDirSink.commit`, which takes the log dir's ``.lock`` (waiting while
another kafkalog write job or compaction job holds it briefly), appends as the partition's
leader, flushes and publishes the new high watermark atomically. ``__consumer_offsets`` is
created first when the log dir has no such topic, by an embedded :class:`Broker` opened for that
moment (internal_topics.py's ``ensure_topic``: Kafka's settings,
``offsets.topic.num.partitions`` 50, compacted; opening a broker also aborts transactions whose
producer is gone, as every broker start does).

A log dir owned by another process (a running ``kafkalog serve``, a broker of an application)
cannot take a second writer: :class:`GroupOffsetsError` naming the option and the owner (commit
through that server with ``kafka.bootstrap.servers`` instead). :func:`check_can_commit` tells it
before a query starts. Thread safety: one commit at a time per caller; concurrent commits to one
log dir are serialized by its lock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

from broker_embedded.common.producer_record import ProducerRecord, build_batch
from broker_embedded.coordinator.coordinator_partition import GROUP_METADATA_TOPIC
from broker_embedded.coordinator.group_metadata_record import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_value,
)
from broker_embedded.errors import LogDirLockedError
from broker_embedded.storage.log_dir_fetch_source import LogDirSource
from broker_embedded.storage.log_dir_produce_sink import (
    UNKNOWN_HOLDER,
    LogDirSink,
    held_by_a_commit,
)
from broker_embedded.storage.topic_partition import TopicPartition
from datasource.errors import GroupOffsetsError
from datasource.group_offsets import find_group

OPTION = "commitOffsetsToGroup"
MAX_BATCH_BYTES = 512 << 10  # keys + values of one batch
LOCK_TIMEOUT_S = 60.0
T = TypeVar("T")


def offset_commit_records(
    group_id: str, offsets: Mapping[TopicPartition, int], now_ms: int
) -> list[ProducerRecord]:
    """The records of one commit, by topic and partition (module docstring)."""
    return [
        ProducerRecord(
            encode_value(OffsetCommitValue(offsets[tp], "", now_ms, leader_epoch=-1, version=3)),
            encode_key(OffsetCommitKey(group_id, tp.topic, tp.partition, version=1)),
            timestamp=now_ms,
        )
        for tp in sorted(offsets)
    ]


def _batches(records: list[ProducerRecord], now_ms: int) -> Iterator[tuple[bytes, int]]:
    """``records`` in v2 batches of at most ``MAX_BATCH_BYTES`` of keys and values each (or one
    record), with their record counts."""
    chunk: list[ProducerRecord] = []
    size = 0
    for r in records:
        n = len(r.key or b"") + len(r.value or b"")
        if chunk and size + n > MAX_BATCH_BYTES:
            yield build_batch(chunk, now_ms=now_ms), len(chunk)
            chunk, size = [], 0
        chunk.append(r)
        size += n
    if chunk:
        yield build_batch(chunk, now_ms=now_ms), len(chunk)


def _owned(log_dir: str | Path, group_id: str, holder: str) -> GroupOffsetsError:
    return GroupOffsetsError(
        f"option {OPTION}={group_id!r}: cannot commit the query's offsets to log dir {log_dir}: "
        f"another process owns it ({holder}), and a log dir takes one writer. Read through "
        f"that server (kafka.bootstrap.servers), which commits over the protocol, or remove the "
        f"option {OPTION}"
    )


def check_can_commit(log_dir: str | Path, group_id: str) -> None:
    """:class:`GroupOffsetsError` when a process other than a short kafkalog commit owns
    ``log_dir`` (a running broker)."""
    sink = LogDirSink(log_dir)
    if sink.locked():
        holder = sink.lock_holder()
        if not held_by_a_commit(holder) and holder != UNKNOWN_HOLDER:
            raise _owned(log_dir, group_id, holder)


def _waiting(log_dir: str | Path, group_id: str, attempt: Callable[[], T]) -> T:
    """``attempt()``, retried while a short kafkalog commit holds the log dir's lock (up to
    ``LOCK_TIMEOUT_S``); any other owner is a :class:`GroupOffsetsError` naming it."""
    deadline = time.monotonic() + LOCK_TIMEOUT_S
    delay = 0.05
    while True:
        try:
            return attempt()
        except LogDirLockedError:
            holder = LogDirSink(log_dir).lock_holder()
            brief = held_by_a_commit(holder) or holder == UNKNOWN_HOLDER
            if not brief or time.monotonic() >= deadline:
                raise _owned(log_dir, group_id, holder) from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def ensure_offsets_topic(log_dir: str | Path, group_id: str) -> None:
    """Create ``__consumer_offsets`` in ``log_dir`` unless it is there (module docstring)."""
    if LogDirSink(log_dir).has_topic(GROUP_METADATA_TOPIC):
        return  # else a broker opens the log dir first (a dir Kafka wrote: it sets the HWs)
    from broker_embedded.broker import Broker
    from broker_embedded.coordinator.internal_topics import ensure_topic, offsets_topic

    def create() -> None:
        with Broker(log_dir) as broker:
            live = broker.controller.live_brokers()
            ensure_topic(broker.controller, offsets_topic(broker.config), live)

    _waiting(log_dir, group_id, create)


def _find(log_dir: str | Path, group_id: str) -> TopicPartition:
    source = LogDirSource(str(Path(log_dir).resolve())).open()
    try:
        return find_group(source, group_id)[0]
    finally:
        source.close()


def commit_group_offsets(
    log_dir: str | Path,
    group_id: str,
    offsets: Mapping[TopicPartition, int],
    *,
    now_ms: int | None = None,
    partition: TopicPartition | None = None,
) -> TopicPartition:
    """Commit ``offsets`` (the next offset to read, per partition) as group ``group_id``'s
    committed offsets in ``log_dir``; the ``__consumer_offsets`` partition written to (where
    the group is, else where a new group goes: group_offsets.py's ``find_group``). Nothing is
    written for no offsets. Visible to readers all at once, or not at all. ``partition``: the
    one a previous call returned for this group and log dir (saves looking for the group)."""
    if not offsets:
        return partition or _find(log_dir, group_id)
    ensure_offsets_topic(log_dir, group_id)
    tp = partition or _find(log_dir, group_id)  # with the topic's partition count as created
    now = int(time.time() * 1000) if now_ms is None else now_ms
    job_id = f"group-commit-{uuid.uuid4().hex[:16]}"
    sink = LogDirSink(log_dir)
    appender = sink.appender(job_id, "group")
    try:
        for batch, count in _batches(offset_commit_records(group_id, offsets, now), now):
            appender.append_batch(tp.topic, tp.partition, batch, records=count)
        files = appender.finish()
        _waiting(
            log_dir,
            group_id,
            lambda: sink.commit(job_id, files, lock_timeout_s=LOCK_TIMEOUT_S),
        )
    except BaseException:
        appender.discard()
        sink.abort(job_id)
        raise
    return tp
