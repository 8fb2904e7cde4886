"""Which stored segments remote retention deletes (Kafka's ``RemoteLogRetentionHandler``, run by
the remote log manager's ``RLMExpirationTask``): a pure decision over a partition's finished
manifests, its log start offset, its local size after them and its ``retention.ms`` /
``retention.bytes``; remote_log_manager.py deletes what it returns, oldest first. A segment
without record timestamps has its ``.log``'s modification time at its copy as its manifest's
``max_timestamp_ms`` (as Kafka's ``LogSegment.largestTimestamp`` gives its RemoteLogManager:
never -1, which would expire it at once).
"""

from __future__ import annotations

from broker_embedded.storage.remote_log_segment_metadata import RemoteLogSegmentMetadata
from broker_embedded.storage.unified_log import UnifiedLog


def expired_segments(
    segments: list[RemoteLogSegmentMetadata], unified: UnifiedLog, now_ms: int
) -> list[RemoteLogSegmentMetadata]:
    """The oldest remote segments past retention, in order (Kafka's
    ``RemoteLogRetentionHandler``): each wholly below the log start offset (DeleteRecords), or
    whose manifest's ``max_timestamp_ms`` is at most ``now - retention.ms``, or while the
    partition's size (remote segments plus the local ones after them) exceeds
    ``retention.bytes`` by at least the segment's size; the first other one stops it. Every
    segment deleted leaves the excess (Kafka moves the log start after its deletions, so it
    never meets segments below it that it counted; here the log start moves first, and a
    restart after a kill may meet them)."""
    c = unified.config
    remaining = -1
    if c.retention_bytes >= 0 and segments:
        total = sum(m.size_in_bytes for m in segments)
        total += unified.local_size_from(segments[-1].next_offset)
        remaining = total - c.retention_bytes
    doomed = []
    for m in segments:
        below_start = m.next_offset <= unified.log_start_offset
        expired = c.retention_ms >= 0 and m.max_timestamp_ms <= now_ms - c.retention_ms
        if below_start or expired:  # either way its bytes leave the excess
            remaining = max(0, remaining - m.size_in_bytes) if remaining >= 0 else remaining
        elif remaining > 0 and remaining - m.size_in_bytes >= 0:
            remaining -= m.size_in_bytes
        else:
            break
        doomed.append(m)
    return doomed
