"""ListOffsets special timestamps and the answer for one partition (Kafka's
``ListOffsetsRequest`` constants and ``ListOffsetsPartitionResponse``).

``EARLIEST_TIMESTAMP`` (-2) asks for the log start offset, ``LATEST_TIMESTAMP`` (-1) for the
high watermark (the last stable offset under read_committed), ``MAX_TIMESTAMP`` (-3) for the
record with the largest timestamp below that bound (the first of equals), ``EARLIEST_LOCAL``
(-4) for the local log start offset (Kafka's ``localLogStartOffset``: the first local segment's
base; above the log start offset once local retention of a tiered topic deleted segments that
are in the store, storage/remote_log_manager.py), ``LATEST_TIERED`` (-5)
for the highest offset in remote storage of a topic with ``remote.storage.enable`` (-1 while
none is known to be; Kafka's ``highestOffsetInRemoteStorage``, with its leader epoch) and
otherwise, like ``EARLIEST_PENDING_UPLOAD`` (-6), for offset -1 (as Kafka answers without
tiered storage); any other timestamp >= 0 for the
first offset whose record timestamp is >= it (with that timestamp and the leader epoch of its
batch), or ``offset`` and ``timestamp`` -1 when no record below that bound has one. Other
negative timestamps are INVALID_REQUEST. Immutable: thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker_embedded.errors import InvalidRequestError

if TYPE_CHECKING:
    from broker_embedded.storage.log_segment import TimestampAndOffset
    from broker_embedded.storage.remote_log_manager import RemoteLogManager
    from broker_embedded.storage.topic_partition import TopicPartition
    from broker_embedded.storage.unified_log import UnifiedLog

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    offset: int
    timestamp: int = -1
    leader_epoch: int = -1


def offset_for_timestamp(
    tp: TopicPartition,
    lg: UnifiedLog,
    leader_epoch: int,
    timestamp: int,
    upper: int,
    rlm: RemoteLogManager | None,
) -> ListOffsetsResult:
    """The leader's answer for ``tp`` (its log ``lg``, at ``leader_epoch``) to ``timestamp``,
    below ``upper`` (the high watermark, the last stable offset, or a follower's log end), as
    the module docstring says; a tiered partition's timestamps are looked up in the store
    first (``rlm``), as Kafka does."""
    if timestamp == EARLIEST_TIMESTAMP:
        return ListOffsetsResult(lg.log_start_offset, -1, leader_epoch)
    if timestamp == EARLIEST_LOCAL_TIMESTAMP:  # Kafka's localLogStartOffset
        return ListOffsetsResult(lg.local_log_start_offset, -1, leader_epoch)
    if timestamp == LATEST_TIMESTAMP:
        return ListOffsetsResult(upper, -1, leader_epoch)
    if timestamp == LATEST_TIERED_TIMESTAMP and lg.config.remote_storage_enable:
        # Kafka's highestOffsetInRemoteStorage: -1 while nothing is (known to be) tiered
        highest = max(lg.remote_end_offset - 1, -1)
        epoch = lg.leader_epoch_cache.epoch_for_offset(highest) if highest >= 0 else None
        return ListOffsetsResult(highest, -1, -1 if epoch is None else epoch)
    if timestamp in (LATEST_TIERED_TIMESTAMP, EARLIEST_PENDING_UPLOAD_TIMESTAMP):
        return ListOffsetsResult(-1, -1, -1)
    if timestamp == MAX_TIMESTAMP:
        return _found(lg.offset_of_max_timestamp(upper))
    if timestamp < 0:
        raise InvalidRequestError(
            f"topic {tp.topic!r} partition {tp.partition}: unsupported ListOffsets timestamp "
            f"{timestamp} (-1 latest, -2 earliest, or a timestamp >= 0)"
        )
    found = None
    if rlm is not None and lg.config.remote_storage_enable:  # Kafka: the store first
        found = rlm.find_offset_by_timestamp(tp, lg, timestamp)
    if found is None:
        found = lg.fetch_offset_by_timestamp(timestamp)
    return _found(None if found is None or found.offset >= upper else found)


def _found(found: TimestampAndOffset | None) -> ListOffsetsResult:
    if found is None:
        return ListOffsetsResult(-1, -1, -1)
    epoch = -1 if found.leader_epoch is None else found.leader_epoch
    return ListOffsetsResult(found.offset, found.timestamp, epoch)
