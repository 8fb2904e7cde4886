"""A partition's ``partition.metadata`` file (Kafka's ``PartitionMetadataFile``).

Byte layout (UTF-8 text, two lines, NO trailing newline)::

    version: 0
    topic_id: <topic id>

The topic id is a 128-bit UUID written as Kafka's ``Uuid.toString()``: URL-safe base64 of its 16
big-endian bytes without padding (22 characters). Kafka reserves the all-zero id (never valid
here) and ``AAAAAAAAAAAAAAAAAAAAAQ`` (1, the KRaft metadata topic ``__cluster_metadata``).

Reading accepts a trailing line end and whitespace between label and value; another version, a
wrong label, a malformed or zero id is a :class:`CheckpointError` naming the file; an empty file
counts as missing (:meth:`PartitionMetadataFile.exists`). Writing
produces Kafka's exact bytes through a tmp file, fsync, atomic rename and directory fsync.

Immutable values; reads are safe anywhere, one writer per file.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

from broker_embedded.errors import CheckpointError, KafkaLogError
from broker_embedded.storage.checkpoint_file import split_fields, write_atomically

PARTITION_METADATA_FILE = "partition.metadata"
PARTITION_METADATA_VERSION = 0
ZERO_TOPIC_ID = uuid.UUID(int=0)
METADATA_TOPIC_ID = uuid.UUID(int=1)
_LINE_END = re.compile(r"\r\n|\r|\n")


def topic_id_to_string(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def topic_id_from_string(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``; ``ValueError`` unless ``text`` is a canonical 22-char id."""
    if len(text) != 22 or not re.fullmatch(r"[A-Za-z0-9_-]{22}", text):
        raise ValueError(f"topic id {text!r} is not 22 URL-safe base64 characters")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except binascii.Error as e:
        raise ValueError(f"topic id {text!r} is not base64: {e}") from None
    topic_id = uuid.UUID(bytes=raw)
    if topic_id_to_string(topic_id) != text:
        raise ValueError(f"topic id {text!r} is not in canonical form")
    return topic_id


def new_topic_id() -> uuid.UUID:
    """A random topic id as Kafka makes one: not 0, not 1, not starting with '-' as text."""
    while True:
        topic_id = uuid.uuid4()
        if topic_id not in (ZERO_TOPIC_ID, METADATA_TOPIC_ID) and not topic_id_to_string(
            topic_id
        ).startswith("-"):
            return topic_id


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """The content of ``partition.metadata``."""

    topic_id: uuid.UUID
    version: int = PARTITION_METADATA_VERSION

    def to_bytes(self) -> bytes:
        text = f"version: {self.version}\ntopic_id: {topic_id_to_string(self.topic_id)}"
        return text.encode("ascii")


class PartitionMetadataFile:
    """The ``partition.metadata`` file at ``path``."""

    __slots__ = ("path",)

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def exists(self) -> bool:
        """Whether the file holds anything: a zero-length one is what a power loss leaves of
        a write whose sync had not come yet (checkpoint_file.one_sync: a partition being
        created, nothing acknowledged in it), and counts as missing (written again)."""
        try:
            return self.path.stat().st_size > 0
        except FileNotFoundError:
            return False

    def read(self) -> PartitionMetadata:
        """The file's content; ``FileNotFoundError`` when it does not exist."""
        return self.parse(self.path.read_bytes())

    def write(self, topic_id: uuid.UUID) -> None:
        if topic_id == ZERO_TOPIC_ID:
            raise ValueError(f"the zero topic id is not valid (writing {self.path})")
        write_atomically(self.path, PartitionMetadata(topic_id).to_bytes())

    def parse(self, data: bytes) -> PartitionMetadata:
        try:
            lines = _LINE_END.split(data.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise self._malformed(f"not UTF-8 text: {e}") from None
        if lines[-1] == "":
            lines.pop()
        if len(lines) != 2:
            raise self._malformed(f"expected 2 lines, found {len(lines)}")
        version = self._field(lines[0], "version:")
        if version != str(PARTITION_METADATA_VERSION):
            raise self._malformed(f"unsupported version {version!r}, expected 0")
        try:
            topic_id = topic_id_from_string(self._field(lines[1], "topic_id:"))
        except ValueError as e:
            raise self._malformed(str(e)) from None
        if topic_id == ZERO_TOPIC_ID:
            raise self._malformed("the zero topic id is not valid")
        return PartitionMetadata(topic_id, PARTITION_METADATA_VERSION)

    def _field(self, line: str, label: str) -> str:
        fields = split_fields(line)
        if len(fields) != 2 or fields[0] != label:
            raise self._malformed(f"expected '{label} <value>', found {line!r}")
        return fields[1]

    def _malformed(self, reason: str) -> CheckpointError:
        return CheckpointError(f"malformed partition metadata file {self.path}: {reason}")


def topic_id_in(directory: Path) -> str:
    """The topic id in ``directory``'s ``partition.metadata`` as Kafka prints it; "" when the
    partition has none or it is unreadable (a log dir written before topic ids)."""
    f = PartitionMetadataFile(directory / PARTITION_METADATA_FILE)
    if not f.exists():
        return ""
    try:
        return topic_id_to_string(f.read().topic_id)
    except (OSError, KafkaLogError):
        return ""
