"""Workloads for the cleaner tests and an independent model of what a compacted log must hold.

Writers append through ``UnifiedLog.append_as_leader`` (batches built by kafka-python, an
independent implementation, except transactional batches and markers, which need producer
fields: ``MemoryRecordsBuilder`` and ``EndTransactionMarker.build_batch``). Readers decode the
segment files with kafka-python, never with the code under test. The model is plain Python:
every record appended, by offset, and the latest value per key of the records a read_committed
consumer sees.
"""

from __future__ import annotations

import random
import struct
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from broker_embedded.record.compression import CompressionType
from broker_embedded.record.control_record import EndTransactionMarker
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.storage.producer_state_manager import AppendOrigin
from broker_embedded.storage.unified_log import UnifiedLog

from ..record._peers import PeerBatch, kafka_python_read

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

T0 = 1_700_000_000_000
SEGMENT_GLOB = "[0-9]" * 20 + ".log"
HEADER = struct.Struct(">qiibIhiqqqhii")

Key = bytes
Value = bytes | None


@dataclass
class Model:
    """What was appended: every record by offset, transactional ones by transaction."""

    records: dict[int, tuple[Key | None, Value]] = field(default_factory=dict)
    aborted: set[int] = field(default_factory=set)  # offsets of aborted transactional records

    def latest(self, below: int | None = None) -> dict[Key, tuple[int, Value]]:
        """Latest (offset, value) per key of the committed records (below an offset)."""
        out: dict[Key, tuple[int, Value]] = {}
        for offset in sorted(self.records):
            if below is not None and offset >= below:
                break
            key, value = self.records[offset]
            if key is not None and offset not in self.aborted:
                out[key] = (offset, value)
        return out


class Writer:
    """Appends random keyed records (and transactions) to a log, recording them in a model."""

    def __init__(
        self, log: UnifiedLog, seed: int, keys: int = 50, *, clock: list[int] | None = None
    ):
        self.log = log
        self.rng = random.Random(seed)
        self.keys = keys
        self.model = Model()
        self.ts = T0
        self.epoch = 0
        self._txn_pid = 7000
        self._txn_seq = 0

    def key(self) -> bytes:
        return b"key-%d" % self.rng.randrange(self.keys)

    def value(self, tombstone_rate: float = 0.0) -> Value:
        if self.rng.random() < tombstone_rate:
            return None
        return self.rng.randbytes(self.rng.randint(0, 60))

    def batch(
        self,
        records: Iterable[tuple[Key | None, Value]],
        *,
        codec: CompressionType = CompressionType.NONE,
        headers: bool = False,
    ) -> tuple[int, int]:
        """One batch (kafka-python built) of (key, value) records; its first and last offset."""
        records = list(records)
        builder = DefaultRecordBatchBuilder(2, int(codec), False, -1, -1, -1, 1 << 24)
        for delta, (key, value) in enumerate(records):
            self.ts += self.rng.randint(-5, 20)
            hdrs = [("h", b"v%d" % delta)] if headers and delta % 2 == 0 else []
            builder.append(delta, self.ts, key, value, hdrs)
        info = self.log.append_as_leader(bytes(builder.build()), self.epoch)
        for i, r in enumerate(records):
            self.model.records[info.first_offset + i] = r
        return info.first_offset, info.last_offset

    def random_batch(self, tombstone_rate: float = 0.1) -> tuple[int, int]:
        n = self.rng.randint(1, 6)
        codec = self.rng.choice(
            [CompressionType.NONE] * 4
            + [
                CompressionType.GZIP,
                CompressionType.LZ4,
                CompressionType.ZSTD,
                CompressionType.SNAPPY,
            ]
        )
        return self.batch(
            [(self.key(), self.value(tombstone_rate)) for _ in range(n)],
            codec=codec,
            headers=self.rng.random() < 0.2,
        )

    def transaction(self, commit: bool, batches: int = 2, pid: int | None = None) -> None:
        """A transaction of ``batches`` batches ended by a COMMIT or ABORT marker."""
        pid = self._txn_pid if pid is None else pid
        offsets = []
        for _ in range(batches):
            builder = MemoryRecordsBuilder(
                0,
                producer_id=pid,
                producer_epoch=0,
                base_sequence=self._txn_seq,
                is_transactional=True,
            )
            records = [(self.key(), self.value()) for _ in range(self.rng.randint(1, 3))]
            for key, value in records:
                self.ts += 1
                builder.append(None, self.ts, key, value)
            self._txn_seq += len(records)
            info = self.log.append_as_leader(builder.build(), self.epoch)
            for i, r in enumerate(records):
                self.model.records[info.first_offset + i] = r
                offsets.append(info.first_offset + i)
        marker = EndTransactionMarker.commit(0) if commit else EndTransactionMarker.abort(0)
        raw = marker.build_batch(
            base_offset=0, timestamp=self.ts, producer_id=pid, producer_epoch=0
        )
        self.log.append_as_leader(raw, self.epoch, AppendOrigin.COORDINATOR)
        if not commit:
            self.model.aborted.update(offsets)


def segment_bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.glob(SEGMENT_GLOB)))


def read_batches(directory: Path) -> list[PeerBatch]:
    """Every batch of the partition, decoded by kafka-python."""
    return kafka_python_read(segment_bytes(directory))


def committed_records(batches: list[PeerBatch]) -> list[tuple[int, bytes | None, Value]]:
    """(offset, key, value) of the records a read_committed consumer sees: no control records,
    and no records of transactions whose marker is an ABORT (an independent walk: the
    transactional batches of a producer wait for its next marker)."""
    pending: dict[int, list[PeerBatch]] = {}
    dropped: set[int] = set()
    for b in batches:
        if b.is_control:
            kind = struct.unpack(">hh", b.records[0].key)[1] if b.records else None
            for data in pending.pop(b.producer_id, []):
                if kind == 0:
                    dropped.add(id(data))
        elif b.is_transactional:
            pending.setdefault(b.producer_id, []).append(b)
    out = []
    for b in batches:
        if b.is_control or id(b) in dropped:
            continue
        out.extend((r.offset, r.key, r.value) for r in b.records)
    return out


def latest_of(records: Iterable[tuple[int, bytes | None, Value]]) -> dict[Key, tuple[int, Value]]:
    out: dict[Key, tuple[int, Value]] = {}
    for offset, key, value in records:
        if key is not None:
            out[key] = (offset, value)
    return out
