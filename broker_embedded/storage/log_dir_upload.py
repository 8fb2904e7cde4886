"""Copying a log dir to object storage: :func:`upload_log_dir` (``kafkalog upload``), and the
object layout that readers (object_store_fetch_source.py) expect.

Layout: a mirror of the log dir under the location's prefix, file for file, with one manifest
per stored segment (remote_log_segment_metadata.py)::

    <prefix>/
      kafkalog-last-stable-offset-checkpoint  each partition's LSO (a log dir uploaded whole)
      replication-offset-checkpoint      \\
      log-start-offset-checkpoint         | the log dir's own files, written last
      recovery-point-offset-checkpoint    | (after every segment)
      cleaner-offset-checkpoint           |
      meta.properties, kafkalog-topics.json /
      <topic>-<partition>/
        00000000000000000000.log          the segment's files, as on disk
        00000000000000000000.index
        00000000000000000000.timeindex
        00000000000000000000.txnindex     (when the segment has one)
        00000000000000000000.segment.json the manifest: written once the files above are verified
        leader-epoch-checkpoint, partition.metadata   (after the partition's segments)

A mirror because a downloaded copy is a log dir again (Kafka ignores the manifests), and
because the broker's tiering (remote_log_manager.py) can write the same keys: a tiered segment is a
stored segment with its manifest, whoever copied it. Why manifests: an object store has no
atomic rename, so a reader needs one object that says a segment is complete (and its offsets,
without reading the segment); the uploader needs a record of what it verified, to skip it on a
rerun without reading it back.

Which segments: all of a log dir no broker holds (its ``.lock`` is free: a stopped broker's or a
copied log dir); of a log dir a broker holds, all but each partition's last (the active segment,
still appended to). Of a log dir uploaded whole, the last stable offsets too, as the read-only
view computes them (:data:`LAST_STABLE_OFFSET_CHECKPOINT`): read_committed readers need them.
Of a log dir a broker holds the stored ones are deleted first: they would hold read_committed
readers at an old offset, and offsets computed now would be wrong below the stored end for a
transaction whose marker is in the active segment (its ``.txnindex`` is not stored), so
read_committed is refused instead. A segment whose ``.log`` the broker deletes during the run
(retention, DeleteRecords; Kafka renames the ``.log`` first) is skipped and reported
(:attr:`UploadReport.gone`), what was stored of it deleted, as the remote log manager's copy
does; a partition directory gone likewise.

A manifest's ``next_offset`` is the next local segment's base offset when there is one (Kafka's
``endOffset`` is that minus one), also for a segment whose last batches the cleaner removed,
so that the stored segments of a partition are contiguous and readers can tell a gap (a
segment missing from the store) from a compacted tail.

Each segment is uploaded file by file, each file verified by its size and its SHA-256 read back
from the store, then its manifest. A rerun (resuming after an
interruption) lists the store once and, per segment:

- manifest present and equal to the local segment's (every file's size and SHA-256), and every
  object of the right size: skipped (``verify=True`` also reads them back and compares hashes);
- manifest present but an object missing or of another size, or (``verify``) another hash:
  repaired (the segment uploaded again);
- manifest present and different from the local segment (another log dir, or a segment the
  cleaner rewrote since): refused, an :class:`UploadConflictError` naming the key, unless
  ``replace=True``;
- manifest present, equal files but another ``next_offset`` (an older kafkalog's, ending at a
  compacted segment's last batch): the manifest rewritten (repaired);
- no manifest: uploaded (objects left by an interrupted run are overwritten).

With ``replace=True``, once a partition's segments are stored, the stored segments of it that
the log dir does not have are deleted (each manifest first, then every other object of the
segment): those based inside the range of the segments just stored (the cleaner merged them
into others: their old, uncompacted batches would still be served) and those of another topic
id than the local partition's (a topic deleted and created again), wherever they lie. Stored
segments below the log dir's first (retention deleted them locally) or past its last of the
same topic are kept. Deleting after the new segments are stored keeps the store readable
meanwhile: readers read an overlapped segment from the previous one's end.

Memory: one chunk (8 MiB) of a file at a time. Not thread-safe: one upload per location at a time.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from broker_embedded.errors import KafkaLogError
from broker_embedded.storage.leader_epoch_checkpoint import LEADER_EPOCH_CHECKPOINT
from broker_embedded.storage.log_dir import META_PROPERTIES, LogDir, check_log_dir
from broker_embedded.storage.log_dir_lock import LogDirLock
from broker_embedded.storage.log_file_utils import (
    LOG_SUFFIX,
    parse_segment_log_name,
    segment_file_stem,
)
from broker_embedded.storage.object_store import ObjectStore
from broker_embedded.storage.offset_checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker_embedded.storage.offset_index import INDEX_SUFFIX
from broker_embedded.storage.partition_metadata import PARTITION_METADATA_FILE, topic_id_in
from broker_embedded.storage.remote_log_segment_metadata import (
    RemoteLogSegmentMetadata,
    StoredFile,
    read_manifest,
)
from broker_embedded.storage.time_index import TIME_INDEX_SUFFIX
from broker_embedded.storage.topic_config_file import TOPIC_CONFIG_FILE
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.transaction_index import FILE_SUFFIX as TXN_INDEX_SUFFIX

log = logging.getLogger(__name__)

CHUNK = 8 << 20
# the last stable offset of every partition of a log dir uploaded whole (no broker held it):
# kafkalog's own file, in the offset checkpoint format, for read_committed readers of the store
LAST_STABLE_OFFSET_CHECKPOINT = "kafkalog-last-stable-offset-checkpoint"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
PARTITION_FILES = (LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA_FILE)
LOG_DIR_FILES = (
    META_PROPERTIES,
    TOPIC_CONFIG_FILE,
    CLEANER_OFFSET_CHECKPOINT,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)  # the high watermark last


class UploadConflictError(KafkaLogError):
    """The store holds a different segment under the same key (module docstring)."""


class UploadVerificationError(KafkaLogError):
    """An uploaded object read back differs from its local file (twice in a row)."""


@dataclass(frozen=True)
class UploadReport:
    """What one run did: segments uploaded (new or repaired) and skipped (already there and
    verified), by ``topic-partition/base offset``; bytes sent."""

    uploaded: tuple[str, ...]
    repaired: tuple[str, ...]
    skipped: tuple[str, ...]
    bytes_sent: int
    deleted: tuple[str, ...] = ()  # stale stored segments --replace deleted
    gone: tuple[str, ...] = ()  # segments (or partitions) deleted locally during the run


def file_digest(path: Path) -> str:
    """The SHA-256 (hex) of a local file, read a chunk at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def object_digest(store: ObjectStore, name: str, size: int) -> str:
    """The SHA-256 (hex) of an object, read back a ranged chunk at a time."""
    digest = hashlib.sha256()
    for position in range(0, size, CHUNK):
        digest.update(store.read_range(name, position, min(CHUNK, size - position)))
    store.release()
    return digest.hexdigest()


def upload_log_dir(
    log_dir: Path,
    store: ObjectStore,
    *,
    replace: bool = False,
    verify: bool = False,
    progress: Callable[[str], None] | None = None,
) -> UploadReport:
    """Copy ``log_dir``'s closed segments, their indexes and manifests, then its partitions'
    and its own checkpoint files to ``store``; see the module docstring."""
    check_log_dir(log_dir, " (kafkalog upload)")
    active_held = LogDirLock.is_locked(log_dir)
    listing = store.list()
    run = SegmentUpload(log_dir, store, listing, replace, verify, progress or (lambda _: None))
    if active_held and LAST_STABLE_OFFSET_CHECKPOINT in listing:
        store.delete(LAST_STABLE_OFFSET_CHECKPOINT)  # stale: read_committed is refused instead
        run.progress(f"deleted {LAST_STABLE_OFFSET_CHECKPOINT} (a broker holds the log dir)")
    for tp in LogDir(log_dir).partitions():
        try:
            bases = _segment_bases(log_dir / tp.dir_name)
        except FileNotFoundError:
            run.went(tp.dir_name, "the partition was deleted from the log dir during the upload")
            continue
        stored = []
        for k, base in enumerate(bases[:-1] if active_held else bases):
            following = bases[k + 1] if k + 1 < len(bases) else None
            manifest = _unless_gone(run, tp, base, following)
            if manifest is not None:
                stored.append(manifest)
        if replace:
            run.delete_stale(tp, stored)
        for name in PARTITION_FILES:
            run.small_file(f"{tp.dir_name}/{name}")
    if not active_held:
        run.write_checked(LAST_STABLE_OFFSET_CHECKPOINT, _last_stable_offsets(log_dir))
    for name in LOG_DIR_FILES:
        run.small_file(name)
    return UploadReport(
        tuple(run.uploaded),
        tuple(run.repaired),
        tuple(run.skipped),
        run.sent,
        tuple(run.deleted),
        tuple(run.gone),
    )


def _unless_gone(
    run: SegmentUpload, tp: TopicPartition, base: int, following: int | None
) -> RemoteLogSegmentMetadata | None:
    """The segment uploaded (its manifest), or ``None`` when the log dir's broker deleted it
    during the run (retention, DeleteRecords: its ``.log`` is gone; Kafka renames it first):
    what was stored of it is deleted, so that no ``.log`` without a manifest is left below
    later segments', and the run goes on, as the remote log manager's copy does."""
    try:
        return run.segment(tp, base, next_base=following)
    except FileNotFoundError:
        if (run.log_dir / tp.dir_name / f"{segment_file_stem(base)}{LOG_SUFFIX}").exists():
            raise
    run.delete_segment(tp, base)
    run.went(f"{tp.dir_name}/{base}", "deleted from the log dir during the upload")
    return None


def _segment_bases(directory: Path) -> list[int]:
    found = (parse_segment_log_name(p.name) for p in directory.iterdir())
    return sorted(b for b in found if b is not None)


class SegmentUpload:
    """One run of :func:`upload_log_dir`, or the broker's remote log manager's copy of one
    segment (remote_log_manager.py)."""

    def __init__(
        self,
        log_dir: Path,
        store: ObjectStore,
        listing: dict[str, int],
        replace: bool,
        verify: bool,
        progress: Callable[[str], None],
        mtime_when_no_timestamp: bool = False,
    ) -> None:
        """``mtime_when_no_timestamp``: a segment without record timestamps gets its
        ``.log``'s modification time as ``max_timestamp_ms`` (Kafka's
        ``LogSegment.largestTimestamp``, which its RemoteLogManager copies into the segment's
        metadata, so remote retention.ms counts from it), not -1."""
        self.mtime_when_no_timestamp = mtime_when_no_timestamp
        self.log_dir, self.store, self.listing = log_dir, store, listing
        self.replace, self.verify, self.progress = replace, verify, progress
        self.uploaded: list[str] = []
        self.repaired: list[str] = []
        self.skipped: list[str] = []
        self.deleted: list[str] = []
        self.gone: list[str] = []
        self.sent = 0

    def segment(
        self,
        tp: TopicPartition,
        base: int,
        extras: Mapping[str, bytes] | None = None,
        next_base: int | None = None,
    ) -> RemoteLogSegmentMetadata:
        """Upload one segment's files, then its manifest (module docstring), and return the
        manifest. ``extras``: more small objects of the segment, by file name in the
        partition's directory (the broker's tiering adds the producer snapshot and the leader
        epochs), written and listed in the manifest like its files. ``next_base``: the next
        local segment's base offset (``None``: looked up in the partition's directory)."""
        extras = extras or {}
        directory = self.log_dir / tp.dir_name
        what = f"{tp.dir_name}/{base}"
        local = self._manifest(tp, base, extras, next_base)
        key = f"{tp.dir_name}/{RemoteLogSegmentMetadata.name_of(base)}"
        if key in self.listing:
            stored = read_manifest(self.store, key)
            other_topic = stored.topic_id != local.topic_id and stored.topic_id and local.topic_id
            if (stored.files != local.files or other_topic) and not self.replace:
                raise UploadConflictError(
                    f"{self.store.location.describe(key)} describes another segment than "
                    f"{directory / segment_file_stem(base)}{LOG_SUFFIX} (sizes or SHA-256 "
                    "or topic ids differ: another log dir, a segment rewritten since it was "
                    "uploaded, or a topic deleted and created again); "
                    "upload to another prefix, or pass --replace to overwrite it"
                )
            if stored.files == local.files and self._intact(tp, stored):
                if stored.next_offset == local.next_offset:
                    self.skipped.append(what)
                    return local
                self.store.write(key, local.to_json())  # an older kafkalog's offsets
                self.repaired.append(what)
                return local
            self.store.delete(key)  # the manifest goes first: the segment is not complete
            self.repaired.append(what)
        else:
            self.uploaded.append(what)
        for f in local.files:
            if f.name in extras:
                self.write_checked(f"{tp.dir_name}/{f.name}", extras[f.name])
            else:
                self._put(f"{tp.dir_name}/{f.name}", directory / f.name, f)
        self.store.write(key, local.to_json())
        self.progress(f"uploaded {what}")
        return local

    def went(self, what: str, why: str) -> None:
        """Report a segment or partition the log dir lost during the run."""
        self.gone.append(what)
        self.progress(f"gone {what}: {why}, not uploaded")

    def delete_segment(self, tp: TopicPartition, base: int) -> None:
        """Delete a stored segment: its manifest first (it is no longer stored), then every
        other object of it (its files, extras, or what an interrupted upload left)."""
        stem = f"{tp.dir_name}/{segment_file_stem(base)}."
        manifest = f"{tp.dir_name}/{RemoteLogSegmentMetadata.name_of(base)}"
        names = sorted(n for n in self.store.list(tp.dir_name + "/") if n.startswith(stem))
        for name in sorted(names, key=lambda n: n != manifest):
            self.store.delete(name)
            self.listing.pop(name, None)

    def delete_stale(self, tp: TopicPartition, local: list[RemoteLogSegmentMetadata]) -> None:
        """``--replace``: delete the stored segments of ``tp`` the log dir no longer has, those
        based inside the range of the segments just stored (``local``: the cleaner merged or
        rewrote them; also objects without a manifest there, left by a run killed while it
        deleted) and those of another topic id (a topic deleted and created again), so that the
        store holds the log dir's segments only."""
        prefix = tp.dir_name + "/"
        names = [n[len(prefix) :] for n in self.listing if n.startswith(prefix)]
        manifests = {RemoteLogSegmentMetadata.base_offset_of(n) for n in names} - {None}
        logs = {parse_segment_log_name(n) for n in names} - {None}
        ours = {m.base_offset for m in local}
        topic_id = topic_id_in(self.log_dir / tp.dir_name)
        lo, hi = (local[0].base_offset, local[-1].next_offset) if local else (0, 0)
        for base in sorted(b for b in manifests | logs if b is not None and b not in ours):
            if not lo <= base < hi:
                if base not in manifests:
                    continue  # an upload in progress past the store's end, or below it
                key = prefix + RemoteLogSegmentMetadata.name_of(base)
                stored = read_manifest(self.store, key)
                if not (stored.topic_id and topic_id and stored.topic_id != topic_id):
                    continue  # outside the log dir's range, of its topic: kept
            self.delete_segment(tp, base)
            self.deleted.append(f"{tp.dir_name}/{base}")
            self.progress(f"deleted {tp.dir_name}/{base} (stale: not in the log dir)")

    def _manifest(
        self, tp: TopicPartition, base: int, extras: Mapping[str, bytes], next_base: int | None
    ) -> RemoteLogSegmentMetadata:
        """The manifest of the local segment: its files' (and ``extras``') sizes and hashes,
        and its offsets: ``next_offset`` the next local segment's base (``next_base``) when
        there is one, as Kafka's ``endOffset`` (a compacted segment may end before it), else
        the offset after its last batch."""
        directory = self.log_dir / tp.dir_name
        stem = segment_file_stem(base)
        paths = [directory / (stem + s) for s in SEGMENT_SUFFIXES]
        present = [p for p in paths if p.is_file()]
        files = [StoredFile(p.name, p.stat().st_size, file_digest(p)) for p in present]
        files += [StoredFile(n, len(d), hashlib.sha256(d).hexdigest()) for n, d in extras.items()]
        files.sort(key=lambda f: f.name)  # as parsed
        size = paths[0].stat().st_size
        next_offset, max_timestamp = _offsets(directory, base)
        if next_base is None:
            next_base = min((b for b in _segment_bases(directory) if b > base), default=None)
        if next_base is not None:
            next_offset = max(next_offset, next_base)
        if max_timestamp < 0 and self.mtime_when_no_timestamp:
            max_timestamp = int(paths[0].stat().st_mtime * 1000)
        return RemoteLogSegmentMetadata(
            base, next_offset, size, tuple(files), max_timestamp, topic_id=topic_id_in(directory)
        )

    def _intact(self, tp: TopicPartition, stored: RemoteLogSegmentMetadata) -> bool:
        """Whether every file of ``stored`` is in the store with its size (and, with
        ``verify``, its hash)."""
        for f in stored.files:
            name = f"{tp.dir_name}/{f.name}"
            if self.listing.get(name) != f.size:
                return False
            if self.verify and object_digest(self.store, name, f.size) != f.sha256:
                return False
        return True

    def _put(self, name: str, path: Path, expected: StoredFile) -> None:
        """Upload one file and verify it (size, SHA-256 read back); once more on a mismatch."""
        for attempt in (1, 2):
            self.store.upload(name, str(path), CHUNK)
            self.sent += expected.size
            size = self.store.size(name)
            if size == expected.size and object_digest(self.store, name, size) == expected.sha256:
                return
            log.warning(
                "uploaded %s does not match %s (try %d)",
                self.store.location.describe(name),
                path,
                attempt,
            )
        raise UploadVerificationError(
            f"{self.store.location.describe(name)} does not match {path} after two uploads "
            f"(size {size}, expected {expected.size}, or its SHA-256 differs)"
        )

    def small_file(self, name: str) -> None:
        """Upload a checkpoint or metadata file of the log dir if it exists (whole, always: they
        change as the log does), verified by reading it back."""
        try:
            data = (self.log_dir / name).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            return  # absent, or deleted meanwhile (a topic deleted while its broker runs)
        self.write_checked(name, data)

    def write_checked(self, name: str, data: bytes) -> None:
        """Put a small object, verified by reading it back."""
        self.store.write(name, data)
        self.sent += len(data)
        if self.store.read(name) != data:
            raise UploadVerificationError(
                f"{self.store.location.describe(name)} does not match what was written, read back"
            )


def _last_stable_offsets(log_dir: Path) -> bytes:
    """:data:`LAST_STABLE_OFFSET_CHECKPOINT`'s bytes: each partition's LSO as the read-only view
    computes it (its producer snapshots and batches)."""
    log = LogDir(log_dir)
    offsets = {}
    for tp in log.partitions():
        with log.open_partition(tp) as view:
            offsets[tp] = view.last_stable_offset
    return OffsetCheckpointFile(log_dir / LAST_STABLE_OFFSET_CHECKPOINT).format(offsets)


def _offsets(directory: Path, base: int) -> tuple[int, int]:
    """The offset after the last batch of the segment based at ``base`` in ``directory``, and
    its largest timestamp."""
    from broker_embedded.storage.log_segment import LogSegment

    with LogSegment.open(directory, base) as seg:
        return seg.next_offset, seg.largest_timestamp
