"""Tiered storage's copier (Kafka's ``RemoteLogManager``, KIP-405): :class:`RemoteLogManager`
copies the closed segments of remote-enabled partitions (``remote.storage.enable=true``) to an
object store, in the layout the object-store reader reads (log_dir_upload.py,
remote_log_segment_metadata.py).

What is copied, per segment of a partition this broker leads, in offset order: its ``.log``,
``.index``, ``.timeindex`` and ``.txnindex`` (when it has one) under their own names, as the
log dir holds them; the producer snapshot at its end (``<next offset>.snapshot``, when the log
still holds it: Kafka's ``producerSnapshotIndex``); the leader epochs up to its end (the
partition's ``leader-epoch-checkpoint`` entries starting below the segment's end, in that
file's format, as ``<base>.leader-epoch-checkpoint``: Kafka's ``leaderEpochIndex``); then its
manifest ``<base>.segment.json`` (``COPY_SEGMENT_FINISHED``) listing every one of them with
size and SHA-256. Each object is verified by reading it back before the manifest is written.

Which segments (Kafka's ``RLMCopyTask.candidateLogSegments``): every segment but the active
one whose end (the next segment's base offset) is at or below the last stable offset (which
is at most the high watermark), so that nothing uncommitted or in an open transaction is
copied; and only those at or after the end of the last segment already in the store.

Crash safety (what Kafka keeps in its ``__remote_log_metadata`` topic is here the manifests
themselves): a segment is remote exactly when its manifest is. At its first visit of a
partition, and after any failed copy, the manager lists the partition's prefix and resumes
after the last manifest's ``next_offset``. A kill mid-copy leaves objects without a manifest;
the next copy of that segment overwrites them (the same keys), so no segment is ever stored
twice and no manifest names incomplete data. A segment deleted locally during its copy
(DeleteRecords) has its objects deleted. A partition this broker stops leading is forgotten,
and listed again if it leads it again. Copies go in offset order, so the store's
segments are always a prefix of the log's without holes (what the reader requires).

Bounds: one thread per broker (``kafka-scheduler-remote-log-manager-<broker id>``, a
:class:`KafkaScheduler`)
runs a pass every ``remote.log.manager.task.interval.ms``; a pass copies one segment at a time
(Kafka: ``remote.log.manager.copier.thread.pool.size`` threads; here 1), reading 8 MiB of a
file at a time, and checks for shutdown between segments (a copy under way finishes; a kill
interrupts it safely). Errors (the store unreachable after object_store.py's retries) are
logged and the partition is retried at the next pass.

Thread safety: the pass runs in the scheduler's thread; :meth:`run_once` may be called from
one other thread at a time (tests); :meth:`close` from any thread. Closed segment files are
immutable (remote storage refuses compacted topics, so no cleaner rewrites them).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

from broker_embedded.scheduler import KafkaScheduler
from broker_embedded.storage.leader_epoch_checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    LeaderEpochCheckpointFile,
)
from broker_embedded.storage.log_dir_upload import SegmentUpload
from broker_embedded.storage.log_file_utils import segment_file_stem
from broker_embedded.storage.object_store import ObjectStore, StoreLocation
from broker_embedded.storage.partition_metadata import topic_id_to_string
from broker_embedded.storage.remote_log_segment_metadata import RemoteLogSegmentMetadata
from broker_embedded.storage.snapshot_file import snapshot_file_name
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import UnifiedLog

log = logging.getLogger(__name__)

LEADER_EPOCH_SUFFIX = "." + LEADER_EPOCH_CHECKPOINT
CLOSE_TIMEOUT_S = 10.0


class RemoteLogManager:
    """The copier of one broker; see the module docstring. ``leaders``: the logs of the
    partitions this broker leads now (called once per pass)."""

    def __init__(
        self,
        broker_id: int,
        log_dir: Path,
        location: StoreLocation,
        leaders: Callable[[], Mapping[TopicPartition, UnifiedLog]],
        task_interval_ms: int,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.location = location
        self._leaders = leaders
        self._interval_ms = task_interval_ms
        self._store: ObjectStore | None = None
        # per partition: the offset after the last segment in the store (-1: none yet)
        self._copied_end: dict[TopicPartition, int] = {}
        self._refused: set[TopicPartition] = set()  # store holds another topic id's segments
        self._topic_ids: dict[TopicPartition, uuid.UUID | None] = {}  # of the logs listed
        self._pass_lock = threading.Lock()
        self._stopping = threading.Event()
        self.copied = 0  # segments copied since start
        self._scheduler = KafkaScheduler(f"remote-log-manager-{broker_id}")

    def __repr__(self) -> str:
        return f"RemoteLogManager({self.location.describe()})"

    def startup(self) -> None:
        self._scheduler.startup()
        self._scheduler.schedule(
            "remote-log-copy", self._pass, delay_ms=0, period_ms=self._interval_ms
        )

    def close(self) -> None:
        """Stop after the segment being copied (if any), waiting for it at most
        :data:`CLOSE_TIMEOUT_S` (a copy to a store that stopped answering goes on in the
        background and fails; its segment has no manifest); no new pass starts."""
        self._stopping.set()
        self._scheduler.shutdown(timeout=CLOSE_TIMEOUT_S)
        if self._store is not None:
            self._store.release()

    def _pass(self) -> None:
        try:
            self.run_once()
        except Exception:  # the store unreachable: logged, retried at the next pass
            log.exception("remote log manager: a copy pass to %s failed", self.location.describe())

    def run_once(self) -> int:
        """One pass over the partitions this broker leads: copy every eligible segment.
        Returns how many segments it copied."""
        with self._pass_lock:
            done = 0
            leaders = self._leaders()
            for tp in [tp for tp in self._copied_end if tp not in leaders]:
                del self._copied_end[tp]  # led again later: list the store again then
            for tp, unified in sorted(leaders.items()):
                if self._stopping.is_set():
                    break
                if unified.config.remote_storage_enable and not unified.is_closed:
                    done += self._copy_partition(tp, unified)
            return done

    def _store_once(self) -> ObjectStore:
        if self._store is None:
            self._store = self.location.open()
        return self._store

    def _copy_partition(self, tp: TopicPartition, unified: UnifiedLog) -> int:
        bases = unified.segment_base_offsets
        bound = unified.last_stable_offset
        candidates = [(b, e) for b, e in zip(bases, bases[1:], strict=False) if e <= bound]
        if not candidates:
            return 0
        store = self._store_once()
        if self._topic_ids.get(tp) != unified.topic_id:  # deleted and created again: list again
            self._copied_end.pop(tp, None)
        if tp not in self._copied_end:
            self._topic_ids[tp] = unified.topic_id
            stored_end = self._stored_end(store, tp, unified)
            if stored_end is None:
                return 0  # another topic's segments under this name: listed again next pass
            self._copied_end[tp] = unified.remote_end_offset = stored_end
        done = 0
        for base, end in candidates:
            if base < self._copied_end[tp] or self._stopping.is_set():
                continue
            try:
                self._copy_segment(store, tp, unified, base, end)
            except FileNotFoundError as e:  # deleted meanwhile (DeleteRecords): look again later
                log.warning("remote log manager: segment %d of %s went during its copy: %s",
                            base, tp, e)  # fmt: skip
                self._drop_partial(store, tp, base)
                self._copied_end.pop(tp, None)
                break
            except BaseException:
                self._copied_end.pop(tp, None)  # list the store again at the next visit
                raise
            self._copied_end[tp] = unified.remote_end_offset = end
            self.copied += 1
            done += 1
        return done

    def _stored_end(
        self, store: ObjectStore, tp: TopicPartition, unified: UnifiedLog
    ) -> int | None:
        """The offset after the last segment of ``tp`` in the store (its manifest's
        ``next_offset``); -1 when the store has none; None when the store's segments came from
        another topic of the same name (another topic id: one deleted and created again),
        logged once: nothing of ``tp`` is copied (nor deleted locally) until they are gone."""
        prefix = tp.dir_name + "/"
        found = (RemoteLogSegmentMetadata.base_offset_of(n[len(prefix) :])
                 for n in store.list(prefix))  # fmt: skip
        bases = [b for b in found if b is not None]
        if not bases:
            self._refused.discard(tp)
            return -1
        name = prefix + RemoteLogSegmentMetadata.name_of(max(bases))
        last = RemoteLogSegmentMetadata.from_json(store.read(name), store.location.describe(name))
        ours = "" if unified.topic_id is None else topic_id_to_string(unified.topic_id)
        if last.topic_id and ours and last.topic_id != ours:
            if tp not in self._refused:
                self._refused.add(tp)
                log.error("remote log manager: %s holds segments of topic id %s, not of %s's "
                          "topic id %s (a topic deleted and created again): %s is not tiered "
                          "until they are deleted", store.location.describe(prefix),
                          last.topic_id, tp, ours, tp)  # fmt: skip
            return None
        self._refused.discard(tp)
        return last.next_offset

    def _drop_partial(self, store: ObjectStore, tp: TopicPartition, base: int) -> None:
        """Delete what an abandoned copy of segment ``base`` left (it has no manifest), so that
        no ``.log`` without a manifest sits below later segments' manifests."""
        prefix = f"{tp.dir_name}/{segment_file_stem(base)}."
        for name in store.list(prefix.rpartition("/")[0] + "/"):
            if name.startswith(prefix):
                store.delete(name)

    def _copy_segment(
        self, store: ObjectStore, tp: TopicPartition, unified: UnifiedLog, base: int, end: int
    ) -> None:
        directory = self.log_dir / tp.dir_name
        extras: dict[str, bytes] = {}
        snapshot = directory / snapshot_file_name(end)
        if snapshot.is_file():
            extras[snapshot.name] = snapshot.read_bytes()
        epochs = [e for e in unified.leader_epoch_cache.entries() if e.start_offset < end]
        epoch_file = LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT)
        extras[segment_file_stem(base) + LEADER_EPOCH_SUFFIX] = epoch_file.format(epochs)
        # objects an interrupted copy left are overwritten: no manifest names them
        upload = SegmentUpload(self.log_dir, store, {}, False, False, lambda _: None)
        upload.segment(tp, base, extras)
        log.info("remote log manager: copied segment %d..%d of %s to %s (%d bytes)",
                 base, end - 1, tp, store.location.describe(tp.dir_name), upload.sent)  # fmt: skip
