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
