"""The topics a KRaft Kafka broker recorded in its metadata log, ``<log dir>/__cluster_metadata-0``.

A log dir that Apache Kafka (KRaft mode) wrote has no ``kafkalog-topics.json``: Kafka keeps its
topics, their ids, partitions and config overrides as records of its metadata log. This module
reads them, so that a Kafka-written log dir opens, reads and takes writes here as one that
kafkalog created (topic_config_file.py falls back to it when its own file is absent).

Files read (in ``__cluster_metadata-0``): the newest snapshot
``<end offset, 20 digits>-<epoch, 10 digits>.checkpoint`` (all records below its end offset), then
the log segments ``<base offset>.log`` in offset order, records from the snapshot's end offset on.
Both hold record batches v2; control batches (leader changes, snapshot header and footer) are
skipped, and a torn tail at the end of a segment (a crash mid-append) ends that segment.

A record's key is null; its value is Kafka's ``MetadataRecordSerde`` frame (KRaft's
``AbstractApiMessageSerde``): unsigned varints ``frame version`` (1), ``api key`` and ``version``,
then the record in its schema (Kafka's metadata/src/main/resources/common/metadata/*.json, every
version flexible: compact strings, tagged fields at the end). The records used, with the fields
read (each the leading fields of its schema, so later versions that append fields read alike):

    TopicRecord        (api key 2)  Name compact string, TopicId uuid (16 bytes)
    PartitionRecord    (api key 3)  PartitionId int32, TopicId uuid, Replicas compact []int32
    ConfigRecord       (api key 4)  ResourceType int8 (2 = topic), ResourceName, Name compact
                                    strings, Value compact nullable string (null: deleted)
    RemoveTopicRecord  (api key 9)  TopicId uuid

Every other record (brokers, features, producer ids, partition changes, ACLs, ...) is skipped.
The result: each live topic with its id, partition count (highest PartitionId + 1), replication
factor (replicas of partition 0) and config overrides. Overrides of configs kafkalog does not
implement (log_config.py) are left out, as they change nothing it does; a value kafkalog cannot
parse is the caller's error. Bytes that do not decode raise :class:`CheckpointError` naming the
file and the record's offset. Pure reads; the result is cached per log dir while its files keep
their sizes and modification times (a bounded LRU, thread-safe); never writes.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from broker_embedded.errors import CheckpointError, KafkaLogError
from broker_embedded.protocol.message_codec import MessageFormatError, MessageReader
from broker_embedded.record.record_batch import RecordBatch
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.log_config import CONFIG_NAMES

METADATA_DIR = "__cluster_metadata-0"
FRAME_VERSION = 1
TOPIC_RECORD, PARTITION_RECORD, CONFIG_RECORD, REMOVE_TOPIC_RECORD = 2, 3, 4, 9
TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC
_SNAPSHOT = re.compile(r"(\d{20})-(\d{10})\.checkpoint")
_SEGMENT = re.compile(r"(\d{20})\.log")
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class MetadataTopic:
    """One live topic as Kafka's metadata log describes it."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    replication_factor: int
    config: tuple[tuple[str, str], ...]  # overrides kafkalog implements, sorted by name


class _Topics:
    """The state the records build up: topics by id, partitions and configs by topic."""

    def __init__(self) -> None:
        self.names: dict[uuid.UUID, str] = {}
        self.partitions: dict[uuid.UUID, dict[int, int]] = {}  # id -> partition -> replicas
        self.configs: dict[str, dict[str, str]] = {}

    def apply(self, api_key: int, r: MessageReader) -> None:
        if api_key == TOPIC_RECORD:
            name = r.string(True, "TopicRecord.Name")
            self.names[_uuid(r, "TopicRecord.TopicId")] = name
            self.configs.pop(name, None)  # a re-created topic starts without overrides
        elif api_key == PARTITION_RECORD:
            partition = r.int32("PartitionRecord.PartitionId")
            topic_id = _uuid(r, "PartitionRecord.TopicId")
            replicas = r.array(True, "PartitionRecord.Replicas", lambda: r.int32("replica"))
            self.partitions.setdefault(topic_id, {})[partition] = len(replicas)
        elif api_key == CONFIG_RECORD:
            self._config(r)
        elif api_key == REMOVE_TOPIC_RECORD:
            topic_id = _uuid(r, "RemoveTopicRecord.TopicId")
            self.configs.pop(self.names.pop(topic_id, ""), None)
            self.partitions.pop(topic_id, None)

    def _config(self, r: MessageReader) -> None:
        if r.int8("ConfigRecord.ResourceType") != TOPIC_RESOURCE:
            return
        topic = r.string(True, "ConfigRecord.ResourceName")
        name = r.string(True, "ConfigRecord.Name")
        value = r.nullable_string(True, "ConfigRecord.Value")
        configs = self.configs.setdefault(topic, {})
        if value is None:
            configs.pop(name, None)
        else:
            configs[name] = value

    def result(self) -> dict[str, MetadataTopic]:
        out = {}
        for topic_id, name in self.names.items():
            parts = self.partitions.get(topic_id, {})
            if not parts:
                continue
            config = sorted(
                (k, v) for k, v in self.configs.get(name, {}).items() if k in CONFIG_NAMES
            )
            out[name] = MetadataTopic(
                name, topic_id, max(parts) + 1, parts.get(0, 1) or 1, tuple(config)
            )
        return out


def _uuid(r: MessageReader, what: str) -> uuid.UUID:
    high, low = r.int64(what), r.int64(what)
    return uuid.UUID(int=((high & _MASK64) << 64) | (low & _MASK64))


def has_metadata_log(log_dir: str | Path) -> bool:
    """Whether ``log_dir`` holds a KRaft metadata log (a log dir Kafka's KRaft mode wrote)."""
    return (Path(log_dir) / METADATA_DIR).is_dir()


def read_metadata_topics(log_dir: str | Path) -> dict[str, MetadataTopic]:
    """The live topics of the metadata log in ``log_dir``, by name; {} without one. Cached
    while the files read keep their names, sizes and modification times (every reader of a log
    dir asks; a metadata log takes a pass over its records to read)."""
    folder = Path(log_dir) / METADATA_DIR
    try:
        names = sorted(p.name for p in folder.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return {}
    snapshots = [n for n in names if _SNAPSHOT.fullmatch(n)]
    files = ([snapshots[-1]] if snapshots else []) + [n for n in names if _SEGMENT.fullmatch(n)]
    try:
        signature = tuple(
            (n, st.st_size, st.st_mtime_ns) for n in files for st in [(folder / n).stat()]
        )
    except OSError as e:
        raise CheckpointError(f"{folder}: cannot read Kafka's metadata log: {e}") from None
    return dict(_read_cached(str(folder), signature))


@functools.lru_cache(maxsize=8)
def _read_cached(
    folder: str, signature: tuple[tuple[str, int, int], ...]
) -> tuple[tuple[str, MetadataTopic], ...]:
    topics = _Topics()
    start = 0
    for name, _, _ in signature:
        if (snapshot := _SNAPSHOT.fullmatch(name)) is not None:
            start = int(snapshot.group(1))  # the records below it are in the snapshot
            _apply_file(topics, Path(folder, name), 0)
        else:
            _apply_file(topics, Path(folder, name), start)
    return tuple(sorted(topics.result().items()))


def _apply_file(topics: _Topics, path: Path, start: int) -> None:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read Kafka's metadata log: {e}") from None
    for offset, value in _values(data, str(path), start):
        try:
            _apply_record(topics, memoryview(value))
        except MessageFormatError as e:
            raise CheckpointError(
                f"{path}: the KRaft metadata record at offset {offset} does not decode: {e}"
            ) from None


def _values(data: bytes, source: str, start: int) -> Iterator[tuple[int, bytes]]:
    """(offset, value) of every data record at or after ``start``."""
    try:
        for batch in iter_batches(data, source, tail="stop"):
            if not isinstance(batch, RecordBatch):
                raise CheckpointError(
                    f"{source}: batch at offset {batch.base_offset} has magic {batch.magic}: "
                    "Kafka's metadata log holds record batches v2 only"
                )
            if batch.is_control or batch.last_offset < start:
                continue
            for record in batch.records():
                if record.offset >= start and record.value is not None:
                    yield record.offset, record.value
    except KafkaLogError as e:
        raise CheckpointError(f"{source}: Kafka's metadata log does not decode: {e}") from None


def _apply_record(topics: _Topics, value: memoryview) -> None:
    r = MessageReader(value)
    frame = r.uvarint("frame version")
    if frame != FRAME_VERSION:
        raise MessageFormatError(f"frame version {frame} (expected {FRAME_VERSION})")
    api_key = r.uvarint("api key")
    r.uvarint("version")
    topics.apply(api_key, r)
