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
copied; and only those ending after the end of the last segment already in the store. Replicas
roll their segments at different offsets (a follower appends a fetch's batches as one), so a
broker that became leader may hold the store's end inside a segment: that segment is copied
from there on, its batches from the store's end staged as a segment based there
(remote_log_staging.py), so the store's segments never overlap.
A topic with ``remote.log.copy.disable=true`` (KIP-950) is not copied; its remote retention
goes on.

Crash safety (what Kafka keeps in its ``__remote_log_metadata`` topic is here the manifests
themselves): a segment is remote exactly when its manifest is. At its first visit of a
partition, and after any failed copy, the manager lists the partition's prefix and resumes after
the last manifest's ``next_offset``. A kill mid-copy leaves objects without a manifest; the next
copy of that segment overwrites them (the same keys), so no segment is ever stored twice and no
manifest names incomplete data. A segment deleted locally during its copy (DeleteRecords) has
its objects deleted. A partition this broker stops leading is forgotten (where its copies end
and its cached stored segments), and listed again if it leads it again. Copies go in offset
order, so the store's segments are always a prefix of the log's without holes (what the reader
requires).

Followers (Kafka's ``RLMFollowerTask``): where Kafka's followers learn what is remote from
the remote log metadata topic, here each pass lists the prefix of every tiered partition this
broker follows whose oldest closed segment is not known to be stored (one LIST; one GET of the
last manifest when it is not the one seen last time; a partition whose oldest segment ends at
or below the end already learnt is not listed: local retention can go on without news, so a
follower lists about once per local retention window, not at every pass) and moves the log's
``remote_end_offset`` up to the last finished manifest's ``next_offset`` of this topic id
(never down), so that local retention deletes on followers as on the leader and never a
segment the store does not hold. A store that fails is logged and asked again at the next
pass; replication does not wait for it (the pass runs on this thread).

A follower restarting its log from the store (OFFSET_MOVED_TO_TIERED_STORAGE):
:meth:`RemoteLogManager.remote_log_aux_state` reads the stored segment below the leader's local
log start (remote_log_aux_state.py); the follower's log restarts at its end with its leader
epochs and producer snapshot (replica_fetcher_thread.py). A store that fails is
:class:`RemoteStorageError`: the follower backs off and asks again. A store that does not hold
that segment is not the leader's: logged, and the follower restarts at the leader's local start
without that state rather than never (``aux_state_failures``; ``aux_states_built`` counts the
builds).

Turning tiering off (``remote.storage.enable=false``, which needs
``remote.log.delete.on.disable=true``; KIP-950): the leaders' partitions are deleted from the
store as a deleted topic's are (below), their logs starting at their first local offset
(replica_manager.py); a partition whose deletion is pending is neither copied nor expired.

Bounds: one thread per broker (``kafka-scheduler-remote-log-manager-<broker id>``, a
:class:`KafkaScheduler`) runs a pass every ``remote.log.manager.task.interval.ms``; a pass
copies one segment at a time (Kafka: ``remote.log.manager.copier.thread.pool.size`` threads;
here 1), reading 8 MiB of a
file at a time, and checks for shutdown between segments (a copy under way finishes; a kill
interrupts it safely). Errors (the store unreachable after object_store.py's retries, a
corrupt manifest) are logged with the partition and its prefix, and that partition's step (its
copies, its retention, a deleted topic's deletion) is retried at the next pass; the other
partitions go on (a failed deletion of a deleted topic's partition goes to the back).
Quotas (rlm_quota_manager.py, Kafka's KIP-956): before each segment the copier waits while
copies exceed ``remote.log.manager.copy.max.bytes.per.second`` (a second at most between looks,
ended by :meth:`close`), then counts the segment's ``.log`` size; each remote read counts its
bytes against ``remote.log.manager.fetch.max.bytes.per.second``, which the replica manager
checks before it starts one.

Remote retention (Kafka's ``RLMExpirationTask``), after each partition's copies: the oldest
stored segments past ``retention.ms`` / ``retention.bytes`` or below the log start offset
(remote_log_retention_handler.py says which) are deleted: the log start moves past them first
(``UnifiedLog.update_log_start_offset_from_remote_tier``), then each segment: its manifest
rewritten ``DELETE_SEGMENT_STARTED``, its objects deleted, the manifest last. A listing finds
marked manifests (a kill mid-deletion) and the next pass finishes them. A deleted topic's
partitions (:meth:`RemoteLogManager.stop_partitions`, on every live broker holding a replica)
are deleted on this thread: the objects no manifest names first (while the manifests still
refuse a topic created again under the name), then every segment of its topic id as above.
The partitions still to delete are recorded in the log dir (remote_log_pending_deletions.py),
so that a restart finishes them.

Reads: remote_log_reader.py (Kafka's ``RemoteLogReader``), over this manager's manifest cache
(Kafka's ``RemoteLogMetadataManager``): a partition's manifests, listed (one GET each) at the
first copy pass or read of the partition and appended to as segments are copied; only
``COPY_SEGMENT_FINISHED`` ones count.

Meters (Kafka's ``RemoteStorageMetrics``, broker_topic_stats.py says when each counts): copies,
remote reads, deletions and followers' restarts from the store are counted in the broker's
topic stats while they are kept (:attr:`RemoteLogManager.topic_stats`);
:meth:`RemoteLogManager.remote_log_size_bytes` is ``RemoteLogSizeBytes`` of the partitions led,
:meth:`RemoteLogManager.remote_copy_lag` their ``RemoteCopyLagBytes`` / ``...Segments`` (read
when asked, where Kafka records them after each copy).

Thread safety: the pass runs in the scheduler's thread; :meth:`run_once` may be called from
one other thread at a time (tests); :meth:`close` from any thread. Reads run on the reader
pool (remote_storage_thread_pool.py); the manifest cache is guarded by one lock (a leaf).
Closed segment files are immutable (remote storage refuses compacted topics, so no cleaner
rewrites them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Protocol

from broker_embedded.errors import (
    RemoteStorageError,
)
from broker_embedded.scheduler import KafkaScheduler
from broker_embedded.storage.leader_epoch_checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    LeaderEpochCheckpointFile,
)
from broker_embedded.storage.log_dir_upload import SegmentUpload
from broker_embedded.storage.log_file_utils import LOG_SUFFIX, segment_file_stem
from broker_embedded.storage.log_segment import TimestampAndOffset
from broker_embedded.storage.object_store import ObjectStore, StoreLocation
from broker_embedded.storage.partition_metadata import topic_id_to_string
from broker_embedded.storage.remote_log_aux_state import (
    LEADER_EPOCH_SUFFIX,
    RemoteLogAuxState,
    build_remote_log_aux_state,
    same_topic,
)
from broker_embedded.storage.remote_log_pending_deletions import (
    read_pending_deletions,
    write_pending_deletions,
)
from broker_embedded.storage.remote_log_reader import (
    RemoteLogReader,
    RemoteLogReadResult,
    store_errors,
)
from broker_embedded.storage.remote_log_retention_handler import expired_segments
from broker_embedded.storage.remote_log_segment_metadata import (
    COPY_SEGMENT_FINISHED,
    DELETE_SEGMENT_STARTED,
    RemoteLogSegmentMetadata,
    finished,
    list_manifests,
    read_manifest,
)
from broker_embedded.storage.remote_log_staging import REMOTE_STAGING_DIR, stage_tail
from broker_embedded.storage.remote_storage_fetch_info import RemoteStorageFetchInfo
from broker_embedded.storage.rlm_quota_manager import RLMQuotaManager, RLMQuotaManagerConfig
from broker_embedded.storage.snapshot_file import snapshot_file_name
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import UnifiedLog

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 10.0
READER_THREADS = 10  # Kafka's remote.log.reader.threads default
READER_MAX_PENDING_TASKS = 100  # Kafka's remote.log.reader.max.pending.tasks default
UNLIMITED = RLMQuotaManagerConfig()  # Kafka's default quotas: Long.MAX_VALUE bytes a second


class TopicStats(Protocol):
    """What the remote log manager counts in (replica_manager/broker_topic_stats.py)."""

    def add(self, topic: str, **amounts: int) -> None: ...


class RemoteLogManager:
    """The copier of one broker; see the module docstring. ``leaders`` / ``followers``: the
    logs of the partitions this broker leads / follows now (each called once per pass)."""

    def __init__(
        self,
        broker_id: int,
        log_dir: Path,
        location: StoreLocation,
        leaders: Callable[[], Mapping[TopicPartition, UnifiedLog]],
        task_interval_ms: int,
        reader_threads: int = READER_THREADS,
        reader_max_pending_tasks: int = READER_MAX_PENDING_TASKS,
        followers: Callable[[], Mapping[TopicPartition, UnifiedLog]] | None = None,
        copy_quota: RLMQuotaManagerConfig = UNLIMITED,
        fetch_quota: RLMQuotaManagerConfig = UNLIMITED,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.location = location
        self._leaders = leaders
        self._followers = followers or dict
        # per followed partition: (topic id, base offset of the last manifest listed, the
        # store's end it gave): a listing whose last manifest is the same needs no GET
        self._followed: dict[TopicPartition, tuple[uuid.UUID | None, int, int]] = {}
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
        # the remote segments per partition (Kafka's RemoteLogMetadataManager cache): the
        # COPY_SEGMENT_FINISHED manifests in offset order, with the topic id they were listed for
        self._remote: dict[TopicPartition, tuple[uuid.UUID | None, list[RemoteLogSegmentMetadata]]]
        self._remote = {}
        self._meta_lock = threading.Lock()
        self.reader = RemoteLogReader(
            broker_id,
            location,
            self.remote_segments,
            self._count,
            reader_threads,
            reader_max_pending_tasks,
            RLMQuotaManager(fetch_quota),
        )
        self.index_cache = self.reader.index_cache
        self.fetch_quota = self.reader.fetch_quota
        self.copy_quota = RLMQuotaManager(copy_quota)
        # DELETE_SEGMENT_STARTED manifests found by a listing: the next pass finishes them
        self._deleting: dict[TopicPartition, list[RemoteLogSegmentMetadata]] = {}
        # partitions of deleted topics (with their topic id) whose objects are to be deleted
        self._stopped: list[tuple[TopicPartition, str]] = []
        self.deleted = 0  # segments deleted from the store since start
        # a follower's restarts from the store (remote_log_aux_state) built / refused
        self.aux_states_built = 0
        self.aux_state_failures = 0
        # the broker's topic meters (broker_topic_stats.py) while they are kept, else None
        self.topic_stats: Callable[[], TopicStats | None] = lambda: None

    def __repr__(self) -> str:
        return f"RemoteLogManager({self.location.describe()})"

    def startup(self) -> None:
        # deletions a stop or a crash left unfinished
        self._stopped = read_pending_deletions(self.log_dir)
        shutil.rmtree(self.log_dir / REMOTE_STAGING_DIR, ignore_errors=True)  # a killed copy's
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
        self.reader.shutdown()
        if self._store is not None:
            self._store.release()

    def _pass(self) -> None:
        try:
            self.run_once()
        except Exception:  # the store unreachable: logged, retried at the next pass
            log.exception("remote log manager: a copy pass to %s failed", self.location.describe())

    def run_once(self, now_ms: int | None = None) -> int:
        """One pass: delete the objects of deleted topics' partitions, then over the
        partitions this broker leads, copy every eligible segment and delete the stored ones
        past retention (``now_ms``: the time retention.ms counts from; default the log's
        clock). Returns how many segments it copied."""
        with self._pass_lock:
            self._delete_stopped()
            done = 0
            leaders = self._leaders()
            with self._meta_lock:  # led again later: list the store again then
                for tp in [tp for tp in {*self._copied_end, *self._remote} if tp not in leaders]:
                    self._copied_end.pop(tp, None)
                    self._remote.pop(tp, None)  # another leader may delete or copy meanwhile
            with self._meta_lock:  # still to delete (tiering turned off): neither copied again
                deleting = {tp for tp, _ in self._stopped}  # nor expired meanwhile
            for tp, unified in sorted(leaders.items()):
                if self._stopping.is_set():
                    break
                if unified.config.remote_storage_enable and not unified.is_closed:
                    if tp in deleting:
                        continue
                    if not unified.config.remote_log_copy_disable:  # KIP-950: read only
                        with self._logged(tp, "copying"):  # a failure stops no other partition
                            done += self._copy_partition(tp, unified)
                    with self._logged(tp, "deleting past retention"):
                        self._expire_partition(tp, unified, now_ms)
            self._follow_partitions(leaders)
            return done

    # -- followers (Kafka's RLMFollowerTask) ----------------------------------------------------

    def _follow_partitions(self, leaders: Mapping[TopicPartition, UnifiedLog]) -> None:
        """Learn the store's end of every tiered partition this broker follows (module
        docstring; with ``remote.log.copy.disable`` local retention does not wait for the store:
        none); a partition led again, or no longer here, is forgotten."""
        followers = {
            tp: lg
            for tp, lg in self._followers().items()
            if tp not in leaders and lg.remote_copy_enabled and not lg.is_closed
        }
        for tp in [tp for tp in self._followed if tp not in followers]:
            del self._followed[tp]
        for tp, unified in sorted(followers.items()):
            if self._stopping.is_set():
                return
            bases = unified.segment_base_offsets
            if len(bases) < 2 or bases[1] <= unified.remote_end_offset:
                continue  # its oldest closed segment is known stored (or none): no need yet
            with self._logged(tp, "listing the store's segments of followed"):
                self._follow_partition(tp, unified)

    def _follow_partition(self, tp: TopicPartition, unified: UnifiedLog) -> None:
        """One LIST of the partition's prefix; a GET of its last manifest when that is not the
        one listed last time. A finished manifest of this topic moves the log's
        ``remote_end_offset`` up to its ``next_offset`` (never down, as Kafka's
        ``updateHighestOffsetInRemoteStorage``); anything else (another topic id's segments, a
        segment being deleted, none) moves nothing."""
        store = self._store_once()
        prefix = tp.dir_name + "/"
        found = (
            RemoteLogSegmentMetadata.base_offset_of(n[len(prefix) :]) for n in store.list(prefix)
        )
        last = max((b for b in found if b is not None), default=None)
        if last is None:
            return
        cached = self._followed.get(tp)
        if cached is not None and cached[:2] == (unified.topic_id, last):
            end = cached[2]
        else:
            name = prefix + RemoteLogSegmentMetadata.name_of(last)
            m = read_manifest(store, name)
            if m.state != COPY_SEGMENT_FINISHED or not same_topic(m, unified):
                return
            end = m.next_offset
            self._followed[tp] = (unified.topic_id, last, end)
        unified.update_highest_offset_in_remote_storage(end)

    @contextlib.contextmanager
    def _logged(self, tp: TopicPartition, what: str) -> Iterator[None]:
        """Log an error of one partition's step (the store unreachable, a corrupt manifest)
        with the partition and its prefix; the pass goes on with the next step or partition,
        and the next pass tries it again."""
        try:
            yield
        except Exception:
            log.exception(
                "remote log manager: %s %s in %s failed; tried again at the next pass",
                what,
                tp,
                self.location.describe(tp.dir_name + "/"),
            )

    # -- remote retention (Kafka's RLMExpirationTask) -------------------------------------------

    def _expire_partition(
        self, tp: TopicPartition, unified: UnifiedLog, now_ms: int | None
    ) -> None:
        """Finish the deletions a listing found started, then delete the stored segments past
        retention, oldest first (module docstring), moving the log start first."""
        if tp in self._refused:
            return
        store = self._store_once()
        segments = self.remote_segments(tp, unified)
        with self._meta_lock:
            pending = self._deleting.pop(tp, [])
        self._delete_segments(store, tp, pending)
        doomed = expired_segments(
            segments, unified, unified.clock_ms() if now_ms is None else now_ms
        )
        if not doomed:
            return
        unified.update_log_start_offset_from_remote_tier(doomed[-1].next_offset)
        # the log start moves at most to the high watermark (nor at all, the log closed): only
        # the segments wholly below where it is go
        doomed = [m for m in doomed if m.next_offset <= unified.log_start_offset]
        if not doomed:
            return
        with self._meta_lock:  # readers no longer see them
            cached = self._remote.get(tp)
            if cached is not None:
                cached[1][:] = [m for m in cached[1] if m.base_offset > doomed[-1].base_offset]
        self._delete_segments(store, tp, doomed)
        log.info(
            "remote log manager: deleted segments %d..%d of %s from %s past retention; "
            "log start %d",
            doomed[0].base_offset,
            doomed[-1].next_offset - 1,
            tp,
            store.location.describe(tp.dir_name),
            unified.log_start_offset,
        )

    def _delete_segments(
        self, store: ObjectStore, tp: TopicPartition, segments: list[RemoteLogSegmentMetadata]
    ) -> None:
        """:meth:`_delete_segment` each, oldest first. One that fails drops the partition's
        cached listing (they left the cache and ``_deleting`` before): the next pass lists
        the store again and finishes the marked ones and those below the log start."""
        try:
            for m in segments:
                self._delete_segment(store, tp, m)
        except BaseException:
            with self._meta_lock:
                self._remote.pop(tp, None)
            raise

    def _delete_segment(
        self, store: ObjectStore, tp: TopicPartition, m: RemoteLogSegmentMetadata
    ) -> None:
        """Kafka's ``deleteRemoteLogSegment``: the manifest marked ``DELETE_SEGMENT_STARTED``
        (readers skip it from then on), every object it names deleted, the manifest last. A
        kill anywhere leaves the marked manifest (or nothing); the next listing finishes it."""
        key = f"{tp.dir_name}/{RemoteLogSegmentMetadata.name_of(m.base_offset)}"
        if m.state != DELETE_SEGMENT_STARTED:
            store.write(key, dataclasses.replace(m, state=DELETE_SEGMENT_STARTED).to_json())
        self._count(tp, remote_delete_requests=1)
        self.index_cache.forget(f"{tp.dir_name}/{segment_file_stem(m.base_offset)}.")
        try:
            for f in m.files:
                with contextlib.suppress(FileNotFoundError):
                    store.delete(f"{tp.dir_name}/{f.name}")
            with contextlib.suppress(FileNotFoundError):
                store.delete(key)
        except BaseException:
            self._count(tp, remote_delete_errors=1)
            raise
        self.deleted += 1

    # -- topic deletion ---------------------------------------------------------------------------

    def stop_partitions(self, deleted: list[tuple[TopicPartition, uuid.UUID | None]]) -> None:
        """The partitions of a deleted topic (Kafka's ``stopPartitions`` with delete): their
        stored objects are deleted by the pass thread (scheduled at once), those of their topic
        id only."""
        with self._meta_lock:
            for tp, topic_id in deleted:
                self._stopped.append((tp, "" if topic_id is None else topic_id_to_string(topic_id)))
                self._remote.pop(tp, None)
                self._deleting.pop(tp, None)
                self.index_cache.forget(tp.dir_name + "/")
            write_pending_deletions(self.log_dir, self._stopped)
        if not self._stopping.is_set():
            with contextlib.suppress(Exception):  # shut down meanwhile: the next start does it
                self._scheduler.schedule("remote-log-delete", self._pass, delay_ms=0)

    def _delete_stopped(self) -> None:
        """Delete each stopped partition once per pass; one that fails (a DELETE refused, a
        corrupt manifest) is logged and moved to the back, and the others go on."""
        with self._meta_lock:
            todo = list(self._stopped)
        for entry in todo:
            if self._stopping.is_set():
                return
            tp, topic_id = entry
            try:
                self._delete_partition(self._store_once(), tp, topic_id)
            except Exception:
                log.exception(
                    "remote log manager: deleting deleted %s (topic id %s) from %s "
                    "failed; tried again at the next pass",
                    tp,
                    topic_id or "-",
                    self.location.describe(tp.dir_name + "/"),
                )
                with self._meta_lock:
                    if entry in self._stopped:
                        self._stopped.remove(entry)
                        self._stopped.append(entry)
                        write_pending_deletions(self.log_dir, self._stopped)
                continue
            with self._meta_lock:
                if entry in self._stopped:
                    self._stopped.remove(entry)
                self._copied_end.pop(tp, None)
                write_pending_deletions(self.log_dir, self._stopped)

    def _delete_partition(self, store: ObjectStore, tp: TopicPartition, topic_id: str) -> None:
        """Delete a deleted topic's partition from the store: objects no manifest names
        (interrupted copies) first, while its manifests still refuse a topic created again
        under the name (so none is a new topic's copy), then each segment, oldest first, as
        :meth:`_delete_segment`. Manifests of another topic id are left."""
        prefix = tp.dir_name + "/"
        manifests = list_manifests(store, tp)
        ours = [m for m in manifests if not (m.topic_id and topic_id and m.topic_id != topic_id)]
        if len(ours) == len(manifests):
            named = {prefix + f.name for m in manifests for f in m.files}
            named |= {prefix + RemoteLogSegmentMetadata.name_of(m.base_offset) for m in manifests}
            for name in store.list(prefix):
                if name not in named:
                    with contextlib.suppress(FileNotFoundError):
                        store.delete(name)
        for m in ours:
            self._delete_segment(store, tp, m)
        log.info(
            "remote log manager: deleted %d segments of deleted %s from %s",
            len(ours),
            tp,
            store.location.describe(prefix),
        )

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
            if end <= self._copied_end[tp] or self._stopping.is_set():
                continue
            start = max(base, self._copied_end[tp])  # above base: the store holds its start
            if not self._await_copy_quota():
                break
            self._count(tp, remote_copy_requests=1)
            try:
                self.copy_quota.record(self._segment_file(tp, base).stat().st_size)
                self._copy_segment(store, tp, unified, base, end, start)
            except FileNotFoundError as e:  # deleted meanwhile (DeleteRecords): look again later
                log.warning(
                    "remote log manager: segment %d of %s went during its copy: %s", base, tp, e
                )
                self._count(tp, remote_copy_errors=1)
                self._drop_partial(store, tp, start)
                self._copied_end.pop(tp, None)
                break
            except BaseException:
                self._count(tp, remote_copy_errors=1)
                self._copied_end.pop(tp, None)  # list the store again at the next visit
                raise
            size = self._remember_copied(store, tp, unified, start)
            self._count(tp, remote_copy_bytes=size)
            self._copied_end[tp] = unified.remote_end_offset = end
            self.copied += 1
            done += 1
        return done

    def _segment_file(self, tp: TopicPartition, base: int) -> Path:
        return self.log_dir / tp.dir_name / (segment_file_stem(base) + LOG_SUFFIX)

    def _await_copy_quota(self) -> bool:
        """Wait while copies are over ``remote.log.manager.copy.max.bytes.per.second`` (Kafka's
        RLMCopyTask: a second at most between looks); False when the manager is stopping."""
        throttle = self.copy_quota.throttle_time_ms()
        while throttle > 0:
            log.debug("remote log manager: copy quota exceeded, waiting %d ms", throttle)
            if self._stopping.wait(min(throttle, 1000) / 1000):
                return False
            throttle = self.copy_quota.throttle_time_ms()
        return True

    def _stored_end(
        self, store: ObjectStore, tp: TopicPartition, unified: UnifiedLog
    ) -> int | None:
        """The offset after the last segment of ``tp`` in the store (its manifest's
        ``next_offset``); -1 when the store has none; None when the store's segments came from
        another topic of the same name (another topic id: one deleted and created again),
        logged once: nothing of ``tp`` is copied (nor deleted locally) until they are gone."""
        prefix = tp.dir_name + "/"
        manifests = list_manifests(store, tp)
        if not manifests:
            self._refused.discard(tp)
            self._loaded(tp, unified, [])
            return -1
        last = manifests[-1]
        if not same_topic(last, unified):
            ours = topic_id_to_string(unified.topic_id)  # type: ignore[arg-type]
            if tp not in self._refused:
                self._refused.add(tp)
                log.error(
                    "remote log manager: %s holds segments of topic id %s, not of %s's "
                    "topic id %s (a topic deleted and created again): %s is not tiered "
                    "until they are deleted",
                    store.location.describe(prefix),
                    last.topic_id,
                    tp,
                    ours,
                    tp,
                )
            with self._meta_lock:
                self._remote[tp] = (unified.topic_id, [])  # none of them is this topic's
            return None
        self._refused.discard(tp)
        self._loaded(tp, unified, manifests)
        return last.next_offset

    def remote_segments(
        self, tp: TopicPartition, unified: UnifiedLog
    ) -> list[RemoteLogSegmentMetadata]:
        """The remote segments of ``tp`` (a copy of the cache; listed from the store the first
        time, or when the log's topic id changed). Segments of another topic id are not this
        log's: none then."""
        with self._meta_lock:
            cached = self._remote.get(tp)
            if cached is not None and cached[0] == unified.topic_id:
                return list(cached[1])
        store = self.location.open()
        try:
            manifests = list_manifests(store, tp)
        finally:
            store.release()
        if manifests and not same_topic(manifests[-1], unified):
            manifests = []
        return self._loaded(tp, unified, manifests)

    def _loaded(
        self, tp: TopicPartition, unified: UnifiedLog, manifests: list[RemoteLogSegmentMetadata]
    ) -> list[RemoteLogSegmentMetadata]:
        """Cache a listing's manifests: the finished ones are the remote segments, the
        ``DELETE_SEGMENT_STARTED`` ones are deleted by the next pass. The log start moves up
        to the first remote offset if it lies below (a deletion decided before a restart whose
        log-start-offset-checkpoint was not written yet; Kafka's leader takes the remote log
        start from the metadata too), never above the first local offset; a store holding no
        manifest of the partition moves nothing."""
        segments = finished(manifests)
        with self._meta_lock:
            if tp in self._remote and self._remote[tp][0] != unified.topic_id:
                self.index_cache.forget(tp.dir_name + "/")  # another topic's, under the name
            self._remote[tp] = (unified.topic_id, segments)
            started = [m for m in manifests if m.state == DELETE_SEGMENT_STARTED]
            if started:
                self._deleting[tp] = started
        if segments or started:  # an empty store (another location?) moves nothing
            local = unified.local_log_start_offset
            floor = min(segments[0].base_offset if segments else local, local)
            if unified.log_start_offset < floor:
                unified.update_log_start_offset_from_remote_tier(floor)
        return list(segments)

    # -- a follower's restart from the store (Kafka's buildRemoteLogAuxState) -------------------

    def remote_log_aux_state(
        self, tp: TopicPartition, unified: UnifiedLog, leader_local_start: int
    ) -> RemoteLogAuxState | None:
        """The stored segment holding ``leader_local_start - 1`` (one LIST, one GET of its
        manifest) and its leader epochs and producer snapshot (a GET each, checked against the
        manifest's size and SHA-256). :class:`RemoteStorageError` naming the partition and the
        offset when the store fails (the follower backs off and asks again, as Kafka's fetcher
        does). ``None``, logged, when this broker's store holds no such finished segment of
        this topic: it is not the leader's store (its ``rsm_config`` names another location),
        since a leader deletes locally only what its store holds; the follower then restarts
        without that state rather than never."""
        what = f"building the state below offset {leader_local_start}"
        self._count(tp, build_remote_log_aux_state_requests=1)
        try:
            with store_errors(self.location, tp, what):
                store = self.location.open()
                try:
                    aux = build_remote_log_aux_state(store, tp, unified, leader_local_start)
                finally:
                    store.release()
        except RemoteStorageError:
            self.aux_state_failures += 1
            self._count(tp, build_remote_log_aux_state_errors=1)
            raise
        if aux is None:
            self.aux_state_failures += 1
            self._count(tp, build_remote_log_aux_state_errors=1)
            log.warning(
                "remote log manager: %s holds no segment of %s with offset %d (another "
                "store than its leader's?): the follower restarts at %d without the "
                "producer state and leader epochs below it",
                self.location.describe(tp.dir_name + "/"),
                tp,
                leader_local_start - 1,
                leader_local_start,
            )
            return None
        self.aux_states_built += 1
        return aux

    # -- reads (remote_log_reader.py) ---------------------------------------------------------

    def async_read(
        self, info: RemoteStorageFetchInfo, unified: UnifiedLog, on_done: Callable[[], None]
    ) -> Future[RemoteLogReadResult]:
        return self.reader.async_read(info, unified, on_done)

    def read(self, info: RemoteStorageFetchInfo, unified: UnifiedLog) -> RemoteLogReadResult:
        return self.reader.read(info, unified)

    def find_offset_by_timestamp(
        self, tp: TopicPartition, unified: UnifiedLog, timestamp: int
    ) -> TimestampAndOffset | None:
        return self.reader.find_offset_by_timestamp(tp, unified, timestamp)

    def _remember_copied(
        self, store: ObjectStore, tp: TopicPartition, unified: UnifiedLog, base: int
    ) -> int:
        """Add the manifest just written to the cache (read back: the one readers see); the
        size of its ``.log``."""
        name = f"{tp.dir_name}/{RemoteLogSegmentMetadata.name_of(base)}"
        manifest = read_manifest(store, name)
        with self._meta_lock:
            cached = self._remote.get(tp)
            if cached is not None and cached[0] == unified.topic_id:
                cached[1].append(manifest)
        return manifest.size_in_bytes

    def _count(self, tp: TopicPartition, **amounts: int) -> None:
        """Add to the broker's tiered storage meters of ``tp``'s topic, when they are kept
        (broker_topic_stats.py)."""
        stats = self.topic_stats()
        if stats is not None:
            stats.add(tp.topic, **amounts)

    def remote_copy_lag(self) -> dict[TopicPartition, tuple[int, int]]:
        """Per tiered partition this broker leads and copies: the bytes and the count of its
        closed segments not in the store yet (UnifiedLog.remote_copy_lag), now."""
        return {
            tp: lg.remote_copy_lag()
            for tp, lg in self._leaders().items()
            if lg.remote_copy_enabled and not lg.is_closed
        }

    def remote_log_size_bytes(self) -> dict[TopicPartition, int]:
        """The bytes in the store of each partition this broker leads whose stored segments it
        has listed (Kafka's ``RemoteLogSizeBytes``): the sizes of their manifests' ``.log``."""
        with self._meta_lock:
            return {
                tp: sum(m.size_in_bytes for m in segments)
                for tp, (_, segments) in self._remote.items()
            }

    def _drop_partial(self, store: ObjectStore, tp: TopicPartition, base: int) -> None:
        """Delete what an abandoned copy of segment ``base`` left (it has no manifest), so that
        no ``.log`` without a manifest sits below later segments' manifests. ``<base>.snapshot``
        stays: it is the previous segment's producer snapshot (at its end), which that
        segment's manifest names."""
        prefix = f"{tp.dir_name}/{segment_file_stem(base)}."
        kept = f"{tp.dir_name}/{snapshot_file_name(base)}"
        for name in store.list(prefix.rpartition("/")[0] + "/"):
            if name.startswith(prefix) and name != kept:
                store.delete(name)

    def _copy_segment(
        self,
        store: ObjectStore,
        tp: TopicPartition,
        unified: UnifiedLog,
        base: int,
        end: int,
        start: int,
    ) -> None:
        """Copy segment ``base`` (ending at ``end``) from offset ``start``: the whole segment,
        or (``start`` above ``base``: this broker became leader and the store already holds
        the segment's first offsets, copied from another replica whose segments were cut
        elsewhere) its batches from ``start`` on, staged as a segment based at ``start``."""
        directory = self.log_dir / tp.dir_name
        extras: dict[str, bytes] = {}
        snapshot = directory / snapshot_file_name(end)
        if snapshot.is_file():
            extras[snapshot.name] = snapshot.read_bytes()
        epochs = [e for e in unified.leader_epoch_cache.entries() if e.start_offset < end]
        epoch_file = LeaderEpochCheckpointFile(directory / LEADER_EPOCH_CHECKPOINT)
        extras[segment_file_stem(start) + LEADER_EPOCH_SUFFIX] = epoch_file.format(epochs)
        source = self.log_dir
        if start > base:
            source = stage_tail(self.log_dir, tp, base, start, unified.config.index_interval_bytes)
        try:
            # objects an interrupted copy left are overwritten: no manifest names them
            upload = SegmentUpload(
                source, store, {}, False, False, lambda _: None, mtime_when_no_timestamp=True
            )
            upload.segment(tp, start, extras)
        finally:
            if start > base:
                shutil.rmtree(source, ignore_errors=True)
        log.info(
            "remote log manager: copied segment %d..%d of %s to %s (%d bytes)",
            start,
            end - 1,
            tp,
            store.location.describe(tp.dir_name),
            upload.sent,
        )
