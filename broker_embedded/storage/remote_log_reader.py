"""Reads of tiered segments for consumers (Kafka's ``RemoteLogReader`` and
``RemoteLogManager.read``): the replica manager hands a consumer's Fetch of an offset below the
local log start to :meth:`RemoteLogReader.async_read` (delayed_remote_fetch.py waits for it at
most ``remote.fetch.max.wait.ms``), which runs :meth:`RemoteLogReader.read` on a pool of
``remote.log.reader.threads`` threads, at most ``remote.log.reader.max.pending.tasks`` queued:
the stored segment holding the offset, read by object_store_fetch_source.py (its ``.index``,
ranged GETs of its ``.log``; a fresh store handle per read), whole batches of that segment
within the partition's max bytes (KIP-74: the first whole when ``min_one_message``); for
read_committed, the aborted transactions of the stored ``.txnindex`` files and of the local
segments (begun in the store, their marker local), as Kafka collects them.
:meth:`RemoteLogReader.find_offset_by_timestamp` is ListOffsets by timestamp in the store (on
the request thread, as Kafka 3.9's). Which segments are remote comes from the remote log
manager's manifest cache (remote_log_manager.py). The parsed offset indexes of the segments
read are kept (remote_index_cache.py, 64 MiB). Each read's bytes count against
``remote.log.manager.fetch.max.bytes.per.second`` (rlm_quota_manager.py).

A store that fails a read is logged with its key and answered :class:`RemoteStorageError`
(UNKNOWN_SERVER_ERROR, as Kafka answers its ``RemoteStorageException``).

Thread safety: reads run on the pool; the index cache and the quota lock themselves.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass

from broker_embedded.errors import (
    KafkaApiError,
    KafkaLogError,
    OffsetOutOfRangeError,
    RemoteStorageError,
)
from broker_embedded.record import entry_scan as es
from broker_embedded.record.header_reads import readonly_bytes
from broker_embedded.storage.fetch_data_info import FetchIsolation, IsolationLevel
from broker_embedded.storage.local_log import end_of_complete_batches
from broker_embedded.storage.log_segment import TimestampAndOffset
from broker_embedded.storage.object_store import StoreLocation
from broker_embedded.storage.object_store_fetch_source import (
    ObjectStoreFetchSource,
    ObjectStoreSource,
    StoredPartition,
)
from broker_embedded.storage.remote_index_cache import RemoteIndexCache
from broker_embedded.storage.remote_log_segment_metadata import RemoteLogSegmentMetadata
from broker_embedded.storage.remote_storage_fetch_info import RemoteStorageFetchInfo
from broker_embedded.storage.remote_storage_thread_pool import (
    RemoteReadRejectedError,
    RemoteStorageThreadPool,
)
from broker_embedded.storage.rlm_quota_manager import RLMQuotaManager
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.transaction_index import FILE_SUFFIX as TXN_INDEX_SUFFIX
from broker_embedded.storage.transaction_index import AbortedTxn
from broker_embedded.storage.unified_log import UnifiedLog

log = logging.getLogger(__name__)

Segments = Callable[[TopicPartition, UnifiedLog], list[RemoteLogSegmentMetadata]]


@dataclass(frozen=True, slots=True)
class RemoteLogReadResult:
    """The batches a remote read found (whole batches of one stored segment; empty when the
    first one exceeds ``max_bytes`` without ``min_one_message``) and, for read_committed, the
    aborted transactions overlapping them (Kafka's ``RemoteLogReadResult``)."""

    records: bytes
    aborted_transactions: tuple[AbortedTxn, ...] | None


class RemoteLogReader:
    """The reads of one broker's tiered partitions: ``segments`` gives a partition's stored
    segments (the manager's cache), ``count`` adds to the broker's meters."""

    def __init__(
        self,
        broker_id: int,
        location: StoreLocation,
        segments: Segments,
        count: Callable[..., None],
        threads: int,
        max_pending_tasks: int,
        fetch_quota: RLMQuotaManager,
    ) -> None:
        self.location = location
        self._segments = segments
        self._count = count
        self.fetch_quota = fetch_quota
        self.index_cache = RemoteIndexCache()
        name = f"remote-log-reader-{broker_id}"
        self._pool = RemoteStorageThreadPool(name, threads, max_pending_tasks)

    def shutdown(self) -> None:
        self._pool.shutdown()

    def async_read(
        self, info: RemoteStorageFetchInfo, unified: UnifiedLog, on_done: Callable[[], None]
    ) -> Future[RemoteLogReadResult]:
        """Run :meth:`read` on the reader pool; ``on_done`` is called when it finished (or
        was cancelled). A full queue (``remote.log.reader.max.pending.tasks``) is a
        :class:`RemoteStorageError` at once (Kafka's RejectedExecutionException)."""
        try:
            future = self._pool.submit(lambda: self.read(info, unified))
        except RemoteReadRejectedError as e:
            raise RemoteStorageError(
                f"remote read of {info.topic_partition} at offset {info.fetch_offset} refused: {e}"
            ) from None
        future.add_done_callback(lambda _: on_done())
        return future

    def read(self, info: RemoteStorageFetchInfo, unified: UnifiedLog) -> RemoteLogReadResult:
        """The batches at ``info.fetch_offset`` from the stored segment holding it (module
        docstring): OFFSET_OUT_OF_RANGE when no stored segment holds it, a
        :class:`RemoteStorageError` (UNKNOWN_SERVER_ERROR, as Kafka's RemoteStorageException)
        naming the key when the store fails (counted as Kafka's ``RemoteLogReader`` counts)."""
        self._count(info.topic_partition, remote_fetch_requests=1)
        try:
            result = self._read(info, unified)
        except RemoteStorageError:
            self._count(info.topic_partition, remote_fetch_errors=1)
            raise
        self._count(info.topic_partition, remote_fetch_bytes=len(result.records))
        self.fetch_quota.record(len(result.records))
        return result

    def _read(self, info: RemoteStorageFetchInfo, unified: UnifiedLog) -> RemoteLogReadResult:
        tp, offset = info.topic_partition, info.fetch_offset
        segments = self._segments_or_error(tp, unified, f"fetching offset {offset}")
        if not segments or not segments[0].base_offset <= offset < segments[-1].next_offset:
            held = "none"
            if segments:
                held = f"[{segments[0].base_offset}, {segments[-1].next_offset})"
            raise OffsetOutOfRangeError(
                f"fetch offset {offset} of {tp} is not in remote storage: "
                f"{self.location.describe(tp.dir_name)} holds offsets {held}"
            )
        committed = info.isolation is FetchIsolation.TXN_COMMITTED
        level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        stored = stored_partition(tp, segments, unified)
        with store_errors(self.location, tp, f"fetching offset {offset}"):
            with self._source(tp, stored, segments[-1].topic_id) as src:
                fetched = src.fetch(tp, offset, info.max_bytes, level)
        records = whole_batches(fetched.records)
        if not info.min_one_message and len(records) > info.max_bytes:
            records = b""  # Kafka: without min_one_message a batch too large is not sent
        aborted = None
        if committed:
            found = {(pid, first) for pid, first in fetched.aborted_transactions or ()}
            end = end_of_complete_batches(records, offset)
            for a in unified.collect_aborted_transactions(unified.local_log_start_offset, end):
                found.add((a.producer_id, a.first_offset))  # markers in local segments
            aborted = tuple(AbortedTxn(pid, first, -1, -1) for pid, first in sorted(found))
        return RemoteLogReadResult(records, aborted)

    def find_offset_by_timestamp(
        self, tp: TopicPartition, unified: UnifiedLog, timestamp: int
    ) -> TimestampAndOffset | None:
        """ListOffsets by timestamp in the store (Kafka's ``findOffsetByTimestamp``): the first
        stored segment whose manifest's ``max_timestamp_ms`` reaches ``timestamp`` (from the
        cache: no GET for the others), its ``.timeindex`` and ``.index``, and a walk of its
        batches, at or above the log start offset; ``None`` when no stored record has one (the
        caller then looks in the local log)."""
        segments = self._segments_or_error(tp, unified, f"looking up timestamp {timestamp}")
        start = unified.log_start_offset
        reaching = (
            i
            for i, m in enumerate(segments)
            if m.max_timestamp_ms >= timestamp and m.next_offset > start
        )
        first = next(reaching, None)
        if first is None:
            return None
        stored = stored_partition(tp, segments[first:], unified)
        with store_errors(self.location, tp, f"looking up timestamp {timestamp}"):
            with self._source(tp, stored, segments[-1].topic_id) as src:
                return src.offset_for_time(tp, timestamp)

    def _source(
        self, tp: TopicPartition, stored: StoredPartition, topic_id: str
    ) -> ObjectStoreFetchSource:
        """A reader of ``stored`` (a fresh store handle: one thread uses it), with the broker's
        offset index cache (its entries keyed by ``topic_id`` too, the manifests')."""
        return ObjectStoreFetchSource(
            ObjectStoreSource(self.location, ((tp, stored),)), self.index_cache, topic_id
        )

    def _segments_or_error(
        self, tp: TopicPartition, unified: UnifiedLog, what: str
    ) -> list[RemoteLogSegmentMetadata]:
        with store_errors(self.location, tp, what):
            return self._segments(tp, unified)


@contextlib.contextmanager
def store_errors(location: StoreLocation, tp: TopicPartition, what: str) -> Iterator[None]:
    """A store that fails (after object_store.py's retries), a missing or corrupt object:
    logged with its key, and the request's answer is :class:`RemoteStorageError`."""
    try:
        yield
    except KafkaApiError:
        raise
    except (KafkaLogError, OSError, ValueError) as e:
        log.error(
            "remote log manager: %s of %s in %s failed: %s",
            what,
            tp,
            location.describe(tp.dir_name),
            e,
        )
        raise RemoteStorageError(f"{what} of {tp} in remote storage failed: {e}") from e


def stored_partition(
    tp: TopicPartition, segments: list[RemoteLogSegmentMetadata], unified: UnifiedLog
) -> StoredPartition:
    """The remote segments as the object-store reader's planned partition: every stored offset
    is below the last stable offset (only such segments are copied)."""
    bases = tuple(m.base_offset for m in segments)
    end = segments[-1].next_offset
    txns = tuple(
        m.base_offset for m in segments if any(f.name.endswith(TXN_INDEX_SUFFIX) for f in m.files)
    )
    start = min(max(unified.log_start_offset, bases[0]), end)
    return StoredPartition(
        bases, tuple(m.size_in_bytes for m in segments), end, end, start, end, txns
    )


def whole_batches(records: bytes | memoryview) -> bytes:
    """``records`` up to the end of its last whole batch (a fetch's bytes end in whole batches,
    as local reads do: local_log.py)."""
    if not len(records):
        return b""
    status, at, _, _ = es.seek_entry(readonly_bytes(records), 0, len(records), es.NO_TARGET)
    return bytes(records[: int(at)] if status in (es.SEEK_END, es.SEEK_PARTIAL) else records)
