"""What the object store holds of one segment: :class:`RemoteLogSegmentMetadata`, the segment's
manifest (Kafka's name for a tiered segment's record, KIP-405).

Layout: a JSON object beside the segment's files, ``<topic>-<partition>/<20-digit base
offset>.segment.json``::

    {"version": 1, "state": "COPY_SEGMENT_FINISHED", "base_offset": 0, "next_offset": 812,
     "size_in_bytes": 1048576, "max_timestamp_ms": 1700000000000,
     "files": {"00000000000000000000.log": {"size": 1048576, "sha256": "..."},
               "00000000000000000000.index": {...}, "00000000000000000000.timeindex": {...}}}

Invariants: the manifest is written after every file it names was uploaded and verified (size
and SHA-256 read back), and deleted before any of them is: a segment is in the store exactly
when its manifest is, and readers see no other (a ``.log`` without a manifest is an upload in
progress or interrupted). ``next_offset`` is the next segment's base offset (Kafka's
``endOffset`` plus one: past the last batch when the cleaner removed the segment's last
batches), or the log end for the last one; ``size_in_bytes`` the ``.log``'s
size; ``max_timestamp_ms`` the largest record timestamp (-1: none; Kafka's ``maxTimestampMs``),
so that a lookup by timestamp reads only the segments that may hold it; ``topic_id`` (absent
when the partition has no ``partition.metadata``) the topic id of the partition it came from,
since the keys carry only the topic's name (a topic deleted and created again has a new id).
``state`` is Kafka's
``RemoteLogSegmentState``: the uploader writes only ``COPY_SEGMENT_FINISHED``; a broker that
tiers segments (remote_log_manager.py) writes the same manifest, and rewrites it as
``DELETE_SEGMENT_STARTED`` before it deletes the segment's objects (remote retention, topic
deletion), deleting the manifest last: a segment so marked is no longer stored, and readers
skip it. Writers may add fields (readers ignore fields they do not know; ``version`` changes
only when a known field changes meaning).

Immutable values; thread-safe.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker_embedded.storage.log_file_utils import segment_file_stem

if TYPE_CHECKING:
    from broker_embedded.storage.object_store import ObjectStore
    from broker_embedded.storage.topic_partition import TopicPartition

MANIFEST_SUFFIX = ".segment.json"
VERSION = 1
COPY_SEGMENT_FINISHED = "COPY_SEGMENT_FINISHED"
DELETE_SEGMENT_STARTED = "DELETE_SEGMENT_STARTED"
MANIFEST_READS = 3  # reads of a manifest that does not parse before it is malformed


@dataclass(frozen=True, slots=True)
class StoredFile:
    """One file of a segment as stored: its name, size and SHA-256 (hex)."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """The manifest of one stored segment; see the module docstring."""

    base_offset: int
    next_offset: int
    size_in_bytes: int
    files: tuple[StoredFile, ...]
    max_timestamp_ms: int = -1
    state: str = COPY_SEGMENT_FINISHED
    topic_id: str = ""  # the partition's topic id (partition.metadata), "" when it has none

    @staticmethod
    def name_of(base_offset: int) -> str:
        """The manifest's file name (beside the segment's files)."""
        return segment_file_stem(base_offset) + MANIFEST_SUFFIX

    @staticmethod
    def base_offset_of(name: str) -> int | None:
        """The base offset of a manifest's file name, ``None`` for another name."""
        stem = name.removesuffix(MANIFEST_SUFFIX)
        if stem == name or len(stem) != 20 or not stem.isdigit():
            return None
        return int(stem)

    def to_json(self) -> bytes:
        files = {f.name: {"size": f.size, "sha256": f.sha256} for f in self.files}
        return json.dumps(
            {
                "version": VERSION,
                "state": self.state,
                "base_offset": self.base_offset,
                "next_offset": self.next_offset,
                "size_in_bytes": self.size_in_bytes,
                "files": files,
                "max_timestamp_ms": self.max_timestamp_ms,
                **({"topic_id": self.topic_id} if self.topic_id else {}),
            },
            indent=1,
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes, source: str) -> RemoteLogSegmentMetadata:
        """Parse a manifest; a malformed one is a ``ValueError`` naming ``source``."""
        try:
            raw = json.loads(data)
            files = tuple(
                StoredFile(n, int(f["size"]), str(f["sha256"]))
                for n, f in sorted(raw["files"].items())
            )
            return cls(
                int(raw["base_offset"]),
                int(raw["next_offset"]),
                int(raw["size_in_bytes"]),
                files,
                int(raw.get("max_timestamp_ms", -1)),
                str(raw["state"]),
                str(raw.get("topic_id", "")),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"malformed segment manifest {source}: {e}") from None


def read_manifest(store: ObjectStore, name: str) -> RemoteLogSegmentMetadata:
    """The manifest ``name`` of ``store``, read whole and parsed; errors name it as the store's
    location describes it. A manifest a broker replaces meanwhile (its state moving on, the new
    one longer) can be read cut: the store's reader takes the length from a HEAD before its GET,
    which then returns that many bytes of the new object. So one that does not parse is read
    again, up to :data:`MANIFEST_READS` times in all, before it is the ``ValueError`` naming
    it. ``FileNotFoundError``: it is not there (or no longer)."""
    where = store.location.describe(name)
    for _ in range(MANIFEST_READS - 1):
        with contextlib.suppress(ValueError):
            return RemoteLogSegmentMetadata.from_json(store.read(name), where)
    return RemoteLogSegmentMetadata.from_json(store.read(name), where)


def list_manifests(store: ObjectStore, tp: TopicPartition) -> list[RemoteLogSegmentMetadata]:
    """The manifests of ``tp`` in the store, in offset order: one listing, one GET each."""
    prefix = tp.dir_name + "/"
    found = (RemoteLogSegmentMetadata.base_offset_of(n[len(prefix) :]) for n in store.list(prefix))
    manifests = []
    for base in sorted(b for b in found if b is not None):
        manifests.append(read_manifest(store, prefix + RemoteLogSegmentMetadata.name_of(base)))
    return manifests


def finished(manifests: list[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentMetadata]:
    """The segments that are remote: a ``COPY_SEGMENT_FINISHED`` manifest (one marked
    ``DELETE_SEGMENT_STARTED`` is being deleted: no reader may read it)."""
    return [m for m in manifests if m.state == COPY_SEGMENT_FINISHED]
