"""Defect 2 of issue 11: compressed data inflating without bound.

Fetch limits count compressed bytes, and a few KB of zstd inflate to hundreds of MiB of zeros:
eight such batches drove ``kafkalog consume`` to several GB. One ``decode`` call now inflates at
most ``columnar_decoder.MAX_INFLATED_BYTES`` (64 MiB; the first compressed batch alone up to the
256 MiB per-batch cap) and stops early; the readers go on from where it stopped. Checked here:
the decoder returns the exact records over several calls, a corrupt batch after the budget ran
out is still reported (by the call that starts with it), ``kafkalog consume`` keeps a flat peak
RSS, and a Spark read returns the exact count.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from broker_embedded.broker import Broker
from broker_embedded.errors import CorruptRecordError
from broker_embedded.record.columnar_decoder import MAX_INFLATED_BYTES, decode
from broker_embedded.record.compression import CompressionType
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.record.record_batch import crc32c_of

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_000
MIB = 1 << 20


def zeros_batch(base_offset: int, records: int, value_bytes: int) -> bytes:
    """One zstd batch of ``records`` records whose values are ``value_bytes`` zeros each (a few
    KB on disk however large the values)."""
    builder = MemoryRecordsBuilder(base_offset, CompressionType.ZSTD)
    zero = bytes(value_bytes)
    for i in range(records):
        builder.append(base_offset + i, T0 + base_offset + i, None, zero, ())
    return builder.build()


def zeros_log_dir(path: Path, batches: int, records: int, value_bytes: int) -> Path:
    """A log dir whose topic ``zeros`` (1 partition) holds ``batches`` such batches."""
    raw = zeros_batch(0, records, value_bytes)
    with Broker(path, create=True) as broker:
        broker.create_topic("zeros", 1)
        for _ in range(batches):
            broker.produce("zeros", 0, raw)
    return path


def _decode_all(buf: bytes, budget: int) -> tuple[list[tuple[int, int, bytes]], list[bool]]:
    """Decode ``buf`` as a reader does: call after call from where the last one stopped."""
    rows, stops, offset, pos = [], [], 0, 0
    while pos < len(buf):
        d = decode(
            buf[pos:], topic="zeros", partition=0, start_offset=offset, max_inflated_bytes=budget
        )
        for b in d.batches:
            rows += zip(
                b.column("offset").to_pylist(),
                b.column("timestamp").cast("int64").to_pylist(),
                b.column("value").to_pylist(),
                strict=True,
            )
        stops.append(d.stopped_early)
        assert d.next_offset > offset, "every call advances"
        offset, pos = d.next_offset, pos + d.end_position
    return rows, stops


def test_budget_is_shared_by_the_batches_of_one_call_and_the_calls_go_on() -> None:
    # 8 batches of 4 records of 256 KiB (1 MiB inflated each) with a 2.5 MiB budget: a call
    # takes two batches (the third would need 1 MiB of the 0.5 left), so four calls
    buf = b"".join(zeros_batch(4 * i, 4, 256 * 1024) for i in range(8))
    assert len(buf) < 8 * 1024
    rows, stops = _decode_all(buf, budget=5 * MIB // 2)
    assert stops == [True, True, True, False]
    assert rows == [(o, (T0 + o) * 1000, bytes(256 * 1024)) for o in range(32)]


def test_first_batch_is_decoded_whole_whatever_the_budget() -> None:
    buf = b"".join(zeros_batch(4 * i, 4, 256 * 1024) for i in range(3))
    rows, stops = _decode_all(buf, budget=1)
    assert stops == [True, True, False]
    assert [r[0] for r in rows] == list(range(12))


def test_no_budget_decodes_the_whole_run() -> None:
    buf = b"".join(zeros_batch(4 * i, 4, 256 * 1024) for i in range(8))
    d = decode(buf, topic="zeros", partition=0, max_inflated_bytes=None)
    assert (d.num_rows, d.next_offset, d.end_position, d.stopped_early) == (32, 32, len(buf), False)
    assert MAX_INFLATED_BYTES == 64 * MIB


def test_corrupt_batch_past_the_budget_is_reported_by_the_next_call() -> None:
    good = zeros_batch(0, 4, 256 * 1024)
    bad = bytearray(zeros_batch(4, 4, 256 * 1024))
    bad[-6:] = b"\xff" * 6  # garbage in the zstd stream, CRC made valid again
    struct.pack_into(">I", bad, 17, crc32c_of(bytes(bad[21:])))
    buf = good + bytes(bad)
    first = decode(buf, topic="zeros", partition=0, max_inflated_bytes=MIB // 2)
    assert (first.num_rows, first.next_offset, first.end_position) == (4, 4, len(good))
    assert first.stopped_early
    with pytest.raises(CorruptRecordError) as e:
        decode(
            buf[first.end_position :],
            topic="zeros",
            partition=0,
            start_offset=4,
            source="zeros.log",
            base_position=len(good),
        )
    assert (e.value.source, e.value.position, e.value.base_offset) == ("zeros.log", len(good), 4)


def _peak_rss_of_consume(log_dir: Path) -> tuple[int, bytes]:
    """Peak RSS (bytes) of a ``kafkalog consume`` of topic ``zeros``, and its stderr."""
    script = (
        "import resource, subprocess, sys\n"
        "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
        "sys.stderr.buffer.write(r.stderr)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
        "sys.exit(r.returncode)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable,
        "-m",
        "spark_kafkalog.cli",
        "consume",
        "--log-dir",
        str(log_dir),
        "--topic",
        "zeros",
    ]
    # a fresh parent per measurement: RUSAGE_CHILDREN keeps the largest child ever waited for
    done = subprocess.run(
        [sys.executable, "-c", script, *command],
        capture_output=True,
        env=env,
        cwd=ROOT,
        check=True,
        timeout=600,
    )
    return int(done.stdout), done.stderr


def test_consume_of_batches_inflating_to_800_mib_keeps_a_flat_peak_rss(tmp_path: Path) -> None:
    # 8 batches of 25 records of 4 MiB of zeros: 100 MiB each inflated (over the 64 MiB budget,
    # so one batch a decode call), under 4 KB each on disk. Without the budget a 1 MiB fetch
    # took all eight into one call: about 2.5 GB; with it the peak is that of one batch
    # (decompressed records, their output column, the printed copy) plus the interpreter:
    # measured 754 MiB, against 2653 MiB before the budget
    log_dir = zeros_log_dir(tmp_path / "logs", batches=8, records=25, value_bytes=4 * MIB)
    peak, stderr = _peak_rss_of_consume(log_dir)
    assert b"Processed a total of 200 messages (partition 0: 200)" in stderr
    assert peak < 1024 * MIB, f"peak RSS {peak / MIB:.0f} MiB"


def test_spark_read_of_inflating_batches_returns_the_exact_count(spark, tmp_path: Path) -> None:
    # 6 batches of 10 records of 8 MiB: 80 MiB each inflated, so each decode call of an
    # executor stops after one batch and the next fetch goes on from there
    log_dir = zeros_log_dir(tmp_path / "logs", batches=6, records=10, value_bytes=8 * MIB)
    df = spark.read.format("kafkalog").option("path", str(log_dir)).option("subscribe", "zeros")
    rows = df.load().selectExpr("offset", "length(value) AS n").collect()
    assert sorted((r.offset, r.n) for r in rows) == [(o, 8 * MIB) for o in range(60)]
