"""Retention and the log start offset of a partition's log (Kafka's
``UnifiedLog.deleteOldSegments`` and ``maybeIncrementLogStartOffset``, with the tiered-storage
offsets beside them): :class:`LogRetention`, a base class of
:class:`~broker_embedded.storage.unified_log.UnifiedLog` holding those methods.

Retention (:meth:`delete_old_segments`) deletes whole segments, oldest first and never the
active one, when their largest timestamp is older than ``retention.ms``, while the log exceeds
``retention.bytes``, or when they lie wholly below the log start offset; only segments wholly
below the high watermark go. A topic with ``remote.storage.enable`` uses ``local.retention.*``
instead, and deletes by time or size only segments wholly below :attr:`remote_end_offset` (in
the store: remote_log_manager.py sets it, on a leader from its copies, on a follower from the
store's manifests; Kafka's ``isSegmentEligibleForDeletion``); that moves only
:attr:`local_log_start_offset` (Kafka's ``localLogStartOffset``, the first local segment's
base): the log start offset stays at the store's first offset (ListOffsets -2, Fetch's log
start, the log-start-offset-checkpoint) until remote retention
(:meth:`update_log_start_offset_from_remote_tier`) or DeleteRecords moves it. With
``remote.log.copy.disable`` (KIP-950: the store read only) local retention is ``retention.*``
again, deletes segments whether stored or not, and moves the log start (Kafka's
``remoteLogEnabledAndRemoteCopyEnabled``). :meth:`delete_records_before` moves the log start
offset (Kafka's DeleteRecords; not above the HW).

Invariants: the log start offset only moves up here, never above the high watermark; when it
moves, the leader epoch cache is truncated from the start to it and the producer snapshots
below it are deleted (a tiered log's local retention deletes those below the new local log
start). :attr:`remote_end_offset` is set by a leader's remote log manager from its copies; a
follower's only moves up (:meth:`update_highest_offset_in_remote_storage`), and
:meth:`forget_remote_storage` resets it to -1 (nothing known to be in the store).

Thread safety: the public methods take the log's lock and the private ones run under it (their
callers hold it; ``UnifiedLog``'s opening and truncations call
:meth:`_truncate_epochs_from_start`). They read and write the log's own state (its segment
writer and open segments, leader epoch cache, offsets and :attr:`remote_end_offset`, set up by
``UnifiedLog.__init__``) and use its helpers (``_path``, ``_segment_size``,
``_delete_segment_files``, ``_changed``, ``_check_open``, ``_where``), so this class is never
used alone.
"""

from __future__ import annotations

from collections.abc import Callable

from broker_embedded.errors import OffsetOutOfRangeError
from broker_embedded.storage.log_file_utils import LOG_SUFFIX
from broker_embedded.storage.snapshot_file import list_snapshots


class LogRetention:
    """The retention and log start offset methods of a log (module docstring); a base class of
    ``UnifiedLog``."""

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Apply retention (time, size, log start offset); return the segments deleted."""
        with self._lock:
            self._check_open()
            now = self._clock() if now_ms is None else now_ms
            deleted = 0
            retention_ms, retention_bytes = self._local_retention()
            if self.config.delete and retention_ms >= 0:
                deleted += self._delete_while(
                    lambda b, _: now - self._largest_ts(b) > retention_ms, tiered_only=True
                )
            if self.config.delete and retention_bytes >= 0:
                excess = [self.size_in_bytes - retention_bytes]

                def over_size(base: int, size: int) -> bool:
                    if excess[0] - size < 0:
                        return False
                    excess[0] -= size
                    return True

                deleted += self._delete_while(over_size, tiered_only=True)
            deleted += self._delete_while(lambda b, _: self._next_base(b) <= self.log_start_offset)
            return deleted

    def _largest_ts(self, base: int) -> int:
        ts = self._open.segment(base).largest_timestamp
        if ts < 0:  # no timestamps: Kafka uses the file's modification time
            return int(self._path(base, LOG_SUFFIX).stat().st_mtime * 1000)
        return ts

    def _next_base(self, base: int) -> int:
        bases = self.segment_base_offsets
        return bases[bases.index(base) + 1]

    def _local_retention(self) -> tuple[int, int]:
        """Retention by time and size of the local segments: ``local.retention.*`` for a topic
        with ``remote.storage.enable`` that is still copied (Kafka's ``localRetentionMs`` /
        ``localRetentionBytes``), else ``retention.*``."""
        c = self.config
        if self.remote_copy_enabled:
            return c.effective_local_retention_ms, c.effective_local_retention_bytes
        return c.retention_ms, c.retention_bytes

    def _delete_while(
        self, predicate: Callable[[int, int], bool], *, tiered_only: bool = False
    ) -> int:
        """Delete closed segments from the oldest while ``predicate(base, size)`` holds and the
        segment lies wholly below the high watermark; with ``tiered_only``, of a topic with
        ``remote.storage.enable`` that is still copied, only segments wholly in remote storage
        (Kafka's ``isSegmentEligibleForDeletion``: a segment not copied yet is never deleted by
        retention), and only the local log start moves. With ``remote.log.copy.disable`` the
        log start moves (Kafka's ``incrementStartOffset``): remote retention then deletes the
        stored segments below it."""
        bases = self.segment_base_offsets[:-1]
        doomed = []
        tiered = tiered_only and self.remote_copy_enabled
        for base in bases:
            if self._next_base(base) > self.high_watermark:
                break
            if tiered and self._next_base(base) > self.remote_end_offset:
                break
            if not predicate(base, self._segment_size(base)):
                break
            doomed.append(base)
        if not doomed:
            return 0
        new_start = self._next_base(doomed[-1])
        for base in doomed:
            self._delete_segment(base)
        if tiered:  # only the local start moves: the log start stays in the store (Kafka's
            self._delete_snapshots_below(new_start)  # localLogStartOffset)
            self._changed()
        else:
            self._set_log_start_offset(max(self.log_start_offset, new_start))
        return len(doomed)

    def _delete_segment(self, base: int) -> None:
        self._open.drop(base)
        self._writer.forget_segment(base)
        self._delete_segment_files(base)

    def _set_log_start_offset(self, offset: int) -> None:
        if offset == self.log_start_offset:
            return
        self.log_start_offset = offset
        if self.high_watermark < offset:
            self.high_watermark = offset
        self._truncate_epochs_from_start(offset)
        self._delete_snapshots_below(min(offset, self.local_log_start_offset))
        self._changed()

    def _delete_snapshots_below(self, offset: int) -> None:
        for snap_offset, path in list_snapshots(self.directory):
            if snap_offset < offset:
                path.unlink(missing_ok=True)

    def _truncate_epochs_from_start(self, offset: int) -> None:
        """The leader epoch cache follows the log start offset. A checkpoint write that fails
        (a full disk) is counted, not raised: the cache changed in memory, and the file's extra
        entries below the log start are harmless (leader_epoch_file_cache.py), so DeleteRecords
        and retention still delete the segments below, which is how a full disk is freed."""
        try:
            self.leader_epoch_cache.truncate_from_start(offset)
        except OSError as e:
            self.health.failed(f"writing the leader epoch checkpoint of {self._where()}", e)

    def update_log_start_offset_from_remote_tier(self, offset: int) -> None:
        """Remote retention deleted the stored segments below ``offset`` (Kafka's
        ``updateLogStartOffsetFromRemoteTier``): the log start moves up to it (never down, at
        most the high watermark), and local segments wholly below it go."""
        with self._lock:
            if self._closed or self.failure is not None:
                return
            offset = min(offset, self.high_watermark)
            if offset > self.log_start_offset:
                self._set_log_start_offset(offset)
                self._delete_while(lambda b, _: self._next_base(b) <= self.log_start_offset)

    def forget_remote_storage(self, *, leader: bool) -> None:
        """Tiering was turned off (``remote.storage.enable=false`` with
        ``remote.log.delete.on.disable``; Kafka's ``ConfigHandler``): the store's segments are
        being deleted, so nothing is known to be in the store, and a leader's log starts at its
        first local offset (a follower's follows its leader's)."""
        with self._lock:
            self.remote_end_offset = -1
            if not leader or self._closed or self.failure is not None:
                return
            start = min(self.local_log_start_offset, self.high_watermark)
            if start > self.log_start_offset:
                self._set_log_start_offset(start)

    def update_highest_offset_in_remote_storage(self, end: int) -> None:
        """A follower learnt that the store holds this partition up to ``end`` (exclusive;
        remote_log_manager.py): :attr:`remote_end_offset` moves up to it, never down (Kafka's
        ``updateHighestOffsetInRemoteStorage``), so local retention may delete the segments
        below it."""
        with self._lock:
            if self.remote_log_enabled and end > self.remote_end_offset:
                self.remote_end_offset = end

    def remote_copy_lag(self) -> tuple[int, int]:
        """The bytes and the count of the closed segments based at or above
        :attr:`remote_end_offset`: not in the store yet (Kafka's ``RemoteCopyLagBytes`` /
        ``RemoteCopyLagSegments``, its ``onlyLocalLogSegmentsSize`` / ``Count`` less the active
        segment)."""
        with self._lock:
            closed = [b for b in self.segment_base_offsets[:-1] if b >= self.remote_end_offset]
            return sum(self._segment_size(b) for b in closed), len(closed)

    def local_size_from(self, offset: int) -> int:
        """The bytes of the local segments based at or above ``offset`` (Kafka's
        ``onlyLocalLogSegmentsSize`` given the offset after the last remote segment)."""
        with self._lock:
            return sum(self._segment_size(b) for b in self.segment_base_offsets if b >= offset)

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (at most the HW) and delete
        the segments wholly below it; returns the new log start offset."""
        with self._lock:
            self._check_open()
            if offset > self.high_watermark or offset < 0:
                raise OffsetOutOfRangeError(
                    f"cannot delete records of {self._where()} before offset {offset}: it is "
                    f"outside [0, {self.high_watermark}] (the high watermark)"
                )
            if offset > self.log_start_offset:
                self._set_log_start_offset(offset)
                self._delete_while(lambda b, _: self._next_base(b) <= self.log_start_offset)
            return self.log_start_offset
