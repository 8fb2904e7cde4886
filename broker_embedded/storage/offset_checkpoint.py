"""Offset checkpoint files of a log dir (Kafka's ``OffsetCheckpointFile``).

One file per kind, at the top of the log dir:

    replication-offset-checkpoint      topic partition highWatermark
    recovery-point-offset-checkpoint   topic partition recoveryPoint
    log-start-offset-checkpoint        topic partition logStartOffset
    cleaner-offset-checkpoint          topic partition firstDirtyOffset

Byte layout: ``0\\n<count>\\n`` then ``<topic> <partition> <offset>\\n`` per entry (see
:mod:`broker_embedded.storage.checkpoint_file` for the exact read and write rules). Entries keep
the file's order (Kafka writes them in hash order), so reading then writing gives the same bytes;
if a partition appears twice the last line wins, as in Kafka. A topic name Kafka would reject, a
partition outside int32 or an offset outside int64 is a :class:`CheckpointError` naming file and
line. Writes are atomic (tmp file, fsync, rename, fsync dir); a missing file reads as no entries
through :meth:`OffsetCheckpointFile.read_or_empty`.

Thread safety: as ``CheckpointFile`` (reads anywhere, one writer per file).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from broker_embedded.errors import InvalidTopicError
from broker_embedded.storage.checkpoint_file import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    CheckpointFile,
    parse_int,
)
from broker_embedded.storage.topic_partition import TopicPartition

REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
RECOVERY_POINT_OFFSET_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"


class _OffsetEntryFormat:
    def parse(self, fields: list[str]) -> tuple[TopicPartition, int]:
        if len(fields) != 3:
            raise ValueError(f"expected 'topic partition offset', got {len(fields)} fields")
        partition = parse_int(fields[1], 0, INT32_MAX, "partition")
        offset = parse_int(fields[2], INT64_MIN, INT64_MAX, "offset")
        try:
            return TopicPartition(fields[0], partition), offset
        except InvalidTopicError as e:
            raise ValueError(str(e)) from None

    def format(self, entry: tuple[TopicPartition, int]) -> str:
        tp, offset = entry
        return f"{tp.topic} {tp.partition} {offset}"


class OffsetCheckpointFile:
    """A ``topic partition offset`` checkpoint file at ``path``."""

    __slots__ = ("_file",)

    def __init__(self, path: str | Path) -> None:
        self._file = CheckpointFile(path, _OffsetEntryFormat())

    @property
    def path(self) -> Path:
        return self._file.path

    def exists(self) -> bool:
        return self._file.exists()

    def read(self) -> dict[TopicPartition, int]:
        """The offsets in file order; ``FileNotFoundError`` when the file does not exist."""
        return dict(self._file.read())

    def read_or_empty(self) -> dict[TopicPartition, int]:
        """Like :meth:`read`, but no entries when the file does not exist."""
        return self.read() if self.exists() else {}

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Replace the file atomically with ``offsets`` (in the mapping's order)."""
        self._file.write(self._entries(offsets))

    def format(self, offsets: Mapping[TopicPartition, int]) -> bytes:
        return self._file.format(self._entries(offsets))

    def parse(self, data: bytes) -> dict[TopicPartition, int]:
        return dict(self._file.parse(data))

    def _entries(self, offsets: Mapping[TopicPartition, int]) -> list[tuple[TopicPartition, int]]:
        for tp, offset in offsets.items():
            if not isinstance(tp, TopicPartition):
                raise TypeError(f"{tp!r} is not a TopicPartition (writing {self.path})")
            if isinstance(offset, bool) or not INT64_MIN <= offset <= INT64_MAX:
                raise ValueError(f"offset {offset!r} of {tp} is not an int64 (writing {self.path})")
        return list(offsets.items())
