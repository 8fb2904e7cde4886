"""A fetch waiting for its remote read (Kafka's ``DelayedRemoteFetch``).

A consumer's fetch whose offset of a tiered partition lies below the local log start (only in
the store) is answered from the store: the replica manager reads every partition of the request
locally, and the first partition needing remote data is read on the remote log manager's reader
pool (remote_log_manager.py, ``remote.log.reader.threads``), off the request threads; the others
needing it answer no records this time (Kafka reads one partition's remote data per Fetch). The
operation completes when the remote read finished (the pool's callback completes it through the
purgatory, keyed by the partition) or after ``remote.fetch.max.wait.ms`` (default 500): then
that partition answers no records and no error, the read is cancelled if it has not started
(a started one ends on its own within the store's request bounds, object_store.py), and the
consumer asks again. The answer is the local reads with that partition's records (or its
error: OFFSET_OUT_OF_RANGE, or UNKNOWN_SERVER_ERROR for a store that failed) put in.

``respond`` (the Fetch API's non-blocking path) is called exactly once with the answer, by
whichever thread completes it; :meth:`wait` returns it (the blocking path).

Thread safety: the purgatory serializes ``try_complete``; the future is thread-safe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import Future

from broker_embedded.common.fetch_request import FetchResponse, PartitionFetchResult
from broker_embedded.common.purgatory import DelayedOperation
from broker_embedded.errors import KafkaApiError, RemoteStorageError
from broker_embedded.storage.remote_log_reader import RemoteLogReadResult
from broker_embedded.storage.remote_storage_fetch_info import RemoteStorageFetchInfo


class DelayedRemoteFetch(DelayedOperation):
    """See the module docstring. ``local``: the response of the local reads, holding an empty
    answer for ``info``'s partition at ``info.index``."""

    def __init__(
        self,
        local: FetchResponse,
        info: RemoteStorageFetchInfo,
        future: Future[RemoteLogReadResult],
        max_wait_ms: int,
        respond: Callable[[FetchResponse | Exception], None] | None = None,
    ) -> None:
        super().__init__(max_wait_ms)
        self.local, self.info, self.future = local, info, future
        self._respond = respond

    def try_complete(self) -> bool:
        return self.future.done() and self.force_complete()

    def on_complete(self) -> FetchResponse:
        response = self.local
        if self.future.done() and not self.future.cancelled():
            parts = list(response.partitions)
            parts[self.info.index] = _answer(parts[self.info.index], self.future)
            response = FetchResponse(tuple(parts))
        if self._respond is not None:
            self._respond(response)
        return response

    def on_expiration(self) -> None:
        self.future.cancel()  # not started yet: never runs


def _answer(
    placeholder: PartitionFetchResult, future: Future[RemoteLogReadResult]
) -> PartitionFetchResult:
    error = future.exception()
    if error is not None:
        if not isinstance(error, KafkaApiError):
            error = RemoteStorageError(f"reading {placeholder.topic_partition} remotely: {error}")
        # Kafka's createLogReadResult(e): the offsets unknown (-1), no records
        return PartitionFetchResult(placeholder.topic_partition, error)
    result = future.result()
    aborted = result.aborted_transactions
    return dataclasses.replace(
        placeholder,
        records=result.records,
        aborted_transactions=aborted,
        readable_bytes=len(result.records),
    )
