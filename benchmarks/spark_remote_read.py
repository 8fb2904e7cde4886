"""Spark batch reads over the Kafka protocol: kafkalog from ``kafkalog serve``, from the log dir,
and from Apache Kafka 3.9, against Spark's own Kafka connector from the same Kafka 3.9 and a
tuned confluent-kafka consumer, in one run.

    .venv/bin/python benchmarks/spark_remote_read.py [--records 2000000,10000000]
                                                     [--codecs none,lz4] [--partitions P]
                                                     [--value-bytes V] [--batch-bytes B]
                                                     [--repeat R] [--master M] [--no-kafka]

For each data set (each of ``--records`` with each of ``--codecs``), in a temporary directory
deleted at the end: a log dir built as benchmarks/spark_read.py does
(``_spark_common.build_log_dir``: topic ``bench`` of P partitions, default 4, the records spread
evenly, 12-byte keys, V-byte random alphanumeric values, default 100, prebuilt record batches v2
of about B bytes of records, default 1,000,000, in the codec), served by ``kafkalog serve`` as a
child process on 127.0.0.1 (benchmarks/_serve_peers.py); and the same batches produced, one
Produce request each, into a topic ``bench-<codec>-<records>`` of P partitions of one Apache
Kafka 3.9 broker (KRaft, one node, ``$KAFKALOG_PEERS/kafka-3.9``, started once for the run, its
data in the same temporary directory, so on the same file system), which keeps them as they are
(same offsets, timestamps and codec). One SparkSession (``local[2]``, with Spark's Kafka
connector from ``$KAFKALOG_PEERS/spark-kafka`` in ``spark.jars``) times
``df.write.format("noop").mode("overwrite").save()`` of a freshly loaded DataFrame of:

- kafkalog from serve: ``spark.read.format("kafkalog").option("kafka.bootstrap.servers",
  <kafkalog serve>).option("subscribe", "bench").load()``;
- kafkalog from the log dir: ``spark.read.format("kafkalog").option("subscribe", "bench")
  .load(<log dir>)``;
- kafkalog from Kafka 3.9: ``format("kafkalog")`` with ``kafka.bootstrap.servers`` the broker;
- Spark's kafka from Kafka 3.9: ``spark.read.format("kafka")`` with the same two options (its
  defaults otherwise: one task per partition);

- ceiling: Spark reading prebuilt Arrow batches (``_arrow_ceiling.py``, as in
  benchmarks/spark_read.py: tasks that only yield the same Arrow batch of the Kafka schema, of
  as many rows as kafkalog's batches from Kafka 3.9 have on average, P tasks): what Spark's Python
  data source path costs with no reading at all, so that Spark's connector / ceiling is the
  most that kafkalog / Spark's connector can reach on this Spark and machine;

and, outside Spark, in this process, the read loop: the executor side of kafkalog from Kafka 3.9
alone, each partition's planned range read by ``read_offset_range`` (the task's code:
``WireFetchSource`` with its prefetch, the columnar decoder, the Arrow batches) one after the
other on one core, with its Arrow batches counted (their average size is the ceiling's); and
confluent: a confluent-kafka (librdkafka) ``Consumer``
assigned every partition at offset 0 on ``kafkalog serve``, ``consume(10000, 1.0)`` (the last
call asks for the rest only: no 1 s wait for records that do not exist) until every message,
each message's value length summed; tuned for throughput (``fetch.min.bytes`` 1 MB with
``fetch.wait.max.ms`` 100, 16 MiB fetches, ``queued.*`` at librdkafka's maxima, no auto commit,
``check.crcs`` off). It builds no Spark rows at all: a generous baseline.

The rows are checked first: every Spark read gives the same count and the same sum of row hashes
(key, value, partition, offset, timestamp); the consumer counts every message, each partition's
last offset the expected one. Then one warm-up each and R rounds (default 3) alternating the
reads; prints the medians as one markdown table (wall seconds, and CPU seconds of every process a
read uses: this one, Spark's JVM and Python workers, ``kafkalog serve``, Kafka 3.9's broker; on a
loaded machine CPU changes far less than wall time), and per data set the ratios (goals): kafkalog
from serve / from the log dir (at least 0.8x), kafkalog from serve / confluent (at least 3x),
kafkalog / Spark's connector, both from Kafka 3.9 (at least 4x); with the machine (cores, load
average before each data set and at the end), and the bound: Spark's connector / ceiling, and
kafkalog from Kafka 3.9 / ceiling. Without Kafka 3.9 (``--no-kafka``, ``KAFKALOG_PEERS`` unset, no
Java) or without the connector's jars, the reads that need them are skipped and the reason printed.
Exits 1 on an error (a server that fails, a row missing), never on a ratio. Every wait is bounded:
the servers' start and stop (``_serve_peers``), the consumer's reading (``CONSUME_S``), each
Produce (the client's timeouts).
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
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _spark_common import (  # noqa: E402
    NO_RETENTION,
    TOPIC,
    build_log_dir,
    cpu_model,
    descendants_cpu_seconds,
    encoded_batches,
)
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from spark_read import ceiling_df, fingerprint, noop, start_spark_with_ceiling  # noqa: E402

from benchmarks._serve_peers import (  # noqa: E402
    PeerError,
    Server,
    kafka_home,
    kafka_server,
    kafkalog_server,
    spark_connector_jars,
)
from broker_embedded.client.kafka_client import KafkaClient  # noqa: E402
from broker_embedded.client.wire_fetch_source import WireSource  # noqa: E402
from broker_embedded.record import columnar_encoder  # noqa: E402
from datasource.kafka_input_partition import KafkaInputPartition  # noqa: E402
from datasource.kafka_source_options import KafkaSourceOptions  # noqa: E402
from datasource.offset_range_reader import read_offset_range  # noqa: E402

PROTOCOL_VS_LOG_DIR_GOAL = 0.8
PROTOCOL_VS_CONFLUENT_GOAL = 3.0
KAFKALOG_VS_SPARK_KAFKA_GOAL = 4.0
SERVE, LOG_DIR, CONFLUENT = "kafkalog from serve", "kafkalog from the log dir", "confluent"
FROM_KAFKA, SPARK_KAFKA = "kafkalog from Kafka 3.9", "Spark's kafka from Kafka 3.9"
CEILING, READ_LOOP = "ceiling (prebuilt Arrow)", "read loop from Kafka 3.9, no Spark"
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


@dataclass(frozen=True)
class DataSet:
    records: int
    codec: str

    @property
    def kafka_topic(self) -> str:
        return f"bench-{self.codec}-{self.records}"

    def __str__(self) -> str:
        return f"{self.records:,} records, {self.codec}"


# -- the reads ---------------------------------------------------------------------------------


def kafkalog_remote_df(spark, bootstrap: str, topic: str):
    return (
        spark.read.format("kafkalog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )


def spark_kafka_df(spark, bootstrap: str, topic: str):
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )


def log_dir_df(spark, log_dir: Path):
    return spark.read.format("kafkalog").option("subscribe", TOPIC).load(str(log_dir))


def confluent(server: Server, records: int, partitions: int, run: int) -> float:
    """Seconds for a tuned confluent-kafka consumer to take every record of the topic."""
    consumer = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": f"remote-read-bench-{run}",
            **CONFLUENT_SETTINGS,
        }
    )
    last = [-1] * partitions
    count = value_bytes = 0
    try:
        consumer.list_topics(TOPIC, timeout=30)  # connected before the clock starts
        gc.collect()
        deadline = time.monotonic() + CONSUME_S
        began = time.perf_counter()
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
        while count < records and time.monotonic() < deadline:
            for message in consumer.consume(min(CONSUME_CHUNK, records - count), 1.0):
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


def read_loop(bootstrap: str, topic: str, records: int, partitions: int) -> tuple[float, int]:
    """(seconds, Arrow batches) of the executor side of kafkalog's read of ``topic`` alone:
    each partition's range ``[0, n)`` read by the task's code, one after the other."""
    options = KafkaSourceOptions.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": topic})
    rows = batches = 0
    gc.collect()
    began = time.perf_counter()
    for p in range(partitions):
        n = records * (p + 1) // partitions - records * p // partitions
        part = KafkaInputPartition(
            WireSource(bootstrap), topic, p, 0, n, fetch_bytes=options.task_fetch_bytes
        )
        for batch in read_offset_range(part):
            rows += batch.num_rows
            batches += 1
    seconds = time.perf_counter() - began
    if rows != records:
        raise BenchError(f"the read loop gave {rows:,} rows of {topic}, not {records:,}")
    return seconds, batches


# -- Kafka 3.9 ---------------------------------------------------------------------------------


def load_kafka(server: Server, data: DataSet, args: argparse.Namespace) -> float:
    """The log dir's batches produced into ``data.kafka_topic`` (acks=1, one batch a request,
    its base offset 0: the CRC does not cover it); seconds taken."""
    began = time.perf_counter()
    configs = {k: str(v) for k, v in NO_RETENTION.items()}
    with KafkaClient(server.bootstrap) as client:
        client.create_topic(data.kafka_topic, args.partitions, 1, configs)
        chunks = encoded_batches(
            data.records,
            args.partitions,
            args.value_bytes,
            args.batch_bytes,
            seed=SEED,
            random_keys=True,
            compression=data.codec,
        )
        for p, encoded in chunks:
            for batch in encoded:
                request = bytearray(batch)
                request[:8] = bytes(8)  # Kafka takes produced batches at base offset 0 only
                client.produce(data.kafka_topic, p, bytes(request), acks=1)
    return time.perf_counter() - began


@contextmanager
def kafka_peer(work: Path, args: argparse.Namespace) -> Iterator[tuple[Server | None, list[str]]]:
    """(Kafka 3.9, the connector's jars), or (None, []) with the reason printed."""
    home = None if args.no_kafka else kafka_home()
    if not isinstance(home, Path):
        print(f"Kafka 3.9 not read: {home or '--no-kafka'}")
        yield None, []
        return
    jars = spark_connector_jars()
    if not jars:
        print("Spark's kafka not read: $KAFKALOG_PEERS lacks the connector's jars")
    with kafka_server(home, work / "kafka") as server:
        print(f"Kafka 3.9 listening on {server.bootstrap}")
        yield server, jars


# -- report ------------------------------------------------------------------------------------

Times = dict[str, list[tuple[float, float]]]  # per read: (wall s, CPU s) of each round


def print_report(results: dict[DataSet, Times], spark, load_before: str) -> None:
    print()
    print(
        f"machine: {os.cpu_count()} cores ({cpu_model()}), Python {platform.python_version()}, "
        f"PySpark {spark.version}, Java {spark._jvm.System.getProperty('java.version')}, "
        f"load average before {load_before}, after {_load()}"
    )
    conf = spark.sparkContext.getConf()
    print(
        f"spark: master={conf.get('spark.master')}, driver memory "
        f"{conf.get('spark.driver.memory')}; options of both sources: defaults"
    )
    print()
    print("| records | codec | read | median s | min s | max s | records/s | median CPU s |")
    print("|---|---|---|---|---|---|---|---|")
    for data, times in results.items():
        for name, ts in times.items():
            walls = [w for w, _ in ts]
            med = statistics.median(walls)
            print(
                f"| {data.records:,} | {data.codec} | {name} | {med:.2f} | {min(walls):.2f} "
                f"| {max(walls):.2f} | {data.records / med / 1e6:.2f} M "
                f"| {statistics.median(c for _, c in ts):.2f} |"
            )
    print()
    for data, times in results.items():
        med = {name: statistics.median(w for w, _ in ts) for name, ts in times.items()}
        cpu = {name: statistics.median(c for _, c in ts) for name, ts in times.items()}
        ratios = [
            _ratio(med, LOG_DIR, SERVE, PROTOCOL_VS_LOG_DIR_GOAL),
            _ratio(med, CONFLUENT, SERVE, PROTOCOL_VS_CONFLUENT_GOAL),
            _ratio(med, SPARK_KAFKA, FROM_KAFKA, KAFKALOG_VS_SPARK_KAFKA_GOAL),
        ]
        print(f"{data}: " + "; ".join(r for r in ratios if r))
        if CEILING in med and SPARK_KAFKA in med:
            print(
                f"{data}: bound: {SPARK_KAFKA} / {CEILING} = "
                f"{med[SPARK_KAFKA] / med[CEILING]:.2f}x (the most kafkalog / Spark's connector "
                f"can be here); {FROM_KAFKA} runs at {med[CEILING] / med[FROM_KAFKA]:.2f}x "
                f"the ceiling; in CPU seconds: {SPARK_KAFKA} / {FROM_KAFKA} = "
                f"{cpu[SPARK_KAFKA] / cpu[FROM_KAFKA]:.2f}x, {SPARK_KAFKA} / {CEILING} = "
                f"{cpu[SPARK_KAFKA] / cpu[CEILING]:.2f}x"
            )


def _ratio(med: dict[str, float], slow: str, fast: str, goal: float) -> str:
    """``fast`` / ``slow`` as a speed ratio (``slow``'s time over ``fast``'s) and its goal."""
    if slow not in med or fast not in med:
        return ""
    ratio = med[slow] / med[fast]
    verdict = "meets" if ratio >= goal else "is BELOW"
    return f"{fast} / {slow} = {ratio:.2f}x ({verdict} the goal of {goal}x)"


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


# -- main --------------------------------------------------------------------------------------


def check_rows(spark, reads: dict[str, Callable[[], object]], records: int) -> None:
    """Every Spark read of a data set gives the same (rows, hash), with every record."""
    prints = {name: fingerprint(df()) for name, df in reads.items()}
    first = next(iter(prints.values()))
    if first[0] != records or any(p != first for p in prints.values()):
        raise BenchError(f"the reads differ (rows, hash), {records:,} records expected: {prints}")
    print(f"checked: {', '.join(prints)} give the same rows (count {first[0]:,} and hash)")


def run_rounds(
    sources: dict[str, Callable[[int], float]], repeat: int, cpu_now: Callable[[], float]
) -> Times:
    """Each source's (wall s, CPU s) in ``repeat`` rounds after a warm-up; ``cpu_now`` the CPU
    seconds so far of every process a read may use."""

    def timed(source: Callable[[int], float], r: int) -> tuple[float, float]:
        cpu = cpu_now()
        wall = source(r)
        return wall, cpu_now() - cpu

    for name, source in sources.items():
        print(f"warm-up {name}: {timed(source, -1)[0]:.2f} s", flush=True)
    times: Times = {name: [] for name in sources}
    for r in range(repeat):
        for name, source in sources.items():
            times[name].append(timed(source, r))
        print(
            f"round {r + 1}/{repeat}: "
            + ", ".join(f"{name} {ts[-1][0]:.2f} s" for name, ts in times.items()),
            flush=True,
        )
    return times


def cpu_seconds_of(pid: int | None) -> float:
    """User + system CPU seconds so far of process ``pid`` (0 without one)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:13]) / os.sysconf("SC_CLK_TCK")


def build(work: Path, data: DataSet, args: argparse.Namespace) -> Path:
    log_dir = work / f"logdir-{data.codec}-{data.records}"
    t = time.perf_counter()
    batches, size = build_log_dir(
        log_dir,
        data.records,
        args.partitions,
        args.value_bytes,
        args.batch_bytes,
        seed=SEED,
        random_keys=True,
        compression=data.codec,
    )
    print(
        f"log dir: {data}, {args.partitions} partitions, {batches:,} batches, "
        f"{size / 1e6:,.0f} MB, built in {time.perf_counter() - t:.1f} s"
    )
    return log_dir


def measure_data_set(
    spark, work: Path, data: DataSet, kafka: Server | None, jars: list[str], args
) -> Times:
    print(f"\n{data}: load average {_load()}", flush=True)
    log_dir = build(work, data, args)
    if kafka is not None:
        print(
            f"produced into Kafka 3.9's {data.kafka_topic} in {load_kafka(kafka, data, args):.1f} s"
        )
    with kafkalog_server(log_dir, work) as serve:
        reads: dict[str, Callable[[], object]] = {
            SERVE: lambda: kafkalog_remote_df(spark, serve.bootstrap, TOPIC),
            LOG_DIR: lambda: log_dir_df(spark, log_dir),
        }
        if kafka is not None:
            reads[FROM_KAFKA] = lambda: kafkalog_remote_df(spark, kafka.bootstrap, data.kafka_topic)
            if jars:
                reads[SPARK_KAFKA] = lambda: spark_kafka_df(
                    spark, kafka.bootstrap, data.kafka_topic
                )
        check_rows(spark, reads, data.records)
        sources = {name: (lambda _, df=df: noop(df())[0]) for name, df in reads.items()}
        if kafka is not None:
            add_bound(sources, spark, kafka, data, args)
        sources[CONFLUENT] = lambda r: confluent(serve, data.records, args.partitions, r)
        broker = None if kafka is None else kafka.pid

        def cpu_now() -> float:  # this process, Spark's, kafkalog serve's and Kafka's
            return time.process_time() + descendants_cpu_seconds() + cpu_seconds_of(broker)

        return run_rounds(sources, args.repeat, cpu_now)


def add_bound(
    sources: dict[str, Callable[[int], float]], spark, kafka: Server, data: DataSet, args
) -> None:
    """The read loop alone and the ceiling, whose batches have as many rows as the loop's."""
    seconds, batches = read_loop(kafka.bootstrap, data.kafka_topic, data.records, args.partitions)
    batch_rows = round(data.records / batches)
    print(f"read loop: {batches:,} Arrow batches, {batch_rows:,} rows on average, {seconds:.2f} s")
    sources[READ_LOOP] = lambda _: read_loop(
        kafka.bootstrap, data.kafka_topic, data.records, args.partitions
    )[0]
    ceiling = ceiling_df(spark, data.records, args.partitions, args.value_bytes, batch_rows)
    if (n := ceiling.count()) != data.records:
        raise BenchError(f"the ceiling source gave {n:,} rows, not {data.records:,}")
    sources[CEILING] = lambda _: noop(
        ceiling_df(spark, data.records, args.partitions, args.value_bytes, batch_rows)
    )[0]


def measure(work: Path, args: argparse.Namespace) -> None:
    load_before = _load()
    data_sets = [DataSet(n, c) for n in args.records for c in args.codecs]
    with ExitStack() as stack:
        kafka, jars = stack.enter_context(kafka_peer(work, args))
        t = time.perf_counter()
        extra = {"spark.jars": ",".join(jars)} if jars else None
        spark = start_spark_with_ceiling(
            args.master, args.partitions, args.driver_memory, "kafkalog-bench-remote-read", extra
        )
        stack.callback(spark.stop)
        print(f"SparkSession started in {time.perf_counter() - t:.1f} s")
        results = {d: measure_data_set(spark, work, d, kafka, jars, args) for d in data_sets}
        print_report(results, spark, load_before)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--records",
        type=_ints,
        default=[2_000_000, 10_000_000],
        help="comma-separated record counts",
    )
    parser.add_argument(
        "--codecs",
        type=lambda t: t.split(","),
        default=["none", "lz4"],
        help="comma-separated compression types",
    )
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch-bytes", type=int, default=1_000_000, help="records bytes")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--no-kafka", action="store_true", help="do not read Kafka 3.9")
    args = parser.parse_args(argv)

    began = time.perf_counter()
    print(f"numba warm-up (encoder): {columnar_encoder.warm_up():.2f} s")
    work = Path(tempfile.mkdtemp(prefix="kafkalog-remote-read-"))
    try:
        measure(work, args)
    except (BenchError, PeerError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\ntotal {time.perf_counter() - began:.0f} s, load average {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
