"""A Spark backfill of a tiered topic: executors reading the store directly, against the same
backfill through the broker, and against a local log dir.

    .venv/bin/python benchmarks/tiered_backfill.py [--gib 10] [--partitions 4]
        [--value-bytes 100] [--local-fraction 0.08] [--segment-mib 64] [--repeat 3]
        [--no-check] [--work DIR]

Starts a SeaweedFS S3 server on loopback (tests/seaweedfs.py) and ``kafkalog serve`` with tiered
storage on (``remote.log.storage.system.enable``, ``[rsm_config]`` at a bucket of it), creates a
topic of P partitions with ``remote.storage.enable=true``, ``segment.bytes`` of S MiB and
``local.retention.bytes`` of F of a partition's size, and produces G GiB of V-byte random
values into it (prebuilt 1 MB record batches, acks=1). It waits until the broker has copied the
closed segments to the store and deleted them locally past the local retention, then prints
how much of the topic is only in the store. The same records are also built into a log dir of
their own (an embedded ``Broker``, the same batches): the local read.

With one SparkSession (``local[2]``), three reads of the whole topic into the ``noop`` sink, R
rounds alternating, after a check that all three give the same count and hash of rows:

- direct: ``kafka.bootstrap.servers`` with ``remoteLogStorage=broker``: every executor reads
  the tiered part of its range from the store and only the local tail through the broker;
- through the broker: ``kafka.bootstrap.servers`` alone: the broker serves the tiered part from
  the store (Kafka's remote fetch);
- local: ``load(log_dir)`` of the full copy.

For each: wall seconds, the broker's CPU seconds, the S3 server's, Spark's (its JVM and
Python workers), and the bytes each reads from where: the stored segments' bytes (the log's
minus what the broker's log dir still holds) and the local tail's, as the read path takes them.
(Loopback counters would count SeaweedFS's internal hops, S3 gateway to filer to volume server,
three times over.) Medians, as a markdown table, with the ratios the goals name.
One machine with 2 cores: Spark, the broker and the store share them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _serve_peers import kafkalog_server  # noqa: E402
from _spark_common import (  # noqa: E402
    TOPIC,
    build_log_dir,
    descendants_cpu_seconds,
    encoded_batches,
    start_spark,
)
from spark_read import fingerprint, noop  # noqa: E402
from spark_remote_read import cpu_seconds_of  # noqa: E402

from broker_embedded.client.kafka_client import KafkaClient  # noqa: E402
from tests.seaweedfs import ACCESS_KEY, SECRET_KEY, s3_server  # noqa: E402

SEED = 11
BATCH_BYTES = 1_000_000
EARLIEST, EARLIEST_LOCAL = -2, -4
TASK_INTERVAL_MS = 1000
SETTLED_S = 10.0  # the local log starts unchanged this long: tiering and local deletion done
DIRECT, THROUGH, LOCAL = "direct from the store", "through the broker", "local log dir"


def broker_config(path: Path, location: str, store_options: dict[str, str]) -> Path:
    """``kafkalog serve``'s broker config with tiering to ``location``."""
    rsm = "".join(f'"{k}" = "{v}"\n' for k, v in {"location": location, **store_options}.items())
    path.write_text(
        "[broker]\n"
        '"remote.log.storage.system.enable" = true\n'
        f'"remote.log.manager.task.interval.ms" = {TASK_INTERVAL_MS}\n'
        f'"log.retention.check.interval.ms" = {TASK_INTERVAL_MS}\n'
        f"[rsm_config]\n{rsm}"
    )
    return path


def produce(bootstrap: str, args: argparse.Namespace, rows: int) -> int:
    """Create the tiered topic and produce the benchmark's batches into it; bytes produced."""
    partition_bytes = args.gib * 2**30 // args.partitions
    configs = {
        "remote.storage.enable": "true",
        "segment.bytes": str(args.segment_mib * 2**20),
        "local.retention.bytes": str(int(partition_bytes * args.local_fraction)),
        "retention.ms": "-1",
        "retention.bytes": "-1",
    }
    size = 0
    with KafkaClient(bootstrap) as client:
        client.create_topic(TOPIC, args.partitions, 1, configs)
        for p, encoded in batches(args, rows):
            for batch in encoded:
                request = bytearray(batch)
                request[:8] = bytes(8)  # a produced batch's base offset is the broker's to set
                client.produce(TOPIC, p, bytes(request), acks=1)
            size += len(encoded.data)
    return size


def batches(args: argparse.Namespace, rows: int):
    return encoded_batches(
        rows, args.partitions, args.value_bytes, BATCH_BYTES, seed=SEED, random_keys=True
    )


def offsets(bootstrap: str, partitions: int, which: int) -> list[int]:
    with KafkaClient(bootstrap) as client:
        return [client.list_offset(TOPIC, p, which) for p in range(partitions)]


def wait_tiered(bootstrap: str, args: argparse.Namespace) -> list[int]:
    """Each partition's local log start once every one has moved and none has for
    :data:`SETTLED_S` (bounded: the copy at no less than 5 MB/s)."""
    deadline = time.monotonic() + 300 + args.gib * 2**30 / 5e6
    last, since = None, time.monotonic()
    while True:
        local = offsets(bootstrap, args.partitions, EARLIEST_LOCAL)
        if local != last or 0 in local:
            last, since = local, time.monotonic()
        elif time.monotonic() - since >= SETTLED_S:
            return local
        if time.monotonic() > deadline:
            raise RuntimeError(f"tiering did not settle: local log starts {local}")
        time.sleep(1.0)


def local_bytes(log_dir: Path) -> int:
    """Bytes of the topic's segments a log dir holds."""
    return sum(f.stat().st_size for f in log_dir.glob(f"{TOPIC}-*/*.log"))


def rows_for(args: argparse.Namespace) -> int:
    """Records of ``value_bytes`` making about ``gib`` GiB of log (a record's 12-byte key and
    its varints add about 24 bytes)."""
    return args.gib * 2**30 // (args.value_bytes + 24)


def measure(reads: dict[str, Callable[[], object]], pids: dict[str, int], repeat: int):
    """Per read, per round: wall s, broker CPU s, store CPU s, Spark CPU s (after the check
    or a warm-up read of each)."""
    results: dict[str, list[tuple[float, ...]]] = {name: [] for name in reads}
    for _ in range(repeat):
        for name, df in reads.items():
            broker, store = cpu_seconds_of(pids["broker"]), cpu_seconds_of(pids["store"])
            spark = descendants_cpu_seconds()
            wall, _ = noop(df())
            broker = cpu_seconds_of(pids["broker"]) - broker
            store = cpu_seconds_of(pids["store"]) - store
            results[name].append(
                (wall, broker, store, descendants_cpu_seconds() - spark - broker - store)
            )
    return results


def report(results, size: int, tail: int, rows: int, tiered: float, load: str) -> None:
    print(
        f"\n{rows:,} records, {size / 2**30:.2f} GiB of log, {tiered:.1%} of its offsets only "
        f"in the store; {os.cpu_count()} cores; load average {load} before, "
        f"{os.getloadavg()[0]:.1f} after\n"
    )
    stored = f"{(size - tail) / 1e9:.2f} GB"
    read_from = {
        DIRECT: f"store {stored}, broker {tail / 1e9:.2f} GB",
        THROUGH: f"broker {size / 1e9:.2f} GB (its store reads {stored})",
        LOCAL: f"disk {size / 1e9:.2f} GB",
    }
    print("| read | wall s | MB/s | broker CPU s | store CPU s | Spark CPU s | bytes read |")
    print("|---|---|---|---|---|---|---|")
    med = {n: [statistics.median(col) for col in zip(*r, strict=True)] for n, r in results.items()}
    for name, (wall, broker, store, spark) in med.items():
        print(
            f"| {name} | {wall:.1f} | {size / 1e6 / wall:,.0f} | {broker:.1f} | {store:.1f} "
            f"| {spark:.1f} | {read_from[name]} |"
        )
    direct, through, local = (med[n][0] for n in (DIRECT, THROUGH, LOCAL))
    print(f"\nthrough the broker / direct: {through / direct:.2f}x the time (goal >= 2x)")
    print(f"direct / local: {direct / local:.2f}x the time (goal <= 1.5x)")
    print(
        f"broker CPU during the direct read: {med[DIRECT][1]:.1f} s, through the broker: "
        f"{med[THROUGH][1]:.1f} s (goal: near zero direct)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--local-fraction", type=float, default=0.08)
    parser.add_argument("--segment-mib", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-check", action="store_true", help="skip the equal-rows check")
    parser.add_argument("--work", type=Path, help="a directory for the data (default: /tmp)")
    args = parser.parse_args(argv)
    load = f"{os.getloadavg()[0]:.1f}"
    work = Path(tempfile.mkdtemp(prefix="kafkalog-bench-tiered-", dir=args.work))
    try:
        run(work, args, load)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def tier(bootstrap: str, args: argparse.Namespace, rows: int) -> tuple[int, float]:
    """Produce the topic and wait until it is tiered; (bytes, the fraction only in the store)."""
    t = time.perf_counter()
    size = produce(bootstrap, args, rows)
    print(f"produced {size / 2**30:.2f} GiB in {time.perf_counter() - t:.0f} s", flush=True)
    t = time.perf_counter()
    local = wait_tiered(bootstrap, args)
    ends = offsets(bootstrap, args.partitions, -1)
    starts = offsets(bootstrap, args.partitions, EARLIEST)
    print(
        f"tiered and deleted locally in {time.perf_counter() - t:.0f} s more: log starts "
        f"{starts}, local starts {local}, ends {ends}",
        flush=True,
    )
    only_stored = sum(a - b for a, b in zip(local, starts, strict=True))
    return size, only_stored / sum(a - b for a, b in zip(ends, starts, strict=True))


def spark_reads(spark, bootstrap: str, local_dir: Path) -> dict[str, Callable[[], object]]:
    wire = {"kafka.bootstrap.servers": bootstrap, "subscribe": TOPIC}
    direct = {
        **wire,
        "remoteLogStorage": "broker",
        "fs.s3a.access.key": ACCESS_KEY,
        "fs.s3a.secret.key": SECRET_KEY,
        "fs.s3a.path.style.access": "true",
    }

    def reader():  # a DataFrameReader keeps the options it is given: one per read
        return spark.read.format("kafkalog")

    return {
        DIRECT: lambda: reader().options(**direct).load(),
        THROUGH: lambda: reader().options(**wire).load(),
        LOCAL: lambda: reader().option("subscribe", TOPIC).load(str(local_dir)),
    }


def check(reads: dict[str, Callable[[], object]], rows: int) -> None:
    prints = {name: fingerprint(df()) for name, df in reads.items()}
    if len(set(prints.values())) != 1 or prints[LOCAL][0] != rows:
        raise RuntimeError(f"the reads differ: {prints}")
    print(f"all three reads give {rows:,} rows with one hash", flush=True)


def run(work: Path, args: argparse.Namespace, load: str) -> None:
    rows = rows_for(args)
    t = time.perf_counter()
    build_log_dir(
        work / "local",
        rows,
        args.partitions,
        args.value_bytes,
        BATCH_BYTES,
        seed=SEED,
        random_keys=True,
    )
    print(f"local log dir built in {time.perf_counter() - t:.0f} s", flush=True)
    (work / "s3").mkdir()
    (work / "served").mkdir()
    with s3_server(work / "s3") as store:
        location = f"s3://{store.new_bucket('tiered')}/broker-0"
        config = broker_config(work / "broker.toml", location, store.options())
        with kafkalog_server(work / "served", work, config) as broker:
            size, tiered = tier(broker.bootstrap, args, rows)
            spark = start_spark("kafkalog-bench-tiered", "local[2]", args.partitions, "2g", "WARN")
            reads = spark_reads(spark, broker.bootstrap, work / "local")
            if args.no_check:  # the check's reads are the warm-up
                for df in reads.values():
                    noop(df())
            else:
                check(reads, rows)
            results = measure(reads, {"broker": broker.pid, "store": store.pid}, args.repeat)
            spark.stop()
            tail = local_bytes(work / "served")
    report(results, size, tail, rows, tiered, load)


if __name__ == "__main__":
    main()
