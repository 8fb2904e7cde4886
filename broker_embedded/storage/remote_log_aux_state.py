"""What a follower restarting its log from remote storage takes from the store (Kafka's
``TierStateMachine.buildRemoteLogAuxState``): :func:`build_remote_log_aux_state` finds the
stored segment holding the offset below the leader's local log start (one LIST, one GET of its
manifest) and reads its leader epochs (``<base>.leader-epoch-checkpoint``) and the producer
snapshot at its end (``<next offset>.snapshot``), each checked against the manifest's size and
SHA-256, the epochs checked to increase and the snapshot decoded once (a damaged one is
refused). Stateless: any thread, with its own store handle.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass

from broker_embedded.errors import RemoteStorageError
from broker_embedded.storage.leader_epoch_checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    EpochEntry,
    LeaderEpochCheckpointFile,
)
from broker_embedded.storage.log_file_utils import segment_file_stem
from broker_embedded.storage.object_store import ObjectStore
from broker_embedded.storage.partition_metadata import topic_id_to_string
from broker_embedded.storage.remote_log_segment_metadata import (
    COPY_SEGMENT_FINISHED,
    RemoteLogSegmentMetadata,
    read_manifest,
)
from broker_embedded.storage.snapshot_file import decode_snapshot, snapshot_file_name
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import UnifiedLog

LEADER_EPOCH_SUFFIX = "." + LEADER_EPOCH_CHECKPOINT


@dataclass(frozen=True, slots=True)
class RemoteLogAuxState:
    """What a follower restarting its log from remote storage takes from the store (Kafka's
    ``buildRemoteLogAuxState``): the stored segment holding the offset below the leader's
    local log start ends at ``next_offset``, where the follower's log restarts; its leader
    epochs (``<base>.leader-epoch-checkpoint``) and the producer snapshot at its end
    (``<next offset>.snapshot``, decoded once; ``None`` when the copy had none)."""

    next_offset: int
    leader_epochs: tuple[EpochEntry, ...]
    producer_snapshot: bytes | None


def same_topic(manifest: RemoteLogSegmentMetadata, unified: UnifiedLog) -> bool:
    """Whether a manifest is of ``unified``'s topic (a manifest or a log without a topic id
    counts as the same)."""
    ours = "" if unified.topic_id is None else topic_id_to_string(unified.topic_id)
    return not (manifest.topic_id and ours and manifest.topic_id != ours)


def build_remote_log_aux_state(
    store: ObjectStore, tp: TopicPartition, unified: UnifiedLog, leader_local_start: int
) -> RemoteLogAuxState | None:
    prefix = tp.dir_name + "/"
    found = (RemoteLogSegmentMetadata.base_offset_of(n[len(prefix) :]) for n in store.list(prefix))
    base = max((b for b in found if b is not None and b < leader_local_start), default=None)
    m = None
    if base is not None:
        name = prefix + RemoteLogSegmentMetadata.name_of(base)
        m = read_manifest(store, name)
    usable = m is not None and m.state == COPY_SEGMENT_FINISHED and same_topic(m, unified)
    if m is None or not usable or m.next_offset < leader_local_start:
        return None
    files = {f.name: f for f in m.files}

    def fetched(name: str) -> bytes | None:
        f = files.get(name)
        if f is None:
            return None
        data = store.read(prefix + name)
        if len(data) != f.size or hashlib.sha256(data).hexdigest() != f.sha256:
            raise RemoteStorageError(
                f"{store.location.describe(prefix + name)} differs "
                "from its manifest (size or SHA-256)"
            )
        return data

    epochs_file = fetched(segment_file_stem(m.base_offset) + LEADER_EPOCH_SUFFIX)
    epochs = []
    if epochs_file is not None:
        checkpoint = LeaderEpochCheckpointFile(unified.directory / LEADER_EPOCH_CHECKPOINT)
        epochs = checkpoint.parse(epochs_file)
        if any(
            a.epoch >= b.epoch or a.start_offset > b.start_offset
            for a, b in itertools.pairwise(epochs)
        ):
            raise RemoteStorageError(
                f"the leader epochs of {prefix}{m.base_offset} in "
                f"{store.location.describe(prefix)} do not increase: "
                f"{epochs}"
            )
    snapshot = fetched(snapshot_file_name(m.next_offset))
    if snapshot is not None:
        decode_snapshot(snapshot, store.location.describe(prefix))  # refused if corrupt
    return RemoteLogAuxState(m.next_offset, tuple(epochs), snapshot)
