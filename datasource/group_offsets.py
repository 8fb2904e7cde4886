"""A consumer group's committed offsets for ``startingOffsets=group:<group id>``: read from a
log dir's ``__consumer_offsets`` (:func:`read_committed_offsets`), or asked of a cluster's group
coordinator (OffsetFetch, with ``kafka.bootstrap.servers``), then turned into starting
offsets (:func:`group_starting_offsets`, which takes the committed offsets however they were
obtained).

Reading, Kafka's rules: the group lives in partition ``partition_for(group id, N)`` of
``__consumer_offsets`` (coordinator_partition.py: Java's ``String.hashCode``), where ``N`` is the
topic's partition count: the one the log dir's ``kafkalog-topics.json`` declares, else (a log dir
copied from Kafka, which has no such file) Kafka's default ``offsets.topic.num.partitions``, 50.
A log dir copied from Kafka and then opened by kafkalog has the file, which registers
``__consumer_offsets`` with as many partitions as it found directories (7 for a copy holding
partition 6), not Kafka's count: so when the declared count's partition does not hold the group,
the partition for 50 is looked at too (:func:`find_group`: at most these two partitions are
replayed, never the others). A partition is read through the source's fetch interface (the data
source reads logs only through a ``FetchSource``; a wire source could serve the same), from its
log start offset to its high watermark (what is committed; Kafka's coordinator loads up to the
log end offset, which a log dir no broker writes to has as its high watermark), in fetches of
at most ``FETCH_BYTES``, and replayed batch by batch with group_metadata_loader.py's
``GroupReplay`` (Kafka's rules: tombstones delete, transactional commits count once their
COMMIT marker is there). Nothing is written and no lock is taken. group_commit.py writes a
group's commits where :func:`find_group` finds it, so that a group is never in two partitions.

Errors (:class:`GroupOffsetsError`, naming the group, the log dir and the partition): the log
dir has no ``__consumer_offsets`` at all, or not the group's partition; the group has no
committed offset there; with fallback ``none``, partitions the query reads that the group has no
commit for. A committed offset below the log start offset or past the latest offset is data loss
(``failOnDataLoss``, as for JSON offsets: kafka_offset_reader.py's ``report_data_loss``);
``failOnDataLoss=false`` starts at the log start or latest offset instead. A committed offset of
-1 (Kafka's "no offset") counts as no commit.

Limits: the replay holds every group of that one partition (what Kafka's coordinator holds in
memory for it) plus one fetch. Thread safety: a source belongs to one thread; the functions keep
no state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from broker_embedded.coordinator.coordinator_partition import (
    DEFAULT_NUM_PARTITIONS,
    GROUP_METADATA_TOPIC,
    partition_for,
)
from broker_embedded.coordinator.group_metadata_loader import GroupReplay, LoadedGroup
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.fetch_source import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, FetchSource
from broker_embedded.storage.topic_partition import TopicPartition
from datasource.errors import GroupOffsetsError
from datasource.offset_spec import GroupOffsets

Committed = Mapping[TopicPartition, int]
FETCH_BYTES = 1 << 20
UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED


def group_partitions(source: FetchSource, group_id: str) -> list[TopicPartition]:
    """The ``__consumer_offsets`` partitions that may hold ``group_id``, the first being where a
    new group goes (module docstring)."""
    declared = source.declared_partitions(GROUP_METADATA_TOPIC)
    counts = [DEFAULT_NUM_PARTITIONS] if declared is None else [declared, DEFAULT_NUM_PARTITIONS]
    found = [TopicPartition(GROUP_METADATA_TOPIC, partition_for(group_id, n)) for n in counts]
    return list(dict.fromkeys(found))


def replay_partition(source: FetchSource, tp: TopicPartition) -> GroupReplay:
    """Every batch of ``tp`` from its log start offset to its high watermark, replayed."""
    replay = GroupReplay(tp.partition)
    offset = source.list_offset(tp, EARLIEST_TIMESTAMP, UNCOMMITTED)
    end = source.list_offset(tp, LATEST_TIMESTAMP, UNCOMMITTED)
    assert offset is not None and end is not None
    while offset < end:
        fetched = source.fetch(tp, offset, FETCH_BYTES, UNCOMMITTED)
        before = offset
        for batch in iter_batches(fetched.records, f"{tp} at offset {offset}"):
            if batch.next_offset <= offset:
                continue  # already replayed
            if batch.base_offset >= end:
                break
            replay.replay_batch(batch)
            offset = batch.next_offset
        if offset == before:
            raise GroupOffsetsError(
                f"{tp}: a fetch at offset {offset} below the high watermark {end} returned no batch"
            )
    return replay


def find_group(source: FetchSource, group_id: str) -> tuple[TopicPartition, LoadedGroup | None]:
    """The partition holding ``group_id`` and the group as loaded from it; when no candidate
    partition holds it, the first candidate and ``None``."""
    candidates = group_partitions(source, group_id)
    present = source.topics().get(GROUP_METADATA_TOPIC, ())
    for tp in candidates:
        if tp.partition in present:
            group = replay_partition(source, tp).result().groups.get(group_id)
            if group is not None:
                return tp, group
    return candidates[0], None


def read_committed_offsets(source: FetchSource, group_id: str) -> dict[TopicPartition, int]:
    """Every committed offset of ``group_id`` in the source's ``__consumer_offsets`` (at least
    one; see the module docstring for the errors). A cluster's source (kafka.bootstrap.servers)
    asks the group's coordinator (OffsetFetch) instead of replaying the topic."""
    where = source.descriptor.location
    at_coordinator = getattr(source, "committed_offsets", None)
    if at_coordinator is not None:
        found = at_coordinator(group_id)
        if not found:
            raise GroupOffsetsError(
                f"startingOffsets=group:{group_id}: group {group_id!r} has no committed offsets "
                f"at {where} (OffsetFetch from its coordinator)"
            )
        return found
    if not source.topics().get(GROUP_METADATA_TOPIC):
        raise GroupOffsetsError(
            f"startingOffsets=group:{group_id}: {where} has no {GROUP_METADATA_TOPIC} "
            "partition, so no consumer group has committed offsets there"
        )
    tp, group = find_group(source, group_id)
    found = (
        {}
        if group is None
        else {
            TopicPartition(c.topic, c.partition): c.offset for c in group.offsets if c.offset >= 0
        }
    )
    if not found:
        raise GroupOffsetsError(
            f"startingOffsets=group:{group_id}: group {group_id!r} has no committed offsets in "
            f"{where} (partition {tp.partition} of {GROUP_METADATA_TOPIC})"
        )
    return found


def group_starting_offsets(
    spec: GroupOffsets,
    committed: Committed,
    partitions: Iterable[TopicPartition],
    earliest: Callable[[TopicPartition], int],
    latest: Callable[[TopicPartition], int],
    data_lost: Callable[[TopicPartition, int, int, str], int],
) -> dict[TopicPartition, int]:
    """Where each of ``partitions`` starts: its committed offset, or ``spec.fallback`` for one
    without a commit (``none``: a :class:`GroupOffsetsError` naming them all). A committed
    offset outside ``[earliest(tp), latest(tp)]`` goes through ``data_lost(tp, requested,
    instead, what)``, which raises or returns the offset to use instead."""
    tps = list(partitions)
    missing = [tp for tp in tps if tp not in committed]
    if missing and spec.fallback == "none":
        raise GroupOffsetsError(
            f"startingOffsets={spec} with startingOffsetsByGroupFallback=none: group "
            f"{spec.group_id!r} has no committed offset for {', '.join(map(str, missing))}"
        )
    out = {}
    for tp in tps:
        if tp not in committed:
            out[tp] = earliest(tp) if spec.fallback == "earliest" else latest(tp)
            continue
        offset, low, high = committed[tp], earliest(tp), latest(tp)
        if offset < low:
            offset = data_lost(
                tp,
                offset,
                low,
                f"group {spec.group_id!r} committed offset {offset} of {tp}, below "
                f"its log start offset {low}: offsets [{offset}, {low}) are no "
                "longer in the log",
            )
        elif offset > high:
            offset = data_lost(
                tp,
                offset,
                high,
                f"group {spec.group_id!r} committed offset {offset} of {tp}, past "
                f"its latest offset {high}: offsets [{high}, {offset}) are not in "
                "the log",
            )
        out[tp] = offset
    return out
