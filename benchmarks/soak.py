"""A bounded soak: a 3-broker embedded cluster producing with acks=all under retention and
compaction, read all the while by every reader, checking invariants.

    python -m benchmarks.soak --minutes N [--seed S] [--no-spark]

Setup (in a temporary directory, ``/dev/shm`` when present): ``EmbeddedCluster`` of 3 brokers
(retention checked every second, the cleaner backing off 1 s); topic ``soak-del`` (2 partitions,
replication factor 3, 16 KiB segments, retention.bytes 256 KiB: segments roll and are deleted) and
topic ``soak-cmp`` (1 partition, replication factor 3, cleanup.policy=compact, 8 KiB segments,
min.cleanable.dirty.ratio 0.01: the cleaner runs); one producer thread appends batches of 20
records with acks=all, keys from 50 per partition on the compacted topic.

Readers, every loop until the deadline, on broker 0's log dir (a follower or the leader):

- the read-only view (``LogDir(dir).open_partition(tp)``: fetch to the high watermark, then the
  columnar decoder);
- a ``kafkalog consume --format json`` subprocess every ~10 s;
- a Spark streaming query (``spark.readStream.format("kafkalog")``, failOnDataLoss=false,
  foreachBatch sink, 1 s trigger), unless ``--no-spark``. Its driver's stderr is captured
  (and echoed): a JVM thread dying (``Exception in thread``), a ``java.lang.*Error``, a log4j
  ERROR line or a Python traceback there is a violation, as is the query not active, failed,
  or without a progress report for 2 minutes (checked every loop). It is stopped between
  batches: see ``SparkReader`` for the Spark bug a stop mid-batch runs into.

A read that retention overtakes (OffsetOutOfRange: the segments it was at were deleted) is read
again from the new log start, as Kafka's consumer resets; these races are counted, and a reader
overtaken four times in a row is counted as starved (printed, not a violation: a consumer slower
than retention loses data in Kafka too).

Invariants: an offset, once seen by any reader, always reads the same (key, value) (retention and
compaction may remove offsets, never change one); no reader sees an offset at or above the
high watermark the leader published (read after the read); no reader fails. Memory and handles:
RSS and open descriptors of this process (which runs the brokers) sampled every loop; the
averages of the first and the last minute are printed with the RSS every 5 minutes, and growth
beyond 50% + 64 MiB of RSS or 50 descriptors is a violation. Readers hand their rows to the checks
a fetch (or 4,096 lines of ``consume``) at a time, so the soak's own memory stays small. Prints a
summary; exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from benchmarks._fuzz_logdir import _unjson, consume_argv, open_fds
from benchmarks._fuzz_probes import ROOT, temp_base
from benchmarks.fuzz import rss_mb
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.cluster import EmbeddedCluster
from broker_embedded.errors import OffsetOutOfRangeError
from broker_embedded.record.columnar_decoder import decode
from broker_embedded.record.compression import CompressionType
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
from broker_embedded.storage.log_dir import LogDir
from broker_embedded.storage.topic_partition import TopicPartition

DEL, CMP = "soak-del", "soak-cmp"
PARTITIONS = [TopicPartition(DEL, 0), TopicPartition(DEL, 1), TopicPartition(CMP, 0)]
TOPIC_CONFIGS = {
    DEL: {"segment.bytes": 16384, "retention.bytes": 262144, "retention.ms": -1},
    CMP: {
        "segment.bytes": 8192,
        "cleanup.policy": "compact",
        "retention.ms": -1,
        "min.cleanable.dirty.ratio": 0.01,
        "delete.retention.ms": 0,
    },
}


class OffsetHashes:
    """offset -> hash of (key, value) of one partition, in a growable int64 array indexed by
    offset (8 bytes an offset: a dict of Python ints took 130, and 2.4 million offsets in 30
    minutes made the soak's own bookkeeping 300 MiB of "RSS growth")."""

    UNSEEN = np.iinfo(np.int64).min  # hash() never gives it in practice (1 in 2**64)

    def __init__(self) -> None:
        self._hashes = np.full(1 << 16, self.UNSEEN, dtype=np.int64)
        self.count = 0

    def setdefault(self, offset: int, h: int) -> int:
        """The hash recorded for ``offset``, recording ``h`` if there was none."""
        if offset >= len(self._hashes):
            grown = np.full(max(2 * len(self._hashes), offset + 1), self.UNSEEN, dtype=np.int64)
            grown[: len(self._hashes)] = self._hashes
            self._hashes = grown
        old = int(self._hashes[offset])
        if old != self.UNSEEN:
            return old
        self._hashes[offset] = h
        self.count += 1
        return h


class Invariants:
    """offset -> hash of (key, value) per partition, and the violations found (thread-safe)."""

    def __init__(self) -> None:
        self.seen = {tp: OffsetHashes() for tp in PARTITIONS}
        self.violations: list[str] = []
        self.reads: dict[str, int] = {}
        self.records: dict[str, int] = {}
        self._lock = threading.Lock()

    def check(self, reader: str, tp: TopicPartition, rows: list[tuple], hw: int) -> None:
        """Check rows (offset, key, value) that ``reader`` read below the high watermark
        ``hw`` published after the read (one chunk of a read: see :meth:`note`)."""
        with self._lock:
            self.records[reader] = self.records.get(reader, 0) + len(rows)
            seen = self.seen[tp]
            for offset, key, value in rows:
                h = hash((key, value))
                if offset >= hw:
                    self.violate(
                        f"{reader}: {tp} offset {offset} at or above the published "
                        f"high watermark {hw}"
                    )
                old = seen.setdefault(offset, h)
                if old != h:
                    self.violate(f"{reader}: {tp} offset {offset} changed value")

    def note(self, what: str) -> None:
        """Count one read (or race) of ``what``."""
        with self._lock:
            self.reads[what] = self.reads.get(what, 0) + 1

    def violate(self, text: str) -> None:
        if len(self.violations) < 100:
            self.violations.append(text)
        print(f"VIOLATION {text}", flush=True)


class Producer(threading.Thread):
    """Appends batches with acks=all until stopped; counts what was acknowledged."""

    def __init__(self, cluster: EmbeddedCluster, seed: int, inv: Invariants) -> None:
        super().__init__(daemon=True)
        self.cluster, self.rng, self.inv = cluster, random.Random(seed), inv
        self.stop = threading.Event()
        self.acked = 0
        self.seq = 0

    def run(self) -> None:
        while not self.stop.is_set():
            tp = self.rng.choice(PARTITIONS)
            b = MemoryRecordsBuilder(0, CompressionType(self.rng.randrange(5)))
            for _ in range(20):
                self.seq += 1
                key = b"k%d" % self.rng.randrange(50) if tp.topic == CMP else None
                b.append(
                    None,
                    int(time.time() * 1000),
                    key,
                    b"v%d-" % self.seq
                    + bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(40))),
                )
            result = self.cluster.append(tp, b.build(), acks="all", timeout_ms=10_000)
            time.sleep(0.005)  # about 3,000 records/s: readers can keep up with retention
            if result.error is not None:
                self.inv.violate(f"producer: acks=all append to {tp} failed: {result.error!r}")
                time.sleep(0.5)
            else:
                self.acked += 20


def high_watermark(cluster: EmbeddedCluster, tp: TopicPartition) -> int:
    return cluster.list_offsets(tp.topic, tp.partition, -1).offset


# A reader hands its rows to the check a chunk at a time: holding a whole partition's rows as
# Python tuples (a few hundred thousand on the compacted topic before the cleaner catches up)
# made the soak's own memory swing by tens of MiB each loop.
Check = Callable[[list[tuple]], None]
CONSUME_CHUNK = 4096


def read_view(log_dir: Path, tp: TopicPartition, check: Check) -> None:
    """Read ``tp`` from the log start to the high watermark with the read-only view, checking
    each fetch's rows."""
    reader = LogDir(log_dir).open_partition(tp)
    try:
        offset, hw = reader.log_start_offset, reader.high_watermark
        while offset < hw:
            info = reader.fetch(offset, 1 << 16)
            found = decode(
                info.records,
                topic=tp.topic,
                partition=tp.partition,
                start_offset=offset,
                source=str(reader.directory),
            )
            check(rows_arrow_plain(found.batches))
            if found.next_offset <= offset:
                break
            offset = found.next_offset
    finally:
        reader.close()


def rows_arrow_plain(batches) -> list[tuple]:
    out = []
    for b in batches:
        out += zip(*(b.column(n).to_pylist() for n in ("offset", "key", "value")), strict=True)
    return out


CONSUME_TIMEOUT_S = 120


def consume(log_dir: Path, tp: TopicPartition, check: Check) -> None:
    """``kafkalog consume --format json`` of ``tp`` in a subprocess (killed after
    ``CONSUME_TIMEOUT_S``), its output checked ``CONSUME_CHUNK`` lines at a time."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with (
        tempfile.TemporaryFile() as err,
        subprocess.Popen(
            [sys.executable, "-m", "spark_kafkalog.cli", *consume_argv(log_dir, tp)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
        ) as proc,
    ):
        killer = threading.Timer(CONSUME_TIMEOUT_S, proc.kill)
        killer.start()
        try:
            rows: list[tuple] = []
            for line in proc.stdout:
                o = json.loads(line)
                rows.append((o["offset"], _unjson(o["key"]), _unjson(o["value"])))
                if len(rows) == CONSUME_CHUNK:
                    check(rows)
                    rows = []
            check(rows)
            code = proc.wait()
        finally:
            killer.cancel()
        if code != 0:
            err.seek(0)
            stderr = err.read().decode(errors="replace")
            raise RuntimeError(f"consume exited {code}: {stderr[-500:]}")


class DriverLog:
    """The Spark driver JVM's stderr (and so its Python planner's and workers'), captured for the
    soak: :meth:`launching` points fd 2 at a pipe while PySpark starts the JVM (which inherits
    it), a daemon thread echoes every line to this process's stderr and keeps the lines that
    show a Java or Python error (:func:`driver_log_finding`). One per process, as is the JVM
    (thread-safe)."""

    def __init__(self) -> None:
        self.findings: list[str] = []
        self.lines = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def launching(self) -> Iterator[None]:
        read_end, write_end = os.pipe()
        saved = os.dup(2)
        sys.stderr.flush()
        os.dup2(write_end, 2)
        os.close(write_end)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            threading.Thread(target=self._pump, args=(read_end,), daemon=True).start()

    def _pump(self, read_end: int) -> None:
        with os.fdopen(read_end, "rb") as pipe:
            for raw in pipe:
                os.write(2, raw)
                line = raw.decode("utf-8", "replace").rstrip()
                with self._lock:
                    self.lines += 1
                    if driver_log_finding(line) and len(self.findings) < MAX_DRIVER_FINDINGS:
                        self.findings.append(line[:300])

    def findings_since(self, start: int) -> list[str]:
        """The findings after the first ``start`` (``len(findings)`` taken earlier)."""
        with self._lock:
            return self.findings[start:]


MAX_DRIVER_FINDINGS = 20
_DRIVER_ERROR = re.compile(
    r"Exception in thread "  # a JVM thread died of an uncaught throwable
    r"|\bjava\.lang\.\w*Error\b"  # StackOverflowError, OutOfMemoryError, ...
    r"|^\d\d/\d\d/\d\d \d\d:\d\d:\d\d ERROR "  # a log4j ERROR line
    r"|^Traceback \(most recent call last\)"  # a Python traceback printed by a worker
)


def driver_log_finding(line: str) -> bool:
    """Whether a line of the driver's stderr shows an error (see :class:`DriverLog`)."""
    return _DRIVER_ERROR.search(line) is not None


_DRIVER_LOG = DriverLog()


def spark_session(app_name: str = "kafkalog-soak"):
    """A local[1] SparkSession whose driver's stderr :data:`_DRIVER_LOG` captures (when this
    call starts the JVM)."""
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = str(ROOT)
    from pyspark.sql import SparkSession

    with _DRIVER_LOG.launching():
        spark = (
            SparkSession.builder.master("local[1]")
            .appName(app_name)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "1")
            .getOrCreate()
        )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class SparkReader:
    """A streaming query over broker 0's log dir, its foreachBatch rows checked as they come.

    Health (:meth:`check`, every soak loop, and at :meth:`stop`): the query must be active,
    without exception, with a progress report (one per batch; one every 10 s when idle) less
    than ``STALL_S`` old; and the driver's stderr must show no error (:class:`DriverLog`).

    Stopping: Spark 4.3's ``StreamExecution.isInterruptionException`` matches the message of a
    ``Py4JException`` that reaches a stopping query (a foreachBatch function whose Spark call
    ``query.stop()`` interrupted) with the regex ``An error occurred while calling((.|\\r\\n|
    \\r|\\n)*)(InterruptedException|...)``; Java's regex recurses once per character for that
    group, so on a Py4J message of a few thousand characters (the Java stack trace of the
    interrupted call, about 8,000) the stream execution thread dies of a StackOverflowError
    (printed as ``Exception in thread "stream execution thread ..."``, the query's exception
    left unset). Any PySpark foreachBatch query stopped mid-batch does this, whatever its
    source (Spark's ``rate`` source too). So :meth:`stop` first lets the batch in flight
    finish (up to ``STOP_WAIT_S``; later batches return at once), and a batch that
    ``query.stop()`` interrupts anyway returns instead of raising, since nothing reads its
    result.
    """

    STALL_S = 120.0
    STOP_WAIT_S = 60.0

    def __init__(self, spark, log_dir: Path, work: Path, inv: Invariants, high_watermark_of):
        self.spark, self.inv, self.high_watermark_of = spark, inv, high_watermark_of
        self.driver_log = _DRIVER_LOG
        self._findings_seen = len(self.driver_log.findings_since(0))
        self._cond = threading.Condition()
        self._busy = self._stopping = self._failed = False
        self.batches = 0
        self.longest_stall_s = 0.0
        self._started = time.time()
        df = (
            spark.readStream.format("kafkalog")
            .option("subscribe", f"{DEL},{CMP}")
            .option("startingOffsets", "earliest")
            .option("failOnDataLoss", "false")
            .load(str(log_dir))
        )
        self.query = (
            df.writeStream.foreachBatch(self._batch)
            .option("checkpointLocation", str(work / "spark-checkpoint"))
            .trigger(processingTime="1 second")
            .start()
        )

    def _batch(self, df, batch_id: int) -> None:
        with self._cond:
            if self._stopping:
                return  # stop() is under way: no Spark call that it could interrupt
            self._busy = True
        try:
            self.check_batch(df, batch_id)
        except Exception:
            if not self._stopping:
                raise
            # query.stop() interrupted this batch: returning keeps the Py4J error from Spark
            # (see the class docstring); the batch's rows were not all checked, which is fine
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def check_batch(self, df, batch_id: int) -> None:
        rows = df.select("topic", "partition", "offset", "key", "value").collect()
        by_tp: dict[TopicPartition, list[tuple]] = {}
        for r in rows:
            key = None if r.key is None else bytes(r.key)
            value = None if r.value is None else bytes(r.value)
            by_tp.setdefault(TopicPartition(r.topic, r.partition), []).append(
                (r.offset, key, value)
            )
        for tp, tp_rows in by_tp.items():
            self.inv.check("spark stream", tp, tp_rows, self.high_watermark_of(tp))
        self.inv.note("spark stream")
        self.batches += 1

    def check(self) -> None:
        """A violation per new error line of the driver's stderr, and one (once) when the query
        died, failed or stalled."""
        self._report_driver_findings()
        if self._failed:
            return
        problem = self._problem()
        if problem is not None:
            self._failed = True
            self.inv.violate(problem)

    def _report_driver_findings(self) -> None:
        found = self.driver_log.findings_since(self._findings_seen)
        self._findings_seen += len(found)
        for line in found:
            self.inv.violate(f"spark driver stderr: {line}")

    def _problem(self) -> str | None:
        exc = self.query.exception()
        if exc is not None:
            return f"spark stream failed: {str(exc)[:500]}"
        if not self.query.isActive:
            return "spark stream: the query stopped before the end of the soak"
        stall = time.time() - self._last_progress_s()
        self.longest_stall_s = max(self.longest_stall_s, stall)
        if stall > self.STALL_S:
            return f"spark stream: no progress report for {stall:.0f} s"
        return None

    def _last_progress_s(self) -> float:
        progress = self.query.lastProgress
        if progress is None:
            return self._started
        stamp = datetime.datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00"))
        return stamp.timestamp()

    def stop(self) -> None:
        """Checks the query, stops it between batches (see the class docstring), then reports
        what the driver printed meanwhile."""
        self.check()
        with self._cond:
            self._stopping = True
            self._cond.wait_for(lambda: not self._busy, timeout=self.STOP_WAIT_S)
        self.query.stop()
        time.sleep(1.0)  # let the pump read what the JVM printed while stopping
        self._report_driver_findings()

    def summary(self) -> str:
        return (
            f"  spark stream {self.batches:>6} batches, longest wait for a progress report "
            f"{self.longest_stall_s:.0f} s, {self.driver_log.lines} driver stderr lines"
        )


def soak(args: argparse.Namespace) -> int:
    base = temp_base()
    inv = Invariants()
    samples: list[tuple[float, float, int]] = []  # (seconds since start, RSS MiB, fds)
    config = BrokerConfig(log_retention_check_interval_ms=1000, log_cleaner_backoff_ms=1000)
    cluster = EmbeddedCluster(base / "cluster", 3, config=config)
    stream: SparkReader | None = None
    began = time.monotonic()
    deadline = began + args.minutes * 60
    producer = Producer(cluster, args.seed, inv)
    try:
        for topic, cfg in TOPIC_CONFIGS.items():
            partitions = sum(tp.topic == topic for tp in PARTITIONS)
            cluster.create_topic(topic, partitions, replication_factor=3, config=cfg)
        log_dir = cluster.brokers[0].log_dir
        producer.start()
        if not args.no_spark:
            stream = SparkReader(
                spark_session(), log_dir, base, inv, lambda tp: high_watermark(cluster, tp)
            )
        next_consume = 0.0
        while time.monotonic() < deadline:
            for tp in PARTITIONS:
                reader_loop(inv, cluster, log_dir, tp, consume_now=time.monotonic() > next_consume)
            if time.monotonic() > next_consume:
                next_consume = time.monotonic() + 10
            if stream is not None:
                stream.check()
            samples.append((time.monotonic() - began, rss_mb(), open_fds()))
            time.sleep(0.5)
    finally:
        producer.stop.set()
        producer.join(30)
        if stream is not None:
            stream.stop()
            stream.spark.stop()
        cluster.close()
        shutil.rmtree(base, ignore_errors=True)
    check_flat(samples, inv)
    print_summary(args, inv, producer, samples, [] if stream is None else [stream.summary()])
    return 1 if inv.violations else 0


def reader_loop(
    inv: Invariants,
    cluster: EmbeddedCluster,
    log_dir: Path,
    tp: TopicPartition,
    *,
    consume_now: bool,
) -> None:
    readers = [("view", read_view)] + ([("consume", consume)] if consume_now else [])
    for name, read in readers:
        for attempt in range(RETENTION_RETRIES):

            def check(rows: list[tuple], name: str = name) -> None:
                inv.check(name, tp, rows, high_watermark(cluster, tp))  # the HW after the read

            try:
                read(log_dir, tp, check)
            except Exception as e:  # a reader must not fail on a live log
                if _retention_race(e):
                    inv.note(
                        f"{name} retention race"
                        if attempt + 1 < RETENTION_RETRIES
                        else f"{name} starved by retention"
                    )
                    continue
                inv.violate(f"{name}: reading {tp} failed: {type(e).__name__}: {str(e)[:300]}")
                break
            inv.note(name)
            break


RETENTION_RETRIES = 4


def _retention_race(e: Exception) -> bool:
    """Retention deleted the segments a read was at (Kafka's consumer: OffsetOutOfRange, then a
    reset to the new log start): read again from the new start."""
    return (
        isinstance(e, OffsetOutOfRangeError)
        or "below the first segment" in str(e)
        or ("out of range" in str(e))
    )


def _minute(samples: list[tuple[float, float, int]], first: bool) -> tuple[float, float]:
    end = samples[-1][0]
    part = [s for s in samples if (s[0] <= 60 if first else s[0] >= end - 60)] or samples
    return sum(s[1] for s in part) / len(part), sum(s[2] for s in part) / len(part)


def check_flat(samples: list[tuple[float, float, int]], inv: Invariants) -> None:
    if len(samples) < 2:
        return
    (rss0, fd0), (rss1, fd1) = _minute(samples, True), _minute(samples, False)
    if rss1 > rss0 * 1.5 + 64:
        inv.violate(f"RSS grew from {rss0:.0f} MiB (first minute) to {rss1:.0f} MiB (last)")
    if fd1 > fd0 + 50:
        inv.violate(f"open descriptors grew from {fd0:.0f} (first minute) to {fd1:.0f} (last)")


TIMELINE_S = 300


def rss_timeline(samples: list[tuple[float, float, int]]) -> str:
    """The RSS of the first sample at or after each ``TIMELINE_S`` mark, and the last one: the
    shape of any growth (steady, a step, a plateau)."""
    picked, mark = [], 0.0
    for t, rss, _ in samples:
        if t >= mark:
            picked.append(rss)
            mark += TIMELINE_S
    picked.append(samples[-1][1])
    return " ".join(f"{r:.0f}" for r in picked)


def print_summary(args, inv: Invariants, producer: Producer, samples, extra: list[str]) -> None:
    print(f"\nsoak: {args.minutes} min, {producer.acked} records acknowledged (acks=all)")
    for name in sorted(inv.reads):
        checked = inv.records.get(name, 0)
        print(f"  {name:<13} {inv.reads[name]:>6} reads, {checked:>9} records checked")
    for tp, seen in inv.seen.items():
        print(f"  {tp}: {seen.count} distinct offsets seen")
    if len(samples) >= 2:
        (rss0, fd0), (rss1, fd1) = _minute(samples, True), _minute(samples, False)
        print(
            f"  RSS {rss0:.0f} MiB first minute, {rss1:.0f} MiB last minute; open descriptors "
            f"{fd0:.0f} -> {fd1:.0f}"
        )
        print(f"  RSS every {TIMELINE_S // 60} minutes (MiB): {rss_timeline(samples)}")
    for line in extra:
        print(line)
    print(f"{len(inv.violations)} violations")
    for v in inv.violations:
        print(f"- {v}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-spark", action="store_true", help="skip the streaming query")
    return soak(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
