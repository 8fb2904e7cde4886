"""Shared helpers for the storage tests: fixture log dirs (copied, never touched in place) and a
record batch builder backed by kafka-python (an independent implementation)."""

from __future__ import annotations

import random
import shutil
import struct
import warnings
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.fixture_paths import FIXTURES as SHARED_FIXTURES

with warnings.catch_warnings():  # kafka-python's import-time DeprecationWarnings (its own code)
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

FIXTURES = SHARED_FIXTURES / "kafka-logdirs"
KAFKA_37 = FIXTURES / "kafka-3.7-ldi-poc"
BITNAMI = FIXTURES / "kafka-bitnami-rolled"
LOG_DIRS = (KAFKA_37, BITNAMI)


def copy_tree(src: Path, dst: Path) -> Path:
    """A writable copy of a fixture directory."""
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    dst.chmod(0o755)
    return dst


@pytest.fixture
def bitnami_copy(tmp_path: Path) -> Path:
    return copy_tree(BITNAMI, tmp_path / "bitnami")


@pytest.fixture
def kafka37_copy(tmp_path: Path) -> Path:
    return copy_tree(KAFKA_37, tmp_path / "kafka37")


def make_batch(
    base_offset: int,
    records: Sequence[tuple[int, bytes | None, bytes | None]],
    *,
    compression: int = 0,
    leader_epoch: int = 0,
) -> bytes:
    """A v2 batch of (timestamp, key, value) records at ``base_offset``, built by kafka-python."""
    builder = DefaultRecordBatchBuilder(2, compression, False, -1, -1, -1, 1 << 24)
    for delta, (ts, key, value) in enumerate(records):
        builder.append(delta, ts, key, value, [])
    buf = builder.build()
    struct.pack_into(">q", buf, 0, base_offset)  # base offset and leader epoch: not in the CRC
    struct.pack_into(">i", buf, 12, leader_epoch)
    return bytes(buf)


def random_batches(
    seed: int, count: int, base_offset: int = 0, *, gaps: bool = True
) -> list[bytes]:
    """``count`` batches with 1-6 records of 50-3000 byte values, timestamps that go up and down,
    some gzip batches and (with ``gaps``) offset gaps between batches, as compaction leaves."""
    rng = random.Random(seed)
    out = []
    offset = base_offset
    ts = 1_700_000_000_000
    for _ in range(count):
        records = []
        for _ in range(rng.randint(1, 6)):
            ts += rng.randint(-3000, 5000)
            value = rng.randbytes(rng.randint(50, 3000))
            key = None if rng.random() < 0.2 else f"k{rng.randint(0, 99)}".encode()
            records.append((ts, key, value))
        out.append(make_batch(offset, records, compression=1 if rng.random() < 0.2 else 0))
        offset += len(records) + (rng.randint(1, 5) if gaps and rng.random() < 0.2 else 0)
    return out


def reference_records(log: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, timestamp, key, value) of every record, decoded by kafka-python."""
    out = []
    records = MemoryRecords(log)
    while records.has_next():
        for r in records.next_batch():
            out.append((r.offset, r.timestamp, r.key, r.value))
    return out
