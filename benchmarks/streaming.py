"""Spark streaming with ``format("kafkalog")``: availableNow throughput against the batch read of
the same data, and produce-to-visible latency of a running query, in one SparkSession.

    .venv/bin/python benchmarks/streaming.py [--rows N] [--partitions P] [--value-bytes V]
        [--max-offsets M] [--repeat R] [--write] [--rate RPS] [--seconds S]
        [--skip-throughput] [--skip-latency] [--master M]

(1) Throughput. Builds, in a temporary directory deleted at the end, a log dir (an embedded
``Broker``, a topic of P partitions (default 4), N records (default 5 M) spread evenly, 12-byte
keys, V-byte values (default 100), produced as prebuilt record batches v2 of about 1 MB made by
``columnar_encoder.encode_batches``; the broker is closed before Spark reads). Then times, R
rounds (default 3) after one warm-up each, alternating:

- batch: ``spark.read.format("kafkalog")`` of the topic, written to ``format("noop")``;
- stream, one batch: ``spark.readStream.format("kafkalog")`` from the earliest offsets with
  ``Trigger.AvailableNow``, a fresh checkpoint, ``writeStream.format("noop")``: the same rows
  in a single micro-batch;
- stream, M per batch: the same with ``maxOffsetsPerTrigger`` M (default 1 M): N / M
  micro-batches, what a query catching up with bounded batches costs;
- with ``--write``, also the sink: batch ``df.write.format("kafkalog")`` of the batch read to a
  fresh log dir, against the availableNow query writing the stream to a fresh log dir with
  ``writeStream.format("kafkalog")`` (M per batch, each micro-batch committed exactly once).

Prints the medians with rows/s and each stream's ratio to its batch counterpart.

(2) Latency. A ``Broker`` in this process owns a second log dir with a 1-partition topic; a
producer thread appends at a steady ``--rate`` records/s (default 2,000) in ticks of 10 ms,
each record's value the wall-clock time (ns) of its produce call. A query reads the topic
with a 100 ms ``processingTime`` trigger into ``foreachBatch``, which collects the values on
the driver and records their arrival time. Of the records produced in a window of
``--seconds`` (default 30) s after a 10 s warm-up: p50, p90, p99 and max of arrival - produce
time (and a check that every one of them arrived once), with the micro-batch durations. The
path measured: the broker's append, its high-watermark publication
(``replication-offset-checkpoint``, coalesced to at most one write per 100 ms), the query's
trigger, planning, the executor read and the driver-side collect.
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
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from _spark_common import NO_RETENTION, TOPIC, build_log_dir, cpu_model, start_spark  # noqa: E402

from broker_embedded.broker import Broker  # noqa: E402
from broker_embedded.common.producer_record import ProducerRecord  # noqa: E402
from broker_embedded.record import columnar_encoder  # noqa: E402

LATENCY_TOPIC = "latency"
BATCH_BYTES = 1_000_000
SEED = 7
TICK_S = 0.01
WARM_UP_S = 10.0


# -- the sink ----------------------------------------------------------------------------------


def make_sink(path: Path, partitions: int) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    with Broker(path, create=True) as broker:
        broker.create_topic(TOPIC, partitions, config=NO_RETENTION)
    return path


# -- throughput --------------------------------------------------------------------------------


class Runs:
    """The timed runs, each a function of a fresh scratch directory returning rows seen."""

    def __init__(self, spark, log_dir: Path, scratch: Path, args) -> None:
        self.spark, self.log_dir, self.scratch, self.args = spark, log_dir, scratch, args
        self._n = 0

    def _fresh(self, name: str) -> Path:
        self._n += 1
        path = self.scratch / f"{name}-{self._n}"
        shutil.rmtree(path, ignore_errors=True)
        return path

    def _batch_df(self):
        return self.spark.read.format("kafkalog").option("subscribe", TOPIC).load(str(self.log_dir))

    def _stream_df(self, max_offsets: int | None):
        reader = (
            self.spark.readStream.format("kafkalog")
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
        )
        if max_offsets:
            reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
        return reader.load(str(self.log_dir))

    def _await(self, query) -> int:
        query.awaitTermination()
        if query.exception() is not None:
            raise query.exception()
        return sum(p["numInputRows"] for p in query.recentProgress)

    def batch_noop(self) -> int:
        self._batch_df().write.format("noop").mode("overwrite").save()
        return self.args.rows

    def stream_noop(self, max_offsets: int | None) -> int:
        query = (
            self._stream_df(max_offsets)
            .writeStream.format("noop")
            .option("checkpointLocation", str(self._fresh("ckpt")))
            .trigger(availableNow=True)
            .start()
        )
        rows = self._await(query)
        shutil.rmtree(self.scratch / f"ckpt-{self._n}", ignore_errors=True)
        return rows

    def batch_write(self) -> int:
        sink = make_sink(self._fresh("sink"), self.args.partitions)
        self._batch_df().select("key", "value").write.format("kafkalog").mode("append").option(
            "topic", TOPIC
        ).save(str(sink))
        shutil.rmtree(sink, ignore_errors=True)
        return self.args.rows

    def stream_write(self, max_offsets: int | None) -> int:
        sink = make_sink(self._fresh("sink"), self.args.partitions)
        ckpt = self._fresh("ckpt")
        query = (
            self._stream_df(max_offsets)
            .select("key", "value")
            .writeStream.format("kafkalog")
            .option("topic", TOPIC)
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start(str(sink))
        )
        rows = self._await(query)
        shutil.rmtree(sink, ignore_errors=True)
        shutil.rmtree(ckpt, ignore_errors=True)
        return rows


def timed(run) -> tuple[float, int]:
    """(seconds, rows seen) of one run."""
    gc.collect()
    began = time.perf_counter()
    rows = run()
    return time.perf_counter() - began, rows


def throughput(spark, log_dir: Path, scratch: Path, args) -> None:
    runs = Runs(spark, log_dir, scratch, args)
    m = args.max_offsets
    cases = {
        "batch read": runs.batch_noop,
        "stream, one batch": lambda: runs.stream_noop(None),
        f"stream, {m:,} per batch": lambda: runs.stream_noop(m),
    }
    if args.write:
        cases["batch read + write"] = runs.batch_write
        cases[f"stream read + write, {m:,} per batch"] = lambda: runs.stream_write(m)
    for name, run in cases.items():
        warm, rows = timed(run)
        if rows != args.rows:
            raise AssertionError(f"{name}: {rows:,} rows, expected {args.rows:,}")
        print(f"warm-up {name}: {warm:.2f} s (rows checked)", flush=True)
    times: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(args.repeat):
        for name, run in cases.items():
            times[name].append(timed(run)[0])
        print(
            f"round {r + 1}/{args.repeat}: "
            + ", ".join(f"{name} {ts[-1]:.2f} s" for name, ts in times.items()),
            flush=True,
        )
    med = {name: statistics.median(ts) for name, ts in times.items()}
    base = {name: ("batch read + write" if "write" in name else "batch read") for name in cases}
    print()
    print(f"| run ({args.rows:,} records) | median s | min s | max s | rows/s | vs batch |")
    print("|---|---|---|---|---|---|")
    for name, ts in times.items():
        ratio = med[base[name]] / med[name]
        print(
            f"| {name} | {med[name]:.2f} | {min(ts):.2f} | {max(ts):.2f} "
            f"| {args.rows / med[name] / 1e6:.2f} M | {ratio:.2f}x |"
        )
    one, bounded = med["stream, one batch"], med[f"stream, {m:,} per batch"]
    print(
        f"\nstream (availableNow, one batch) / batch read = {med['batch read'] / one:.2f}x; "
        f"with {m:,} offsets per batch ({-(-args.rows // m)} batches) = "
        f"{med['batch read'] / bounded:.2f}x"
    )


# -- latency -----------------------------------------------------------------------------------


class Producer(threading.Thread):
    """Appends ``rate`` records/s to the latency topic in ticks of ``TICK_S``; each value is the
    produce call's ``time.time_ns()`` as decimal ASCII. Keeps (time, count) of every call."""

    def __init__(self, broker: Broker, rate: int) -> None:
        super().__init__(name="producer", daemon=True)
        self.broker, self.rate = broker, rate
        self.stop_event = threading.Event()
        self.produced = 0
        self.calls: list[tuple[int, int]] = []

    def run(self) -> None:
        began = time.monotonic()
        tick = 0
        while not self.stop_event.is_set():
            tick += 1
            due = int(self.rate * tick * TICK_S) - self.produced
            if due > 0:
                now = time.time_ns()
                self.broker.produce(LATENCY_TOPIC, 0, [ProducerRecord(b"%d" % now)] * due, acks=1)
                self.produced += due
                self.calls.append((now, due))
            delay = began + tick * TICK_S - time.monotonic()
            if delay > 0:
                time.sleep(delay)


def latency(spark, scratch: Path, args) -> None:
    log_dir = scratch / "latency-logdir"
    arrived: list[tuple[np.ndarray, int]] = []  # (produce times, arrival time) per micro-batch
    lock = threading.Lock()

    def on_batch(df, batch_id: int) -> None:
        values = [r.value for r in df.select("value").collect()]
        now = time.time_ns()
        if values:
            with lock:
                arrived.append((np.array([int(v) for v in values], np.int64), now))

    def newest() -> int:
        with lock:
            return max((int(p.max()) for p, _ in arrived), default=0)

    with Broker(log_dir, create=True) as broker:
        broker.create_topic(LATENCY_TOPIC, 1, config=NO_RETENTION)
        producer = Producer(broker, args.rate)
        query = (
            spark.readStream.format("kafkalog")
            .option("subscribe", LATENCY_TOPIC)
            .option("startingOffsets", "earliest")
            .load(str(log_dir))
            .writeStream.foreachBatch(on_batch)
            .option("checkpointLocation", str(scratch / "latency-ckpt"))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        producer.start()
        try:
            time.sleep(WARM_UP_S)
            window = (time.time_ns(), 0)
            time.sleep(args.seconds)
            window = (window[0], time.time_ns())
            deadline = time.monotonic() + 60
            while newest() < window[1] and time.monotonic() < deadline:  # the window's last
                time.sleep(0.05)  # records arrived (one partition: they arrive in order)
        finally:
            producer.stop_event.set()
            producer.join()
            query.stop()
    if query.exception() is not None:
        raise query.exception()
    lo, hi = window
    produced = sum(n for t, n in producer.calls if lo <= t < hi)
    lat, sizes = [], []
    for times, at in arrived:
        inside = times[(times >= lo) & (times < hi)]
        if len(inside):
            lat.append((at - inside) / 1e6)
            sizes.append(len(times))
    lat = np.concatenate(lat) if lat else np.zeros(0)
    batch_ms = [
        p["durationMs"].get("triggerExecution", 0)
        for p in query.recentProgress
        if lo / 1e9 <= _progress_time(p) < hi / 1e9
    ]
    print()
    print(
        f"latency: {args.rate:,} records/s for {args.seconds:.0f} s after a {WARM_UP_S:.0f} s "
        f"warm-up: {produced:,} records produced in the window, {len(lat):,} of them arrived "
        f"({len(sizes)} micro-batches, 100 ms processingTime trigger)"
    )
    if len(lat) != produced:
        print(f"WARNING: {produced - len(lat):,} records of the window did not arrive (or twice)")
    if not len(lat):
        return
    p50, p90, p99 = np.percentile(lat, [50, 90, 99])
    print()
    print("| produce -> visible in foreachBatch | p50 | p90 | p99 | max | mean |")
    print("|---|---|---|---|---|---|")
    print(f"| ms | {p50:.0f} | {p90:.0f} | {p99:.0f} | {lat.max():.0f} | {lat.mean():.0f} |")
    if batch_ms:
        print(
            f"\nmicro-batches in the window: {len(batch_ms)}, duration (triggerExecution) "
            f"median {statistics.median(batch_ms):.0f} ms, max {max(batch_ms):.0f} ms; records "
            f"per batch median {statistics.median(sizes):.0f}"
        )


def _progress_time(progress: dict) -> float:
    """A query progress's trigger time, seconds since the epoch."""
    from datetime import datetime

    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


# -- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--max-offsets", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="also time the kafkalog sink")
    parser.add_argument("--rate", type=int, default=2_000, help="records/s (latency)")
    parser.add_argument("--seconds", type=float, default=30.0, help="latency measurement")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    args = parser.parse_args(argv)

    began = time.perf_counter()
    print(f"numba warm-up (encoder): {columnar_encoder.warm_up():.2f} s")
    with tempfile.TemporaryDirectory(prefix="kafkalog-streaming-") as tmp:
        scratch = Path(tmp)
        log_dir = scratch / "logdir"
        if not args.skip_throughput:
            t = time.perf_counter()
            _, size = build_log_dir(
                log_dir,
                args.rows,
                args.partitions,
                args.value_bytes,
                BATCH_BYTES,
                seed=SEED,
                random_keys=False,
            )
            print(
                f"log dir: {args.rows:,} records, {args.partitions} partitions, "
                f"{size / 1e6:,.0f} MB, built in {time.perf_counter() - t:.1f} s"
            )
        t = time.perf_counter()
        spark = start_spark(
            "kafkalog-bench-streaming",
            args.master,
            args.partitions,
            args.driver_memory,
            "ERROR",
            {"spark.sql.streaming.numRecentProgressUpdates": "100000"},
        )
        print(f"SparkSession started in {time.perf_counter() - t:.1f} s")
        print(
            f"machine: {os.cpu_count()} cores ({cpu_model()}), Python "
            f"{platform.python_version()}, PySpark {spark.version}, Java "
            f"{spark._jvm.System.getProperty('java.version')}, master {args.master}; load "
            f"average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        try:
            if not args.skip_throughput:
                throughput(spark, log_dir, scratch, args)
                shutil.rmtree(log_dir, ignore_errors=True)
            if not args.skip_latency:
                latency(spark, scratch, args)
        finally:
            spark.stop()
    print(f"\ntotal {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
