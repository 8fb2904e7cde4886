"""Spark batch reads: ``format("kafkalog")`` against Spark's Parquet reader, in one SparkSession.

    .venv/bin/python benchmarks/spark_read.py [--rows N] [--partitions P] [--value-bytes V]
                                              [--batch-bytes B] [--repeat R] [--master M]
                                              [--kafkalog-option k=v ...]

Builds, in a temporary directory deleted at the end:

- two log dirs of the same rows (``CODECS``): an embedded ``Broker``, a topic of P partitions
  (default 4), N records (default 5 M) spread evenly over them, 12-byte keys and V-byte values
  (default 100, random alphanumeric), CreateTime timestamps 1 ms apart; produced as prebuilt
  record batches v2 of about B bytes of records (default 1,000,000, under the topic's
  ``max.message.bytes``) made by ``columnar_encoder.encode_batches``, uncompressed in one
  (``kafkalog``) and lz4-compressed in the other (``kafkalog-lz4``); then the broker is closed;
- their Parquet copy: the uncompressed log dir read once with ``format("kafkalog")`` and written
  with ``df.write.parquet`` (same schema, same rows, P files, Spark's default snappy codec).

Then, with one SparkSession (``local[2]``, ``spark.sql.shuffle.partitions`` = P), times
``df.write.format("noop").mode("overwrite").save()`` of a freshly loaded DataFrame of:

- kafkalog, kafkalog-lz4: ``spark.read.format("kafkalog").option("subscribe", ...).load(log_dir)``
  of each log dir;
- parquet: ``spark.read.parquet(copy)``;
- ceiling: a minimal Python data source (``_arrow_ceiling.py`` beside this file) whose tasks
  yield one prebuilt Arrow record batch of the same schema over and over: same row count, P
  partitions, batches of as many rows as kafkalog's reader yields on average. What Spark's
  Python data source path costs without any reading or decoding: kafkalog / ceiling is the
  share of the time that is not fetching and decoding.

Before that, kafkalog's executor side runs alone in this process for each log dir (plan, then
each task's ``read`` one after the other, its fetches and decodes timed), and the rows are
checked: each kafkalog read and the Parquet copy give the same count and the same sum of row
hashes, the ceiling the same count. Then one warm-up each and R rounds (default 5) alternating
the sources; prints the medians as a markdown table with rows/s, the ratio to Parquet (the bar:
at least 1.0x), the CPU seconds of Spark's processes (the JVM and its Python workers) per read
and Parquet's CPU over each source's (far steadier than wall time on a loaded machine), the
machine (cores, load average) and the Spark settings, and where kafkalog's executor time goes
(fetch, decode, Arrow batch sizes; Spark's batches per second).
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import platform
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

from _spark_common import (  # noqa: E402
    TOPIC,
    build_log_dir,
    cpu_model,
    descendants_cpu_seconds,
    start_spark,
)

from broker_embedded.record import columnar_encoder  # noqa: E402
from broker_embedded.storage.log_dir_fetch_source import LogDirFetchSource  # noqa: E402

BAR = 1.0
SEED = 42
# the kafkalog cases: their log dirs hold the same rows in batches of this compression
CODECS = {"kafkalog": "none", "kafkalog-lz4": "lz4"}


# -- the sources -------------------------------------------------------------------------------


def kafkalog_df(spark, log_dir: Path, options: dict[str, str] | None = None):
    reader = spark.read.format("kafkalog").option("subscribe", TOPIC)
    for name, value in (options or {}).items():
        reader = reader.option(name, value)
    return reader.load(str(log_dir))


def parquet_df(spark, path: Path):
    return spark.read.parquet(str(path))


def ceiling_df(spark, rows: int, partitions: int, value_bytes: int, batch_rows: int):
    return (
        spark.read.format("arrow_ceiling")
        .option("rows", rows)
        .option("partitions", partitions)
        .option("valueBytes", value_bytes)
        .option("batchRows", batch_rows)
        .option("topic", TOPIC)
        .load()
    )


# -- timing ------------------------------------------------------------------------------------


def noop(df) -> tuple[float, float]:
    """(wall seconds, CPU seconds of Spark's processes) of a ``noop`` write of ``df``."""
    gc.collect()
    cpu, began = descendants_cpu_seconds(), time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - began, descendants_cpu_seconds() - cpu


def start_spark_with_ceiling(
    master: str,
    partitions: int,
    driver_memory: str,
    app_name: str = "kafkalog-bench-spark-read",
    extra_conf: dict[str, str] | None = None,
):
    """A SparkSession (``start_spark``, then ``extra_conf``) with the ceiling source registered
    as ``arrow_ceiling``."""
    # the Python workers import the ceiling source (_arrow_ceiling.py) from this directory
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p
    )
    executor_env = {"spark.executorEnv.PYTHONPATH": os.environ["PYTHONPATH"], **(extra_conf or {})}
    spark = start_spark(app_name, master, partitions, driver_memory, "WARN", executor_env)
    from _arrow_ceiling import ArrowCeilingDataSource

    spark.dataSource.register(ArrowCeilingDataSource)
    return spark


def fingerprint(df) -> tuple[int, int]:
    """(rows, a sum of hashes of every row's key, value, partition, offset and timestamp)."""
    from pyspark.sql import functions as F

    digest = F.xxhash64("key", "value", "partition", "offset", "timestamp").cast("decimal(38,0)")
    row = df.agg(F.count("*").alias("n"), F.sum(digest).alias("h")).first()
    return row["n"], int(row["h"])


# -- where kafkalog's time goes ----------------------------------------------------------------


def profile_reader(log_dir: Path, extra: dict[str, str]) -> dict[str, float]:
    """The executor side alone, in this process: plan the read as Spark's planner does, then
    run each task's ``read`` one after the other on one core, timing its fetches and decodes
    (by wrapping the reader module's ``_fetch`` and ``decode``) and counting the Arrow batches
    it yields."""
    from datasource import offset_range_reader as orr
    from datasource.kafka_batch_reader import KafkaBatchReader
    from datasource.kafka_source_options import KafkaSourceOptions

    options = KafkaSourceOptions.parse(
        {"path": str(log_dir), "subscribe": TOPIC, **extra}, streaming=False
    )
    reader = KafkaBatchReader(options)
    spent = {"fetch": 0.0, "decode": 0.0, "fetches": 0}

    def timed(name: str, fn: Callable) -> Callable:
        def wrapper(*args, **kwargs):
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - began
                if name == "fetch":
                    spent["fetches"] += 1

        return wrapper

    original = LogDirFetchSource.fetch, LogDirFetchSource.fetch_in_place, orr.decode
    LogDirFetchSource.fetch = timed("fetch", LogDirFetchSource.fetch)
    LogDirFetchSource.fetch_in_place = timed("fetch", LogDirFetchSource.fetch_in_place)
    orr.decode = timed("decode", orr.decode)
    rows = batches = nbytes = 0
    began = time.perf_counter()
    try:
        tasks = reader.partitions()
        for task in tasks:
            for batch in reader.read(task):
                rows += batch.num_rows
                batches += 1
                nbytes += batch.nbytes
    finally:
        LogDirFetchSource.fetch, LogDirFetchSource.fetch_in_place, orr.decode = original
    total = time.perf_counter() - began
    return {
        **spent,
        "total": total,
        "rows": rows,
        "batches": batches,
        "bytes": nbytes,
        "tasks": len(tasks),
    }


def print_profile(name: str, prof: dict[str, float], kafkalog_rate: float) -> None:
    rows, total = prof["rows"], prof["total"]
    other = total - prof["fetch"] - prof["decode"]
    per_batch = rows / prof["batches"]
    print(
        f"\n{name}'s executor side alone (its {prof['tasks']:.0f} tasks one after the other in "
        f"one process, no Spark): {total:.2f} s, {rows / total / 1e6:.2f} M rows/s on one core; "
        f"{prof['fetches']:.0f} fetches {prof['fetch']:.2f} s, decode {prof['decode']:.2f} s, "
        f"planning and the rest {other:.2f} s; {prof['batches']:.0f} Arrow "
        f"batches of {per_batch:,.0f} rows ({prof['bytes'] / prof['batches'] / 2**20:.1f} MiB) "
        f"on average. Through Spark: {kafkalog_rate / per_batch:.0f} batches/s."
    )


# -- report ------------------------------------------------------------------------------------


def print_report(
    rows: int, runs: dict[str, list[tuple[float, float]]], spark, settings: list[tuple[str, str]]
) -> dict[str, float]:
    times = {name: [wall for wall, _ in ts] for name, ts in runs.items()}
    cpus = {name: statistics.median(cpu for _, cpu in ts) for name, ts in runs.items()}
    med = {name: statistics.median(ts) for name, ts in times.items()}
    rate = {name: rows / s for name, s in med.items()}
    print()
    print(
        f"machine: {os.cpu_count()} cores ({cpu_model()}), Python {platform.python_version()}, "
        f"PySpark {spark.version}, Java {spark._jvm.System.getProperty('java.version')}, "
        "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())
    )
    print("spark: " + ", ".join(f"{k}={v}" for k, v in settings))
    print()
    print("| source | median s | min s | max s | rows/s | / parquet | CPU s | CPU: parquet / |")
    print("|---|---|---|---|---|---|---|---|")
    for name in times:
        ratio, cpu_ratio = rate[name] / rate["parquet"], cpus["parquet"] / cpus[name]
        print(
            f"| {name} | {med[name]:.2f} | {min(times[name]):.2f} | {max(times[name]):.2f} "
            f"| {rate[name] / 1e6:.2f} M | {ratio:.2f}x | {cpus[name]:.2f} | {cpu_ratio:.2f}x |"
        )
    print()
    for name in CODECS:
        vs_parquet = rate[name] / rate["parquet"]
        verdict = "meets" if vs_parquet >= BAR else "is BELOW"
        print(
            f"{name} / parquet = {vs_parquet:.2f}x ({verdict} the bar of {BAR}x); "
            f"{name} / ceiling = {rate[name] / rate['ceiling']:.2f}x"
        )
    print(
        f"ceiling / parquet = {rate['ceiling'] / rate['parquet']:.2f}x (the ceiling pays only "
        "Spark's cost of moving Arrow batches out of a Python data source)"
    )
    return rate


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch-bytes", type=int, default=1_000_000, help="records bytes")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument(
        "--kafkalog-option",
        action="append",
        default=[],
        metavar="k=v",
        help="an option of the timed kafkalog reads, e.g. kafka.max.partition.fetch.bytes=8388608",
    )
    args = parser.parse_args(argv)
    extra = dict(item.split("=", 1) for item in args.kafkalog_option)

    began = time.perf_counter()
    print(f"numba warm-up (encoder): {columnar_encoder.warm_up():.2f} s")
    with tempfile.TemporaryDirectory(prefix="kafkalog-spark-read-") as tmp:
        log_dirs = {name: Path(tmp) / name for name in CODECS}
        parquet = Path(tmp) / "parquet"
        for name, codec in CODECS.items():
            t = time.perf_counter()
            batches, size = build_log_dir(
                log_dirs[name],
                args.rows,
                args.partitions,
                args.value_bytes,
                args.batch_bytes,
                seed=SEED,
                random_keys=True,
                compression=codec,
            )
            print(
                f"log dir {name}: {args.rows:,} records, {args.partitions} partitions, "
                f"{batches:,} {codec} batches of {size / batches / 1024:.0f} KiB, "
                f"{size / 1e6:,.0f} MB, built in {time.perf_counter() - t:.1f} s"
            )
        # also puts the logs in the page cache
        profs = {name: profile_reader(log_dirs[name], extra) for name in CODECS}
        t = time.perf_counter()
        spark = start_spark_with_ceiling(args.master, args.partitions, args.driver_memory)
        print(f"SparkSession started in {time.perf_counter() - t:.1f} s")
        try:
            t = time.perf_counter()
            kafkalog_df(spark, log_dirs["kafkalog"]).write.parquet(str(parquet))
            pq_bytes = sum(f.stat().st_size for f in parquet.glob("*.parquet"))
            print(
                f"parquet copy: {pq_bytes / 1e6:,.0f} MB in "
                f"{len(list(parquet.glob('*.parquet')))} files, written in "
                f"{time.perf_counter() - t:.1f} s"
            )
            prof = profs["kafkalog"]
            batch_rows = round(prof["rows"] / prof["batches"])
            sources: dict[str, Callable[[], object]] = {
                name: functools.partial(kafkalog_df, spark, log_dirs[name], extra)
                for name in CODECS
            }
            sources["parquet"] = lambda: parquet_df(spark, parquet)
            sources["ceiling"] = lambda: ceiling_df(
                spark, args.rows, args.partitions, args.value_bytes, batch_rows
            )
            check_rows(sources, args.rows)
            for name, make in sources.items():
                print(f"warm-up {name}: {noop(make())[0]:.2f} s")
            runs: dict[str, list[tuple[float, float]]] = {name: [] for name in sources}
            for r in range(args.repeat):
                for name, make in sources.items():
                    runs[name].append(noop(make()))
                print(
                    f"round {r + 1}/{args.repeat}: "
                    + ", ".join(f"{name} {ts[-1][0]:.2f} s" for name, ts in runs.items()),
                    flush=True,
                )
            conf = spark.sparkContext.getConf()
            settings = [
                ("master", conf.get("spark.master")),
                ("spark.sql.shuffle.partitions", spark.conf.get("spark.sql.shuffle.partitions")),
                ("spark.driver.memory", conf.get("spark.driver.memory")),
                (
                    "spark.sql.files.maxPartitionBytes",
                    spark.conf.get("spark.sql.files.maxPartitionBytes"),
                ),
                ("ceiling batch rows (kafkalog's average)", f"{batch_rows:,}"),
                *((f"kafkalog {k}", v) for k, v in extra.items()),
            ]
            rate = print_report(args.rows, runs, spark, settings)
            for name in CODECS:
                print_profile(name, profs[name], rate[name])
        finally:
            spark.stop()
    print(f"\ntotal {time.perf_counter() - began:.0f} s")


def check_rows(sources: dict[str, Callable[[], object]], rows: int) -> None:
    """Each kafkalog log dir and the Parquet copy give the same schema, count and hash of rows,
    the ceiling the same count; AssertionError otherwise."""
    theirs = fingerprint(sources["parquet"]())
    schema = sources["parquet"]().schema  # type: ignore[attr-defined]
    for name in CODECS:
        if sources[name]().schema != schema:  # type: ignore[attr-defined]
            raise AssertionError(f"the Parquet copy's schema differs from {name}'s")
        ours = fingerprint(sources[name]())
        if ours != theirs or ours[0] != rows:
            raise AssertionError(f"{name} read {ours}, the Parquet copy {theirs} (rows, hash)")
    if (n := sources["ceiling"]().count()) != rows:  # type: ignore[attr-defined]
        raise AssertionError(f"the ceiling source gave {n:,} rows, not {rows:,}")
    print(
        f"checked: {', '.join(CODECS)} and Parquet give the same rows (count and hash), the "
        "ceiling the same count"
    )


if __name__ == "__main__":
    main()
