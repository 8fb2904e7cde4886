"""Producer snapshot files (Kafka's ``SnapshotFile`` and ``ProducerStateManager``'s
``readSnapshot`` / ``writeSnapshot``): :class:`ProducerSnapshotEntry` (one entry, field for
field), the file names, and the encoding, decoding, reading and atomic writing of a file.

Snapshot file ``<offset, 20 digits>.snapshot`` (the state after the log up to ``offset - 1``),
big-endian, as Kafka writes it (checked against snapshots written by Kafka 3.7 and a bitnami
Kafka, both ``00 01 48 67 4b c7 00 00 00 00``: version 1, CRC32C 0x48674bc7, no entries)::

    0  version int16 = 1
    2  crc uint32            CRC-32C (Castagnoli) of every byte from offset 6 to the end
    6  entry count int32
    10 entries, 46 bytes each:
       producerId int64, producerEpoch int16, lastSequence int32, lastOffset int64,
       offsetDelta int32, timestamp int64, coordinatorEpoch int32, currentTxnFirstOffset int64

``lastSequence``/``lastOffset``/``offsetDelta`` describe the producer's last batch (-1/-1/0 when
none is cached), ``currentTxnFirstOffset`` is -1 without an ongoing transaction. A snapshot keeps
only the last batch per producer, so after loading one, duplicates are recognised for that batch
only, as in Kafka.

Thread safety: stateless functions and frozen values; a write goes to ``<path>.tmp`` and is
renamed over ``path``, so a reader sees the old file or the new one.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import crc32c

from broker_embedded.errors import CorruptSnapshotError
from broker_embedded.storage.producer_state_entry import BatchMetadata, ProducerStateEntry

SNAPSHOT_VERSION = 1
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_HEADER_SIZE = 10
SNAPSHOT_CRC_START = 6
SNAPSHOT_ENTRY_SIZE = 46
_SNAPSHOT_HEADER = struct.Struct(">hIi")
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
SNAPSHOT_NAME = re.compile(r"(\d{20})\.snapshot")


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    """One entry of a snapshot file, field for field."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int

    @classmethod
    def of(cls, entry: ProducerStateEntry) -> ProducerSnapshotEntry:
        txn = entry.current_txn_first_offset
        return cls(
            entry.producer_id,
            entry.producer_epoch,
            entry.last_seq,
            entry.last_data_offset,
            entry.last_offset_delta,
            entry.last_timestamp,
            entry.coordinator_epoch,
            -1 if txn is None else txn,
        )

    def to_state(self) -> ProducerStateEntry:
        batches: tuple[BatchMetadata, ...] = ()
        if self.last_offset >= 0:
            batches = (
                BatchMetadata(
                    self.last_sequence, self.last_offset, self.offset_delta, self.timestamp
                ),
            )
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            batches,
            self.coordinator_epoch,
            self.timestamp,
            self.current_txn_first_offset if self.current_txn_first_offset >= 0 else None,
        )


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """``(offset, path)`` of every ``<offset>.snapshot`` in ``directory``, by offset."""
    found = []
    for path in Path(directory).iterdir():
        match = SNAPSHOT_NAME.fullmatch(path.name)
        if match and path.is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def encode_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    items = list(entries)
    body = bytearray(struct.pack(">i", len(items)))
    for e in items:
        body += _SNAPSHOT_ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c.crc32c(bytes(body))) + bytes(body)


def decode_snapshot(data: bytes, source: str = "<buffer>") -> list[ProducerSnapshotEntry]:
    """Parse a snapshot file's bytes; :class:`CorruptSnapshotError` naming ``source``."""
    if len(data) < SNAPSHOT_HEADER_SIZE:
        raise CorruptSnapshotError(f"producer snapshot {source} is only {len(data)} bytes")
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"producer snapshot {source} has unknown version {version}")
    computed = crc32c.crc32c(data[SNAPSHOT_CRC_START:])
    if crc != computed:
        raise CorruptSnapshotError(
            f"producer snapshot {source} is corrupt: stored crc {crc:#010x}, "
            f"computed {computed:#010x}"
        )
    expected = SNAPSHOT_HEADER_SIZE + count * SNAPSHOT_ENTRY_SIZE
    if count < 0 or expected != len(data):
        raise CorruptSnapshotError(
            f"producer snapshot {source} declares {count} entries but holds {len(data)} bytes"
        )
    return [
        ProducerSnapshotEntry(*_SNAPSHOT_ENTRY.unpack_from(data, pos))
        for pos in range(SNAPSHOT_HEADER_SIZE, len(data), SNAPSHOT_ENTRY_SIZE)
    ]


def read_snapshot(path: str | os.PathLike[str]) -> list[ProducerSnapshotEntry]:
    return decode_snapshot(Path(path).read_bytes(), str(path))


def write_snapshot(
    path: str | os.PathLike[str], entries: Iterable[ProducerSnapshotEntry], *, sync: bool = True
) -> None:
    """Write atomically: to ``<path>.tmp``, fsync (``sync``), rename over ``path``."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(encode_snapshot(entries))
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:  # a full disk: no partial snapshot left behind
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
