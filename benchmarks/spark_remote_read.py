"""Spark batch reads over the Kafka protocol: kafkalog from ``kafkalog serve``, kafkalog from the
log dir, and a tuned confluent-kafka consumer from the same server, in one run.

    .venv/bin/python benchmarks/spark_remote_read.py [--records N] [--partitions P]
                                                     [--value-bytes V] [--batch-bytes B]
                                                     [--repeat R] [--master M]

Builds, in a temporary directory deleted at the end, a log dir as benchmarks/spark_read.py does
(``_spark_common.build_log_dir``: topic ``bench`` of P partitions, default 4, N records, default
5 M, spread evenly, 12-byte keys, V-byte random alphanumeric values, default 100, prebuilt
record batches v2 of about B bytes of records, default 1,000,000). Then ``kafkalog serve`` on that
log dir runs as a child process on 127.0.0.1 (benchmarks/_serve_peers.py: port chosen by the OS,
SIGTERM then kill on every path out), and one SparkSession (``local[2]``) times
``df.write.format("noop").mode("overwrite").save()`` of a freshly loaded DataFrame of:

- protocol: ``spark.read.format("kafkalog").option("kafka.bootstrap.servers", <server>)
  .option("subscribe", "bench").load()``: planned with Metadata and ListOffsets, each task
  fetching its range over the Kafka protocol from the server;
- log dir: ``spark.read.format("kafkalog").option("subscribe", "bench").load(<log dir>)``: the
  same rows read from the segment files directly (the server has the same files open: both only
  read them).

And, outside Spark, in this process:

- confluent: a confluent-kafka (librdkafka) ``Consumer`` assigned every partition of the topic at
  offset 0 on the same server, ``consume(10000, 1.0)`` until N messages, each message's value
  length summed (so every message is touched, as a Spark row would be); tuned for throughput:
  ``fetch.min.bytes`` 1 MB with ``fetch.wait.max.ms`` 100, ``fetch.max.bytes`` and
  ``max.partition.fetch.bytes`` 16 MiB, ``queued.min.messages`` and
  ``queued.max.messages.kbytes`` at librdkafka's maxima (so the fetcher never pauses), no auto
  commit, ``check.crcs`` off (librdkafka's default). This is a generous baseline: it
  builds no Spark rows at all, it only hands one message object per record to Python.

The rows are checked first: the protocol read and the log-dir read give the same count and the
same sum of row hashes; the consumer counts N messages, each partition's last offset the
expected one. Then one warm-up each and R rounds (default 3) alternating protocol, log dir,
confluent; prints the medians as a markdown table with records/s, and the ratios protocol /
log dir (goal: at least 0.8x) and protocol / confluent (goal: at least 3x), with the machine
(cores, load average before and after). Exits 1 on an error (a server that fails, a row
missing), never on a ratio. Every wait is bounded: the server's start and stop
(``_serve_peers.START_S``, ``STOP_S``), the consumer's reading (``CONSUME_S``).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
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

from _spark_common import TOPIC, build_log_dir, cpu_model, start_spark  # noqa: E402
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from spark_read import fingerprint, noop  # noqa: E402

from benchmarks._serve_peers import PeerError, Server, kafkalog_server  # noqa: E402
from broker_embedded.record import columnar_encoder  # noqa: E402

PROTOCOL_VS_LOG_DIR_GOAL = 0.8
PROTOCOL_VS_CONFLUENT_GOAL = 3.0
SEED = 42
CONSUME_CHUNK = 10_000
CONSUME_S = 600.0  # the consumer's whole read; past it, the run fails
CONFLUENT_SETTINGS = {
    "enable.auto.commit": False,
    "fetch.min.bytes": 1_000_000,
    "fetch.wait.max.ms": 100,
    "fetch.max.bytes": 16 << 20,
    "max.partition.fetch.bytes": 16 << 20,
    "receive.message.max.bytes": (16 << 20) + 1_000_000,
    "queued.min.messages": 10_000_000,
    "queued.max.messages.kbytes": 2_097_151,
    "check.crcs": False,
}


class BenchError(RuntimeError):
    """A measurement went wrong: rows missing or different, a consumer error."""


# -- the reads ---------------------------------------------------------------------------------


def protocol_df(spark, server: Server):
    return (
        spark.read.format("kafkalog")
        .option("kafka.bootstrap.servers", server.bootstrap)
        .option("subscribe", TOPIC)
        .load()
    )


def log_dir_df(spark, log_dir: Path):
    return spark.read.format("kafkalog").option("subscribe", TOPIC).load(str(log_dir))


def confluent(server: Server, records: int, partitions: int, run: int) -> float:
    """Seconds for a tuned confluent-kafka consumer to take every record of the topic."""
    consumer = Consumer(
        {"bootstrap.servers": server.bootstrap, "group.id": f"remote-read-bench-{run}",
         **CONFLUENT_SETTINGS}
    )  # fmt: skip
    last = [-1] * partitions
    count = value_bytes = 0
    try:
        consumer.list_topics(TOPIC, timeout=30)  # connected before the clock starts
        gc.collect()
        deadline = time.monotonic() + CONSUME_S
        began = time.perf_counter()
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
        while count < records and time.monotonic() < deadline:
            for message in consumer.consume(CONSUME_CHUNK, 1.0):
                if message.error() is not None:
                    raise BenchError(f"confluent-kafka consumer: {message.error()}")
                value_bytes += len(message.value())
                last[message.partition()] = message.offset()
                count += 1
        seconds = time.perf_counter() - began
    finally:
        consumer.close()
    expected_last = [
        records * (p + 1) // partitions - records * p // partitions - 1 for p in range(partitions)
    ]
    if count != records or last != expected_last:
        raise BenchError(
            f"confluent-kafka consumer: {count:,} messages (last offsets {last}) in "
            f"{CONSUME_S:.0f} s at most, expected {records:,} (last offsets {expected_last})"
        )
    return seconds


# -- report ------------------------------------------------------------------------------------


def print_report(records: int, times: dict[str, list[float]], spark, load_before: str) -> None:
    med = {name: statistics.median(ts) for name, ts in times.items()}
    print()
    print(
        f"machine: {os.cpu_count()} cores ({cpu_model()}), Python {platform.python_version()}, "
        f"PySpark {spark.version}, Java {spark._jvm.System.getProperty('java.version')}, "
        f"load average before {load_before}, after {_load()}"
    )
    conf = spark.sparkContext.getConf()
    print(f"spark: master={conf.get('spark.master')}, driver memory "
          f"{conf.get('spark.driver.memory')}; kafkalog options: defaults")  # fmt: skip
    print()
    print("| read | median s | min s | max s | records/s | protocol / read |")
    print("|---|---|---|---|---|---|")
    for name, ts in times.items():
        print(
            f"| {name} | {med[name]:.2f} | {min(ts):.2f} | {max(ts):.2f} "
            f"| {records / med[name] / 1e6:.2f} M | {med[name] / med['protocol']:.2f}x |"
        )
    vs_log_dir = med["log dir"] / med["protocol"]
    vs_confluent = med["confluent"] / med["protocol"]
    print(
        f"\nprotocol / log dir = {vs_log_dir:.2f}x "
        f"({_verdict(vs_log_dir, PROTOCOL_VS_LOG_DIR_GOAL)}); "
        f"protocol / confluent = {vs_confluent:.2f}x "
        f"({_verdict(vs_confluent, PROTOCOL_VS_CONFLUENT_GOAL)})"
    )


def _verdict(ratio: float, goal: float) -> str:
    return f"{'meets' if ratio >= goal else 'is BELOW'} the goal of {goal}x"


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


# -- main --------------------------------------------------------------------------------------


def check_rows(spark, server: Server, log_dir: Path, args: argparse.Namespace) -> None:
    ours, theirs = fingerprint(protocol_df(spark, server)), fingerprint(log_dir_df(spark, log_dir))
    if ours != theirs or ours[0] != args.records:
        raise BenchError(f"protocol read {ours}, log-dir read {theirs} (rows, hash)")
    print("checked: the protocol and log-dir reads give the same rows (count and hash)")


def run_rounds(sources: dict[str, Callable[[int], float]], repeat: int) -> dict[str, list[float]]:
    for name, timed in sources.items():
        print(f"warm-up {name}: {timed(-1):.2f} s", flush=True)
    times: dict[str, list[float]] = {name: [] for name in sources}
    for r in range(repeat):
        for name, timed in sources.items():
            times[name].append(timed(r))
        print(
            f"round {r + 1}/{repeat}: "
            + ", ".join(f"{name} {ts[-1]:.2f} s" for name, ts in times.items()),
            flush=True,
        )
    return times


def measure(log_dir: Path, work: Path, args: argparse.Namespace) -> None:
    load_before = _load()
    with kafkalog_server(log_dir, work) as server:
        print(f"kafkalog serve listening on {server.bootstrap}")
        t = time.perf_counter()
        spark = start_spark("kafkalog-bench-remote-read", args.master, args.partitions,
                            args.driver_memory, "WARN")  # fmt: skip
        print(f"SparkSession started in {time.perf_counter() - t:.1f} s")
        try:
            check_rows(spark, server, log_dir, args)
            sources: dict[str, Callable[[int], float]] = {
                "protocol": lambda _: noop(protocol_df(spark, server))[0],
                "log dir": lambda _: noop(log_dir_df(spark, log_dir))[0],
                "confluent": lambda r: confluent(server, args.records, args.partitions, r),
            }
            times = run_rounds(sources, args.repeat)
            print_report(args.records, times, spark, load_before)
        finally:
            spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch-bytes", type=int, default=1_000_000, help="records bytes")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    args = parser.parse_args(argv)

    began = time.perf_counter()
    print(f"numba warm-up (encoder): {columnar_encoder.warm_up():.2f} s")
    work = Path(tempfile.mkdtemp(prefix="kafkalog-remote-read-"))
    try:
        log_dir = work / "logdir"
        t = time.perf_counter()
        batches, size = build_log_dir(log_dir, args.records, args.partitions, args.value_bytes,
                                      args.batch_bytes, seed=SEED, random_keys=True)  # fmt: skip
        print(
            f"log dir: {args.records:,} records, {args.partitions} partitions, {batches:,} "
            f"batches, {size / 1e6:,.0f} MB, built in {time.perf_counter() - t:.1f} s"
        )
        measure(log_dir, work, args)
    except (BenchError, PeerError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ntotal {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
