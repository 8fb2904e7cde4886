"""ListOffsets special timestamps and the answer for one partition (Kafka's
``ListOffsetsRequest`` constants and ``ListOffsetsPartitionResponse``).

``EARLIEST_TIMESTAMP`` (-2) asks for the log start offset, ``LATEST_TIMESTAMP`` (-1) for the
high watermark (the last stable offset under read_committed); any other timestamp >= 0 for the
first offset whose record timestamp is >= it (with that timestamp and the leader epoch of its
batch), or ``offset`` and ``timestamp`` -1 when no record below that bound has one. Other
negative timestamps are INVALID_REQUEST. Immutable: thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


@dataclass(frozen=True, slots=True)
class ListOffsetsResult:
    offset: int
    timestamp: int = -1
    leader_epoch: int = -1
