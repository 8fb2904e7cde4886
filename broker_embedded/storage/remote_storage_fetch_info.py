"""What a Fetch asks of remote storage for one partition (Kafka's ``RemoteStorageFetchInfo``):
:class:`RemoteStorageFetchInfo`.

Made by the replica manager when a consumer's fetch offset of a tiered partition lies in
``[log start offset, local log start offset)`` (unified_log.py raises
``OffsetMovedToTieredStorageError``), for the first such partition of the request only (Kafka
reads one partition's remote data per Fetch), and read by the remote log manager's reader pool
(remote_log_manager.py). ``max_bytes`` is the partition's share of the response's budget,
``min_one_message`` whether this is the response's first data (KIP-74: then the first batch is
sent whole whatever its size), ``index`` the partition's place in the response.

Immutable: thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_embedded.storage.fetch_data_info import FetchIsolation
from broker_embedded.storage.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class RemoteStorageFetchInfo:
    """One partition's remote read; see the module docstring."""

    topic_partition: TopicPartition
    fetch_offset: int
    max_bytes: int
    min_one_message: bool
    isolation: FetchIsolation
    index: int
