"""Executor memory of a Spark read of one large partition: the peak resident memory of the
Python worker that reads it, for growing prefixes of one partition up to its whole size.

    .venv/bin/python benchmarks/partition_memory.py [--gib G] [--value-bytes V] [--master M]

Builds, in a temporary directory deleted at the end, a log dir with topic ``bench`` of one
partition holding about G GiB (default 2) of records: 12-byte keys, V-byte random values
(default 100), in 1 MB producer batches (the project's ``columnar_encoder``, appended through
the embedded broker). Then, in one SparkSession (``spark.python.worker.reuse=false``: a fresh
Python worker per task, so each query's peak is its own), reads the first 10,000 offsets (the
worker's own size), then the first 1/8, 1/4, 1/2 and all of the partition's offsets
(``startingOffsets`` / ``endingOffsets``; one Spark task each, as Spark's Kafka connector plans
one task per topic-partition) with the query ``agg(count(*),
sum(length(value)), bit_xor(xxhash64(value)))``, which makes the worker decode every key and
value. A thread samples every 50 ms the resident memory of each Python worker
(latest_view.py's ``MemorySampler``). Prints a markdown table: bytes read, wall time, peak
worker RSS. Flat memory means the last column does not grow with the first.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _spark_common import TOPIC, build_log_dir, cpu_model, start_spark  # noqa: E402
from latest_view import MemorySampler  # noqa: E402

MIB = 1 << 20
RECORD_OVERHEAD = 20  # bytes of a record's framing beside its key and value, about
KEY_BYTES = 12
SMALL = 10_000
FRACTIONS = (8, 4, 2, 1)  # read the first 1/n of the offsets


def read(spark, log_dir: Path, end: int) -> tuple[float, int, tuple]:
    """(seconds, peak worker RSS, the query's row) of a read of offsets [0, end)."""
    from pyspark.sql import functions as F

    df = (
        spark.read.format("kafkalog")
        .option("subscribe", TOPIC)
        .option("startingOffsets", json.dumps({TOPIC: {"0": 0}}))
        .option("endingOffsets", json.dumps({TOPIC: {"0": end}}))
        .load(str(log_dir))
    )
    query = df.agg(F.count("*"), F.sum(F.length("value")), F.bit_xor(F.xxhash64("value")))
    with MemorySampler() as mem:
        t0 = time.perf_counter()
        row = tuple(query.collect()[0])
        seconds = time.perf_counter() - t0
    return seconds, mem.worker_peak, row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    if args.gib <= 0 or args.value_bytes < 1:
        ap.error("--gib must be > 0 and --value-bytes >= 1")
    rows = int(args.gib * (1 << 30) / (KEY_BYTES + args.value_bytes + RECORD_OVERHEAD))
    tmp = Path(tempfile.mkdtemp(prefix="partition-memory-"))
    try:
        log_dir = tmp / "logdir"
        t0 = time.perf_counter()
        _, size = build_log_dir(
            log_dir, rows, 1, args.value_bytes, 1_000_000, seed=7, random_keys=False
        )
        print(
            f"built {rows:,} records ({size / MIB:,.0f} MiB) in {time.perf_counter() - t0:.0f} s"
            f"; {cpu_model()}",
            flush=True,
        )
        spark = start_spark(
            "partition-memory-bench",
            args.master,
            1,
            "2g",
            "WARN",
            {"spark.python.worker.reuse": "false"},
        )
        try:
            read(spark, log_dir, min(rows, 100_000))  # warm-up: the first query's workers
            results = []
            for end in (min(rows, SMALL), *(rows // n for n in FRACTIONS)):
                seconds, peak, row = read(spark, log_dir, end)
                if row[0] != end or row[1] != end * args.value_bytes:
                    raise SystemExit(f"read of [0, {end}) gave {row}")
                results.append((end, size * end / rows, seconds, peak))
                print(
                    f"  [0, {end:,}): {seconds:.1f} s, worker peak {peak / MIB:.0f} MiB", flush=True
                )
        finally:
            spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        "\n| offsets read | bytes read (about) | wall (s) | peak Python worker RSS (MiB) |\n"
        "|---:|---:|---:|---:|"
    )
    for end, nbytes, seconds, peak in results:
        print(f"| {end:,} | {nbytes / MIB:,.0f} MiB | {seconds:.1f} | {peak / MIB:.0f} |")


if __name__ == "__main__":
    main()
