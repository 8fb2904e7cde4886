"""A partition's ``leader-epoch-checkpoint`` file (Kafka's ``LeaderEpochCheckpointFile``).

Byte layout: ``0\\n<count>\\n`` then ``<epoch> <startOffset>\\n`` per entry, oldest epoch first
(see :mod:`broker_embedded.storage.checkpoint_file` for the exact read and write rules). An entry
says that leader epoch ``epoch`` wrote its first batch at ``startOffset``; epochs and start
offsets increase down the file (not enforced on read: Kafka does not either). The epoch is an
int32, the offset an int64; anything else is a :class:`CheckpointError` naming file and line.

Thread safety: as ``CheckpointFile`` (reads anywhere, one writer per file).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from broker_embedded.storage.checkpoint_file import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    CheckpointFile,
    parse_int,
)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """Leader epoch ``epoch`` starts at ``start_offset``."""

    epoch: int
    start_offset: int


class _EpochEntryFormat:
    def parse(self, fields: list[str]) -> EpochEntry:
        if len(fields) != 2:
            raise ValueError(f"expected 'epoch startOffset', got {len(fields)} fields")
        return EpochEntry(
            parse_int(fields[0], INT32_MIN, INT32_MAX, "epoch"),
            parse_int(fields[1], INT64_MIN, INT64_MAX, "start offset"),
        )

    def format(self, entry: EpochEntry) -> str:
        return f"{entry.epoch} {entry.start_offset}"


class LeaderEpochCheckpointFile:
    """The ``epoch startOffset`` checkpoint file at ``path``."""

    __slots__ = ("_file",)

    def __init__(self, path: str | Path) -> None:
        self._file = CheckpointFile(path, _EpochEntryFormat())

    @property
    def path(self) -> Path:
        return self._file.path

    def exists(self) -> bool:
        return self._file.exists()

    def read(self) -> list[EpochEntry]:
        """The entries in file order; ``FileNotFoundError`` when the file does not exist."""
        return self._file.read()

    def read_or_empty(self) -> list[EpochEntry]:
        return self.read() if self.exists() else []

    def write(self, entries: Sequence[EpochEntry]) -> None:
        self._file.write(list(entries))

    def format(self, entries: Sequence[EpochEntry]) -> bytes:
        return self._file.format(list(entries))

    def parse(self, data: bytes) -> list[EpochEntry]:
        return self._file.parse(data)
