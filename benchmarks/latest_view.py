"""The latest view (``view=latest``) against the groupBy formulation, in one SparkSession.

    .venv/bin/python benchmarks/latest_view.py [--keys K] [--updates U] [--partitions P]
                                               [--value-bytes V] [--small-map BYTES]
                                               [--master M]

Builds, in a temporary directory deleted at the end, a log dir (an embedded ``Broker``, topic
``bench`` of P partitions, default 2): K keys (default 1,000,000) ``key-%08d``, each in one
partition (id % P, as the default partitioner keeps a key in one partition), updated U times
(default 10: K * U records), update round after update round, each round in a new random order;
V-byte random values (default 50), CreateTime timestamps 1 ms apart; produced as prebuilt
record batches by ``columnar_encoder.encode_batches`` (the project's writer, no broker
append path per record).

After a warm-up of both queries over the first 20,000 offsets of each partition, times, on a
freshly loaded DataFrame each, the query ``agg(count(*), sum(offset),
bit_xor(xxhash64(value)))`` (whose three numbers must agree) over:

- plain read: every record, no view (the baseline of a worker's memory; its numbers differ);
- view: ``.option("view", "latest")`` (default ``view.mapSize``, 64 MiB: one round);
- view, small map: the same with ``view.mapSize`` = ``--small-map`` (default 8 MiB: rounds);
- groupBy: ``groupBy(partition, key).agg(max(offset), max_by(struct(*), offset))`` then
  ``value IS NOT NULL`` (what users write today; the demo's formulation).

Memory: ``spark.python.worker.reuse=false`` (a fresh Python worker per task), and a thread
samples every 50 ms the resident memory of each Python worker (the executor's Python side,
where the view's map lives) and of the JVM (driver and executor in local mode; its heap only
grows, so its figure is the peak reached by the end of each query, queries run in the order
above). Prints a markdown table: wall time, the ratio groupBy / query, peak worker RSS (and
its excess over the plain read's), JVM RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import psutil  # noqa: E402
from _spark_common import (  # noqa: E402
    ALPHABET,
    BASE_TIMESTAMP,
    CHUNK_ROWS,
    NO_RETENTION,
    TOPIC,
    _fixed_width,
    _keys,
    cpu_model,
    start_spark,
)

from broker_embedded.broker import Broker  # noqa: E402
from broker_embedded.record import columnar_encoder  # noqa: E402

SEED = 42
MIB = 1 << 20
SAMPLE_S = 0.05
WARM_UP_OFFSETS = 20_000


def build(log_dir: Path, keys: int, updates: int, partitions: int, value_bytes: int) -> int:
    """The log dir of the module docstring; its size in bytes."""
    rng = np.random.default_rng(SEED)
    size = 0
    with Broker(log_dir, create=True) as broker:
        broker.create_topic(TOPIC, partitions, config=NO_RETENTION)
        for p in range(partitions):
            mine = np.arange(p, keys, partitions)
            ids = np.concatenate([rng.permutation(mine) for _ in range(updates)])
            for lo in range(0, len(ids), CHUNK_ROWS):
                chunk = ids[lo : lo + CHUNK_ROWS]
                n = len(chunk)
                values = ALPHABET[rng.integers(0, len(ALPHABET), n * value_bytes, dtype=np.uint8)]
                ts = np.arange(BASE_TIMESTAMP + lo, BASE_TIMESTAMP + lo + n, dtype=np.int64)
                encoded = columnar_encoder.encode_batches(
                    _keys(chunk),
                    _fixed_width(n, value_bytes, values),
                    ts,
                    max_batch_bytes=1_000_000,
                )
                for batch in encoded:
                    broker.produce(TOPIC, p, batch, acks=1)
                size += len(encoded.data)
    return size


class MemorySampler:
    """Samples the RSS of this process's Python workers and of the JVM (module docstring)."""

    def __init__(self) -> None:
        self.worker_peak = self.jvm_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = psutil.Process(os.getpid())
        while not self._stop.wait(SAMPLE_S):
            for proc in me.children(recursive=True):
                try:
                    name, rss = " ".join(proc.cmdline()), proc.memory_info().rss
                except psutil.Error:
                    continue
                if "java" in name.split(" ", 1)[0]:
                    self.jvm_peak = max(self.jvm_peak, rss)
                elif "pyspark" in name or "python" in name:
                    self.worker_peak = max(self.worker_peak, rss)


@dataclass(frozen=True)
class Run:
    name: str
    seconds: float
    worker_rss: int
    jvm_rss: int
    result: tuple


def timed(name: str, df) -> Run:
    from pyspark.sql import functions as F

    query = df.agg(F.count("*"), F.sum("offset"), F.bit_xor(F.xxhash64("value")))
    with MemorySampler() as mem:
        t0 = time.perf_counter()
        result = tuple(query.collect()[0])
        seconds = time.perf_counter() - t0
    print(f"  {name}: {seconds:.1f} s, result {result}", flush=True)
    return Run(name, seconds, mem.worker_peak, mem.jvm_peak, result)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--updates", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--value-bytes", type=int, default=50)
    ap.add_argument("--small-map", default="8m")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="4g")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="latest-view-"))
    try:
        log_dir = tmp / "logdir"
        t0 = time.perf_counter()
        size = build(log_dir, args.keys, args.updates, args.partitions, args.value_bytes)
        print(
            f"built {args.keys * args.updates:,} records ({size / MIB:.0f} MiB) in "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        spark = start_spark(
            "latest-view-bench",
            args.master,
            args.partitions,
            args.driver_memory,
            "WARN",
            {"spark.python.worker.reuse": "false"},
        )
        try:
            runs = run_all(spark, log_dir, args.partitions, args.small_map)
        finally:
            spark.stop()
        report(args, runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_all(spark, log_dir: Path, partitions: int, small_map: str) -> list[Run]:
    from pyspark.sql import functions as F

    def load(**options: str):
        return spark.read.format("kafkalog").options(subscribe=TOPIC, **options).load(str(log_dir))

    def group_by(**options: str):
        df = load(**options)
        return (
            df.groupBy("partition", "key")
            .agg(
                F.max("offset").alias("latest"),
                F.max_by(F.struct(*df.columns), "offset").alias("r"),
            )
            .select("r.*")
            .where(F.col("value").isNotNull())
        )

    ends = json.dumps({TOPIC: {str(p): WARM_UP_OFFSETS for p in range(partitions)}})
    print("warm-up (the first offsets of each partition):", flush=True)
    timed("view", load(view="latest", endingOffsets=ends))
    timed("groupBy", group_by(endingOffsets=ends))
    print("timed:", flush=True)
    plain = timed("plain read, every record (no view, no groupBy)", load())
    runs = [
        timed("view", load(view="latest")),
        timed(
            f"view, view.mapSize={small_map}", load(view="latest", **{"view.mapSize": small_map})
        ),
        timed("groupBy", group_by()),
    ]
    results = {r.result for r in runs}
    if len(results) != 1:
        raise SystemExit(f"the queries disagree: {[(r.name, r.result) for r in runs]}")
    return [plain, *runs]


def report(args: argparse.Namespace, runs: list[Run]) -> None:
    plain, base = runs[0], runs[-1]
    print()
    print(
        f"{args.keys * args.updates:,} records, {args.keys:,} keys x {args.updates} updates, "
        f"{args.partitions} partitions, {args.value_bytes}-byte values; {args.master} on "
        f"{os.cpu_count()} cores ({cpu_model()}), load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    print()
    print(
        "| query | wall (s) | groupBy / it | peak Python worker RSS (MiB) | over the plain read "
        "(MiB) | JVM RSS (MiB) |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for r in runs:
        print(
            f"| {r.name} | {r.seconds:.1f} | {base.seconds / r.seconds:.1f}x | "
            f"{r.worker_rss / MIB:.0f} | {(r.worker_rss - plain.worker_rss) / MIB:+.0f} | "
            f"{r.jvm_rss / MIB:.0f} |"
        )


if __name__ == "__main__":
    main()
