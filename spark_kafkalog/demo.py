"""``kafkalog demo``: the main job, end to end on an embedded log dir (recreated each run).

1. An embedded :class:`Broker` (its own cleaner off: step 5 compacts) creates the topics:
   ``events`` (3 partitions), ``profiles`` (3 partitions, ``cleanup.policy=compact``, keyed by
   user, a segment per 10 simulated minutes: ``segment.ms``), ``purchases`` and ``enriched``
   (3 partitions each, the derived topics the Spark jobs fill), then produces a simulated hour
   of a web shop: page views, clicks, searches, add-to-carts and purchases as JSON, keyed by
   user id (placed by Kafka's default partitioner, murmur2), with ``source`` and ``trace-id``
   headers, in lz4 batches of about 16 KiB as a producer sends them; and profile updates (a
   tier and a country per user, some deletions as tombstones), zstd, a batch per partition and
   simulated minute (they are rare: a producer's ``linger.ms`` sends them in small batches).
   Then the broker is closed: a running broker owns the log dir, ``df.write`` appends only to
   a log dir no broker owns, and the compaction job leaves a broker's log dir alone.
2. A SparkSession (``local[2]``) reads ``events`` with ``spark.read.format("kafkalog")`` and counts
   the events and the purchase revenue by type and partition.
3. It reads a quarter of an hour with ``startingTimestamp`` / ``endingTimestamp`` (found through
   the time index, no scan).
4. It reads ``profiles`` and keeps the latest record per key (partition, key, offset, value),
   what compaction keeps, materialised with ``localCheckpoint`` (step 5 changes the files).
5. The compaction job (:func:`spark_kafkalog.compaction_job.run`, one Spark task per
   partition) cleans ``profiles``: its size on disk and record count before and after, the
   job's summary table, and the same read of the latest value per key after, compared with
   4's both ways with ``exceptAll``: identical. The active segments are never cleaned.
6. It writes the purchases, reshaped, to ``purchases`` with ``df.write.format("kafkalog")`` and
   reads them back: count, revenue, and revenue by the users' current tier (a join with 4).
7. A streaming query (``readStream`` with ``maxOffsetsPerTrigger``, ``availableNow``) copies
   the events, enriched, to ``enriched`` exactly once in micro-batches; the copy is counted.

Everything is printed as it goes, then a summary with the timings. The generator is seeded:
:func:`generate_events` and :func:`generate_profiles` give the exact records produced, which
the tests use as the expected figures. The step numbers shift by one when the demo starts its
own SparkSession (a step of its own).
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pyarrow as pa

from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.client.default_partitioner import partitions_for_keys
from broker_embedded.record.columnar_encoder import encode_batches
from spark_kafkalog.kernel_cache import ensure_compiled

DEFAULT_EVENTS = 300_000
PARTITIONS = 3
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z: the simulated hour starts here
HOUR_MS = 3_600_000
RANGE_MINUTES = (15, 30)  # the timestamp range of step 3
EVENT_TYPES = ("page_view", "click", "search", "add_to_cart", "purchase")
EVENT_WEIGHTS = (0.55, 0.2, 0.12, 0.08, 0.05)
SOURCES = (b"web", b"ios", b"android")
TIERS = ("free", "plus", "pro")
COUNTRIES = ("DE", "FR", "US", "GB", "JP", "BR", "IN")
TOMBSTONE_RATE = 0.03
BATCH_BYTES = 16 * 1024  # Kafka's producer batch.size
NO_TIER = "(none)"
PROFILES_LINGER_MS = 60_000  # a batch of profile updates per partition and simulated minute
PROFILES_SEGMENT_MS = 600_000  # profiles' segment.ms: a segment per 10 simulated minutes
COMPACTION_MAP_BYTES = 4 << 20  # the compaction job's offset map per task: 174,762 slots

EVENT_SCHEMA = "user STRING, type STRING, page STRING, amount_cents INT, ts BIGINT"


# -- the generator -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Events:
    """Generated events in time order: keys ``user-NNNNN``, JSON values, ms timestamps."""

    keys: pa.Array  # binary
    values: pa.Array  # binary (JSON)
    timestamps: np.ndarray  # int64 ms, non-decreasing
    types: np.ndarray  # index into EVENT_TYPES
    amounts: np.ndarray  # cents; 0 unless a purchase
    headers: pa.Array  # list<struct<key: string, value: binary>>


@dataclass(frozen=True)
class Profiles:
    """Generated profile updates in time order; a None value is a tombstone (a deletion)."""

    keys: list[bytes]
    values: list[bytes | None]
    timestamps: np.ndarray


def users_for(events: int) -> int:
    return max(50, events // 60)


def generate_events(n: int, seed: int = 42) -> Events:
    """``n`` events spread over the simulated hour; a few users are much busier than most."""
    rng = np.random.default_rng(seed)
    users = users_for(n)
    weights = 1.0 / (np.arange(users) + 10.0)
    user = rng.choice(users, n, p=weights / weights.sum())
    types = rng.choice(len(EVENT_TYPES), n, p=EVENT_WEIGHTS)
    ts = START_MS + np.sort(rng.integers(0, HOUR_MS, n))
    item = rng.integers(1, 2_000, n)
    amounts = np.where(types == EVENT_TYPES.index("purchase"), rng.integers(199, 25_000, n), 0)
    source = rng.choice(len(SOURCES), n, p=(0.6, 0.25, 0.15))
    trace = rng.integers(0, 1 << 63, n)
    keys, values, header_values = [], [], []
    purchase = EVENT_TYPES.index("purchase")
    search = EVENT_TYPES.index("search")
    for u, t, i, a, s, tr, when in zip(
        user.tolist(),
        types.tolist(),
        item.tolist(),
        amounts.tolist(),
        source.tolist(),
        trace.tolist(),
        ts.tolist(),
        strict=True,
    ):
        key = f"user-{u:05d}"
        page = f"/search?q=item{i}" if t == search else f"/product/{i}"
        amount = f',"amount_cents":{a}' if t == purchase else ""
        keys.append(key.encode())
        values.append(
            f'{{"user":"{key}","type":"{EVENT_TYPES[t]}","page":"{page}"{amount},"ts":{when}}}'.encode()
        )
        header_values += (SOURCES[s], b"%016x" % tr)
    header_struct = pa.StructArray.from_arrays(
        [pa.array(["source", "trace-id"] * n, pa.string()), pa.array(header_values, pa.binary())],
        fields=[pa.field("key", pa.string()), pa.field("value", pa.binary())],
    )
    headers = pa.ListArray.from_arrays(
        pa.array(np.arange(0, 2 * n + 1, 2, dtype=np.int32)), header_struct
    )
    return Events(
        pa.array(keys, pa.binary()), pa.array(values, pa.binary()), ts, types, amounts, headers
    )


def generate_profiles(users: int, seed: int = 42) -> Profiles:
    """About four updates per user over the hour; some are deletions (tombstones)."""
    rng = np.random.default_rng(seed + 1)
    n = 4 * users
    user = np.concatenate([np.arange(users), rng.integers(0, users, n - users)])
    rng.shuffle(user[users // 2 :])  # half the users get their first profile later in the hour
    ts = START_MS + np.sort(rng.integers(0, HOUR_MS, n))
    tier = rng.choice(len(TIERS), n, p=(0.7, 0.2, 0.1))
    country = rng.integers(0, len(COUNTRIES), n)
    deleted = rng.random(n) < TOMBSTONE_RATE
    keys, values = [], []
    for u, t, c, d, when in zip(
        user.tolist(), tier.tolist(), country.tolist(), deleted.tolist(), ts.tolist(), strict=True
    ):
        key = f"user-{u:05d}"
        keys.append(key.encode())
        values.append(
            None
            if d
            else f'{{"user":"{key}","tier":"{TIERS[t]}","country":"{COUNTRIES[c]}",'
            f'"updated":{when}}}'.encode()
        )
    return Profiles(keys, values, ts)


def latest_profiles(profiles: Profiles) -> dict[bytes, bytes | None]:
    """The last value per key (None: deleted), what compaction keeps."""
    return dict(zip(profiles.keys, profiles.values, strict=True))


# -- step 1: the broker ------------------------------------------------------------------------


def _produce_partitioned(
    broker: Broker,
    topic: str,
    keys: pa.Array,
    values: pa.Array,
    timestamps: np.ndarray,
    headers: pa.Array | None,
    compression: str,
    linger_ms: int | None = None,
) -> int:
    """Produce rows to the partitions their keys hash to, in order, as batches of about
    BATCH_BYTES (one produce request per batch, acks=all); with ``linger_ms``, a partition's
    rows of each ``linger_ms`` interval of their timestamps go in batches of their own. The
    number of batches."""
    part = partitions_for_keys(keys, PARTITIONS)
    batches = 0
    for p in range(PARTITIONS):
        in_p = np.flatnonzero(part == p)
        if linger_ms is None:
            groups = [in_p]
        else:
            interval = timestamps[in_p] // linger_ms
            groups = np.split(in_p, np.flatnonzero(np.diff(interval)) + 1)
        for group in groups:
            if not len(group):
                continue
            rows = pa.array(group)
            encoded = encode_batches(
                keys.take(rows),
                values.take(rows),
                timestamps[group],
                None if headers is None else headers.take(rows),
                compression=compression,
                max_batch_bytes=BATCH_BYTES,
            )
            for batch in encoded:
                broker.produce(topic, p, batch, acks="all")
            batches += len(encoded)
    return batches


def produce(log_dir: Path, events: Events, profiles: Profiles) -> int:
    """Step 1: create the topics and produce; the broker is closed on return. Batches made.
    The broker's own cleaner is off: the compaction job (step 5) compacts ``profiles``."""
    with Broker(log_dir, config=BrokerConfig(log_cleaner_threads=0), create=True) as broker:
        broker.create_topic("events", PARTITIONS, config={"retention.ms": -1})
        broker.create_topic(
            "profiles",
            PARTITIONS,
            config={"cleanup.policy": "compact", "segment.ms": PROFILES_SEGMENT_MS},
        )
        broker.create_topic("purchases", PARTITIONS, config={"retention.ms": -1})
        broker.create_topic("enriched", PARTITIONS, config={"retention.ms": -1})
        batches = _produce_partitioned(
            broker, "events", events.keys, events.values, events.timestamps, events.headers, "lz4"
        )
        values = pa.array(profiles.values, pa.binary())
        batches += _produce_partitioned(
            broker,
            "profiles",
            pa.array(profiles.keys, pa.binary()),
            values,
            profiles.timestamps,
            None,
            "zstd",
            PROFILES_LINGER_MS,
        )
    return batches


# -- steps 2 to 7: Spark -----------------------------------------------------------------------

_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
logger.hadoop.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop.level = error
"""


def start_spark():
    """A quiet SparkSession: local[2], no UI, no progress bars, log level WARN, UTC."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    with tempfile.TemporaryDirectory(prefix="kafkalog-demo-") as tmp:
        log4j = Path(tmp) / "log4j2.properties"
        log4j.write_text(_LOG4J2)
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("kafkalog-demo")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j}")
            .getOrCreate()
        )
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _read(spark, log_dir: Path, topic: str, **options: str):
    reader = spark.read.format("kafkalog").option("subscribe", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load(str(log_dir))


def _events(df):
    from pyspark.sql import functions as F

    return df.withColumn("e", F.from_json(F.col("value").cast("string"), EVENT_SCHEMA))


@dataclass(frozen=True)
class TopicFigures:
    """A topic's size on disk and what Spark reads of it (step 5, before and after)."""

    segments: int  # .log files
    bytes: int  # their sizes: the log's size, as Kafka counts it
    records: int
    keys: int  # (partition, key) pairs: the latest record per key
    tombstones: int  # keys whose latest record is a tombstone


@dataclass
class DemoResult:
    """The figures the demo prints (and its tests check)."""

    events: int = 0
    profile_updates: int = 0
    batches: int = 0
    by_type: dict[str, int] = field(default_factory=dict)
    by_partition: dict[int, int] = field(default_factory=dict)
    revenue_cents: int = 0
    range_events: int = 0
    range_offsets: dict[int, tuple[int, int]] = field(default_factory=dict)
    profiles_live: int = 0
    profiles_deleted: int = 0
    live_by_tier: dict[str, int] = field(default_factory=dict)
    purchases_read: int = 0
    purchases_revenue_cents: int = 0
    purchases_by_partition: dict[int, int] = field(default_factory=dict)
    revenue_by_tier: dict[str, int] = field(default_factory=dict)
    compaction_before: TopicFigures | None = None
    compaction_after: TopicFigures | None = None
    compaction_outcomes: tuple = ()  # compaction_job.PartitionOutcome, one per partition
    compaction_exit_code: int = 0
    latest_missing: int = -1  # rows of the latest per key before that are not there after
    latest_extra: int = -1  # and the other way round
    stream_batches: list[int] = field(default_factory=list)  # input rows per micro-batch
    enriched_read: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)  # the printed step numbers


def _money(cents: int) -> str:
    return f"${cents / 100:,.2f}"


def _clock(ms: int) -> str:
    return time.strftime("%H:%M", time.gmtime(ms / 1000))


def aggregate(spark, log_dir: Path, res: DemoResult, out: TextIO) -> None:
    """Step 2: events and revenue by type, events by partition."""
    from pyspark.sql import functions as F

    rows = (
        _events(_read(spark, log_dir, "events"))
        .groupBy("partition", F.col("e.type").alias("type"))
        .agg(F.count("*").alias("n"), F.sum("e.amount_cents").alias("cents"))
        .collect()
    )
    by_type: Counter[str] = Counter()
    cents: Counter[str] = Counter()
    for r in rows:
        by_type[r["type"]] += r["n"]
        cents[r["type"]] += r["cents"] or 0
        res.by_partition[r["partition"]] = res.by_partition.get(r["partition"], 0) + r["n"]
    res.by_type = dict(by_type.most_common())
    res.revenue_cents = sum(cents.values())
    out.write(f"    {'type':<12} {'events':>9} {'revenue':>14}\n")
    for kind, n in by_type.most_common():
        money = _money(cents[kind]) if cents[kind] else ""
        out.write(f"    {kind:<12} {n:>9,} {money:>14}".rstrip() + "\n")
    out.write(f"    {'total':<12} {sum(by_type.values()):>9,} {_money(res.revenue_cents):>14}\n")
    parts = ", ".join(f"{p}: {n:,}" for p, n in sorted(res.by_partition.items()))
    out.write(f"    by partition (murmur2 of the key): {parts}\n")


def time_range(spark, log_dir: Path, res: DemoResult, out: TextIO) -> None:
    """Step 3: a quarter of an hour, found through the time index."""
    from pyspark.sql import functions as F

    lo, hi = (START_MS + m * 60_000 for m in RANGE_MINUTES)
    df = _read(spark, log_dir, "events", startingTimestamp=str(lo), endingTimestamp=str(hi))
    rows = (
        df.groupBy("partition")
        .agg(
            F.count("*").alias("n"),
            F.min("offset").alias("lo"),
            F.max("offset").alias("hi"),
            F.min("timestamp").alias("first"),
            F.max("timestamp").alias("last"),
        )
        .orderBy("partition")
        .collect()
    )
    res.range_events = sum(r["n"] for r in rows)
    res.range_offsets = {r["partition"]: (r["lo"], r["hi"]) for r in rows}
    first = min(r["first"] for r in rows).strftime("%H:%M:%S.%f")[:-3]
    last = max(r["last"] for r in rows).strftime("%H:%M:%S.%f")[:-3]
    offsets = ", ".join(f"{r['partition']}: [{r['lo']:,}, {r['hi']:,}]" for r in rows)
    out.write(
        f"    {res.range_events:,} events, first at {first}, last at {last}\n"
        f"    offsets (from the time index): {offsets}\n"
    )


def _latest_profiles(spark, log_dir: Path):
    from pyspark.sql import functions as F

    return (
        _read(spark, log_dir, "profiles")
        .groupBy("key")
        .agg(F.max_by("value", "offset").alias("value"))
        .withColumn("tier", F.get_json_object(F.col("value").cast("string"), "$.tier"))
    )


def _latest_per_key(spark, log_dir: Path, topic: str):
    """The latest record per key (partition, key, offset, value) and the key's record count,
    materialised (``localCheckpoint``): it stays as read while the files change (step 5)."""
    from pyspark.sql import functions as F

    return (
        _read(spark, log_dir, topic)
        .groupBy("partition", "key")
        .agg(
            F.count("*").alias("records"),
            F.max("offset").alias("offset"),
            F.max_by("value", "offset").alias("value"),
        )
        .localCheckpoint()
    )


def profiles(spark, log_dir: Path, res: DemoResult, out: TextIO):
    """Step 4: the latest profile per user (what compaction keeps); returned (materialised)
    for step 5 to compare with what is left after compaction."""
    from pyspark.sql import functions as F

    latest = _latest_per_key(spark, log_dir, "profiles")
    tier = F.get_json_object(F.col("value").cast("string"), "$.tier")
    rows = latest.groupBy(tier.alias("tier")).agg(F.count("*").alias("n")).collect()
    res.live_by_tier = {r["tier"]: r["n"] for r in rows if r["tier"] is not None}
    res.profiles_deleted = sum(r["n"] for r in rows if r["tier"] is None)
    res.profiles_live = sum(res.live_by_tier.values())
    tiers = ", ".join(f"{t} {res.live_by_tier.get(t, 0):,}" for t in TIERS)
    out.write(
        "    .groupBy(partition, key).agg(max(offset), max_by(value, offset)).localCheckpoint()\n"
        f"    {res.profile_updates:,} updates -> {res.profiles_live + res.profiles_deleted:,} "
        f"users: {res.profiles_live:,} live ({tiers}),\n"
        f"    {res.profiles_deleted:,} deleted (their latest record is a tombstone)\n"
    )
    return latest


def _figures(log_dir: Path, topic: str, latest) -> TopicFigures:
    """``topic``'s figures: its segment files, and what Spark read (``latest``: a
    :func:`_latest_per_key`)."""
    from pyspark.sql import functions as F

    row = latest.agg(
        F.sum("records").alias("records"),
        F.count("*").alias("keys"),
        F.count_if(F.col("value").isNull()).alias("tombstones"),
    ).first()
    files = [f for p in range(PARTITIONS) for f in (log_dir / f"{topic}-{p}").glob("*.log")]
    size = sum(f.stat().st_size for f in files)
    return TopicFigures(len(files), size, row["records"] or 0, row["keys"], row["tombstones"])


def _describe(when: str, f: TopicFigures, like: TopicFigures) -> str:
    """A line of figures, its columns as wide as ``like``'s."""
    w = [len(f"{n:,}") for n in (like.segments, like.bytes, like.records)]
    return (
        f"    {when:<6} {f.segments:>{w[0]}} segments, {f.bytes:>{w[1]},} bytes, "
        f"{f.records:>{w[2]},} records; latest per key: {f.keys:,} keys, "
        f"{f.tombstones:,} tombstones\n"
    )


def compact(spark, log_dir: Path, before, res: DemoResult, out: TextIO) -> None:
    """Step 5: the compaction job cleans ``profiles``; its size and record count and Spark's
    latest value per key, before (``before``: step 4's) and after (the latter identical)."""
    from spark_kafkalog.compaction_config import CompactionConfig
    from spark_kafkalog.compaction_job import run as run_compaction

    topic = "profiles"
    res.compaction_before = b = _figures(log_dir, topic, before)
    out.write(_describe("before", b, b))
    out.write(
        f'    compaction_job.run(spark, config, out): topics ["{topic}"], an offset map of '
        f"{COMPACTION_MAP_BYTES >> 20} MiB per task\n"
    )
    out.flush()
    config = CompactionConfig(
        log_dirs=(log_dir,), topics=(topic,), map_memory_per_task=COMPACTION_MAP_BYTES
    )
    report = run_compaction(spark, config, _Indented(out, " " * 6))
    res.compaction_outcomes, res.compaction_exit_code = report.outcomes, report.exit_code
    after = _latest_per_key(spark, log_dir, topic)
    res.compaction_after = a = _figures(log_dir, topic, after)
    out.write(_describe("after", a, b))
    out.write(
        f"    {1 - a.bytes / b.bytes:.0%} fewer bytes, {1 - a.records / b.records:.0%} fewer "
        "records (the active segments are never cleaned)\n"
    )
    columns = ["partition", "key", "offset", "value"]
    before, after = before.select(columns), after.select(columns)
    res.latest_missing = before.exceptAll(after).count()
    res.latest_extra = after.exceptAll(before).count()
    verdict = (
        "identical"
        if res.latest_missing == res.latest_extra == 0 and a.keys == b.keys
        else f"DIFFERENT: {res.latest_missing:,} rows lost, {res.latest_extra:,} rows new"
    )
    out.write(
        f"    [{res.steps.get('profiles', '?')}]'s latest per key vs. the same read after: "
        f"exceptAll both ways {res.latest_missing:,} and {res.latest_extra:,} rows: {verdict}\n"
    )


class _Indented(io.TextIOBase):
    """Writes to ``out`` with every line indented (the compaction job's report in step 5)."""

    def __init__(self, out: TextIO, indent: str) -> None:
        self.out, self.indent, self.at_line_start = out, indent, True

    def write(self, text: str) -> int:
        for piece in text.splitlines(keepends=True):
            if self.at_line_start:
                self.out.write(self.indent)
            self.out.write(piece)
            self.at_line_start = piece.endswith("\n")
        return len(text)

    def flush(self) -> None:
        self.out.flush()


def write_purchases(spark, log_dir: Path, res: DemoResult, out: TextIO) -> None:
    """Step 6: purchases to their own topic with df.write, read back, revenue by tier."""
    from pyspark.sql import functions as F

    purchases = (
        _events(_read(spark, log_dir, "events", includeHeaders="true"))
        .where(F.col("e.type") == "purchase")
        .select(
            "key",
            F.to_json(
                F.struct(
                    F.col("e.user").alias("user"),
                    F.col("e.page").alias("page"),
                    F.col("e.amount_cents").alias("amount_cents"),
                    F.col("e.ts").alias("ts"),
                )
            ).alias("value"),
            "headers",
        )
    )
    purchases.write.format("kafkalog").option("topic", "purchases").mode("append").save(
        str(log_dir)
    )
    back = _read(spark, log_dir, "purchases").withColumn(
        "cents", F.get_json_object(F.col("value").cast("string"), "$.amount_cents").cast("long")
    )
    rows = back.groupBy("partition").agg(F.count("*").alias("n"), F.sum("cents").alias("c"))
    rows = rows.collect()
    res.purchases_by_partition = {r["partition"]: r["n"] for r in sorted(rows)}
    res.purchases_read = sum(r["n"] for r in rows)
    res.purchases_revenue_cents = sum(r["c"] or 0 for r in rows)
    latest = _latest_profiles(spark, log_dir).select("key", "tier")
    by_tier = (
        back.join(latest, "key", "left")
        .groupBy(F.coalesce("tier", F.lit(NO_TIER)).alias("tier"))
        .agg(F.sum("cents").alias("c"))
        .collect()
    )
    res.revenue_by_tier = {r["tier"]: r["c"] or 0 for r in by_tier}
    parts = ", ".join(f"{p}: {n:,}" for p, n in res.purchases_by_partition.items())
    tiers = ", ".join(
        f"{t} {_money(res.revenue_by_tier[t])}"
        for t in (*TIERS, NO_TIER)
        if t in res.revenue_by_tier
    )
    out.write(
        f'    .where(type = "purchase").select(key, to_json(...) AS value, headers)\n'
        f'    .write.option("topic", "purchases").mode("append").save("{log_dir}")\n'
        f"    read back: {res.purchases_read:,} records ({parts}),\n"
        f"    revenue {_money(res.purchases_revenue_cents)}; by the buyer's current tier (join "
        f"with [{res.steps.get('profiles', '?')}]):\n    {tiers}\n"
    )


def stream_enriched(spark, log_dir: Path, res: DemoResult, out: TextIO) -> None:
    """Step 7: a streaming query drains the events with availableNow in micro-batches of at most
    a third of them, writing an enriched copy exactly once; then the copy is counted."""
    from pyspark.sql import functions as F

    limit = max(1, res.events // 3)
    checkpoint = log_dir / ".checkpoints" / "enrich"  # inside the recreated log dir
    stream = (
        spark.readStream.format("kafkalog")
        .option("subscribe", "events")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(limit))
        .load(str(log_dir))
    )
    enriched = stream.select(
        "key",
        F.to_json(
            F.struct(
                F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"),
                F.col("partition").alias("src_partition"),
                F.col("offset").alias("src_offset"),
            )
        ).alias("value"),
    )
    query = (
        enriched.writeStream.format("kafkalog")
        .option("topic", "enriched")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(log_dir))
    )
    query.awaitTermination(600)
    res.stream_batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    res.enriched_read = _read(spark, log_dir, "enriched").count()
    batches = ", ".join(f"{n:,}" for n in res.stream_batches)
    out.write(
        f'    .readStream ... .option("maxOffsetsPerTrigger", "{limit}")'
        f'.writeStream.format("kafkalog").option("topic", "enriched")\n'
        f"    trigger(availableNow=True): {len(res.stream_batches)} micro-batches of "
        f"{batches} rows, each committed exactly once\n"
        f"    enriched read back: {res.enriched_read:,} records\n"
    )


# -- the job -----------------------------------------------------------------------------------


def _is_log_dir(path: Path) -> bool:
    """Whether ``path`` looks like a Kafka log dir: meta.properties, or a partition directory
    (``<topic>-<n>``) holding a segment."""
    if (path / "meta.properties").is_file():
        return True
    return any(
        d.is_dir() and d.name.rpartition("-")[2].isdigit() and any(d.glob("*.log"))
        for d in path.iterdir()
    )


def recreate(log_dir: Path) -> Path:
    """``log_dir`` (absolute), emptied: deleted first if it is a log dir (an earlier run's); a
    directory that holds anything else is refused (FileExistsError), never deleted."""
    log_dir = log_dir.resolve()
    if log_dir.exists():
        if not log_dir.is_dir() or (any(log_dir.iterdir()) and not _is_log_dir(log_dir)):
            raise FileExistsError(
                f"{log_dir} exists and is not a Kafka log dir: the demo recreates its log dir "
                "each run and deletes only a log dir; choose another --dir"
            )
        shutil.rmtree(log_dir)
    log_dir.mkdir(parents=True)
    return log_dir


def run_demo(
    log_dir: Path, out: TextIO, *, events: int = DEFAULT_EVENTS, seed: int = 42, spark=None
) -> DemoResult:
    """The whole demo (module docstring). ``spark``: the session to use; without it, the active
    session of this process, else one that is started here and stopped at the end."""
    t0 = time.monotonic()
    res = DemoResult()
    log_dir = recreate(log_dir)

    def step(name: str, title: str) -> _Step:
        return _Step(res, out, name, title)

    out.write(f"kafkalog demo: log dir {log_dir} (recreated)\n\n")
    if ensure_compiled():  # before Spark starts its workers: they load, none compiles
        out.write(
            f"kernels compiled into numba's cache in {time.monotonic() - t0:.1f} s "
            "(once per install)\n\n"
        )
    with step("produce", "embedded broker: four topics, a simulated hour of a web shop") as s:
        ev = generate_events(events, seed)
        prof = generate_profiles(users_for(events), seed)
        res.events, res.profile_updates = events, len(prof.keys)
        res.batches = produce(log_dir, ev, prof)
        users = users_for(events)
        s.detail(
            f"events     {events:,} views, clicks, searches, carts and purchases of {users:,} "
            f"users,\n"
            f"           {_clock(START_MS)}-{_clock(START_MS + HOUR_MS)} UTC, JSON keyed by user, "
            "headers source and trace-id, lz4\n"
            f"profiles   {len(prof.keys):,} updates keyed by user (tier, country; "
            f"{sum(v is None for v in prof.values):,} deletions), zstd, a batch\n"
            f"           a minute, a segment per {PROFILES_SEGMENT_MS // 60_000} minutes; "
            "compacted by the Spark job below, not the broker\n"
            "purchases  empty: the Spark job writes it (enriched too: the streaming query)\n"
            f"{PARTITIONS} partitions each; {res.batches:,} batches of up to "
            f"{BATCH_BYTES // 1024} KiB produced with acks=all; broker closed"
        )
    if spark is None:  # a session already running in this process (a notebook, a test)
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
    own = spark is None
    if own:
        with step("spark", "SparkSession local[2]") as s:
            spark = start_spark()
            s.detail(f"Spark {spark.version}")
    try:
        path = str(log_dir)
        with step("aggregate", 'spark.read.format("kafkalog"): events by type'):
            out.write(
                f'    .option("subscribe", "events").load("{path}")\n'
                "    .groupBy(partition, from_json(value).type).agg(count, sum(amount_cents))\n"
            )
            aggregate(spark, log_dir, res, out)
        lo, hi = RANGE_MINUTES
        with step("range", f"00:{lo:02d} to 00:{hi:02d}: startingTimestamp, endingTimestamp"):
            time_range(spark, log_dir, res, out)
        with step("profiles", "profiles: the latest value per key (what compaction keeps)"):
            latest = profiles(spark, log_dir, res, out)
        with step("compact", "compaction: the Spark job cleans profiles, a task per partition"):
            compact(spark, log_dir, latest, res, out)
        with step("write", 'df.write.format("kafkalog"): the purchases to their own topic'):
            write_purchases(spark, log_dir, res, out)
        with step("stream", 'readStream/writeStream.format("kafkalog"): an enriched copy'):
            stream_enriched(spark, log_dir, res, out)
    finally:
        if own:
            spark.stop()
    res.timings["total"] = time.monotonic() - t0
    t = res.timings
    session = f"session {t['spark']:.1f} s, " if "spark" in t else ""
    out.write(
        f"\nSummary: {res.events + res.profile_updates:,} records produced in "
        f"{t['produce']:.1f} s. Spark: {session}events by type {t['aggregate']:.1f} s\n"
        f"(the first query of a session pays Spark's warm-up), time range {t['range']:.1f} s, "
        f"profiles {t['profiles']:.1f} s,\ncompaction with Spark reads before and after "
        f"{t['compact']:.1f} s, write and read back {t['write']:.1f} s, "
        f"streaming {t['stream']:.1f} s. Total {t['total']:.1f} s.\n"
    )
    return res


class _Step:
    """Prints a numbered step's title, then its timing; records the timing in the result."""

    def __init__(self, res: DemoResult, out: TextIO, name: str, title: str) -> None:
        self.res, self.out, self.name, self.title = res, out, name, title

    def detail(self, text: str) -> None:
        for line in text.splitlines():
            self.out.write(f"    {line}\n")

    def __enter__(self) -> _Step:
        n = len(self.res.timings) + 1
        self.res.steps[self.name] = n
        self.out.write(f"[{n}] {self.title}\n")
        self.out.flush()
        self.began = time.monotonic()
        return self

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        elapsed = time.monotonic() - self.began
        self.res.timings[self.name] = elapsed
        if exc_type is None:
            self.out.write(f"    ({elapsed:.1f} s)\n")
            self.out.flush()


def run(log_dir: Path, out: TextIO, *, events: int = DEFAULT_EVENTS, spark=None) -> int:
    """``kafkalog demo``: exit status 0, or 1 when compaction failed on a partition or
    changed the latest value of a key."""
    res = run_demo(log_dir, out, events=events, spark=spark)
    unchanged = res.latest_missing == res.latest_extra == 0
    return 0 if res.compaction_exit_code == 0 and unchanged else 1
