"""The latest view (``view=latest``, datasource/latest_view.py) equals the groupBy formulation
``groupBy(partition, key).agg(max(offset), max_by(row, offset))`` without tombstones, on real
Spark reads of real log dirs, over both transports (``read_source``: a log dir, and the same log
dir served over the Kafka protocol).

Log dirs: the demo's ``profiles`` topic (built by the demo's own ``produce``), ``updates`` (3
partitions, 400 keys updated 10 times, tombstones), ``spread`` (the same keys produced into
every partition, ignoring the default partitioner) and ``partly`` (a compacted topic that the
cleaner cleaned one round of, with a map too small for its dirty section).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.cleaner.cleaner import Cleaner
from broker_embedded.cleaner.skimpy_offset_map import SkimpyOffsetMap
from broker_embedded.client.default_partitioner import partitions_for_keys
from broker_embedded.record.columnar_encoder import encode_batches
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import UnifiedLog
from datasource.errors import InvalidOptionError
from datasource.kafka_batch_reader import KafkaBatchReader
from datasource.kafka_input_partition import ranges_of
from datasource.kafka_source_options import KafkaSourceOptions
from spark_kafkalog import demo

T0 = 1_700_000_000_000
PARTITIONS = 3
KEYS, UPDATES = 400, 10
PARTLY_KEYS = 300


def groupby_latest(df, keep_tombstones: bool = False):
    """The groupBy formulation: every keyed record's partition and key, the row of its largest
    offset."""
    latest = (
        df.where(F.col("key").isNotNull())
        .groupBy("partition", "key")
        .agg(F.max("offset").alias("latest"), F.max_by(F.struct(*df.columns), "offset").alias("r"))
        .select("r.*")
    )
    return latest if keep_tombstones else latest.where(F.col("value").isNotNull())


def assert_latest(spark, load, keep_tombstones: bool = False, **options: str) -> int:
    """``load(**options)`` with ``view=latest`` equals the groupBy formulation of the plain
    read; the number of rows."""
    view_options = {"view": "latest", **options}
    if keep_tombstones:
        view_options["view.keepTombstones"] = "true"
    view = load(**view_options)
    expected = groupby_latest(load(**options), keep_tombstones)
    assert_df_equality(view, expected, ignore_row_order=True, ignore_nullable=True)
    return view.count()


def _updates(keys: np.ndarray, rng: np.random.Generator) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """Every key of ``keys`` updated ``UPDATES`` times in random order; 10% tombstones."""
    order = np.repeat(keys, UPDATES)
    rng.shuffle(order)
    n = len(order)
    key_col = pa.array([b"key-%05d" % k for k in order.tolist()], pa.binary())
    dead = (rng.random(n) < 0.1).tolist()
    values = [
        None if t else b"v%d-%d" % (k, i)
        for i, (k, t) in enumerate(zip(order.tolist(), dead, strict=True))
    ]
    return key_col, pa.array(values, pa.binary()), T0 + np.arange(n, dtype=np.int64) * 10


def _produce(broker: Broker, topic: str, part: np.ndarray, keys, values, ts, **kw) -> None:
    for p in range(PARTITIONS):
        rows = pa.array(np.flatnonzero(part == p))
        for batch in encode_batches(
            keys.take(rows), values.take(rows), ts[rows.to_numpy()], max_batch_records=37, **kw
        ):
            broker.produce(topic, p, batch, acks="all")


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> Path:
    """The log dir of ``updates``, ``spread`` and ``partly`` (module docstring)."""
    log_dir = tmp_path_factory.mktemp("latest") / "logdir"
    rng = np.random.default_rng(7)
    with Broker(log_dir, config=BrokerConfig(log_cleaner_threads=0), create=True) as broker:
        for topic in ("updates", "spread"):
            broker.create_topic(topic, PARTITIONS, config={"retention.ms": -1})
        broker.create_topic(
            "partly", 1, config={"cleanup.policy": "compact", "segment.bytes": 8000}
        )
        keys, values, ts = _updates(np.arange(KEYS), rng)
        _produce(
            broker,
            "updates",
            partitions_for_keys(keys, PARTITIONS),
            keys,
            values,
            ts,
            compression="lz4",
        )
        _produce(broker, "spread", np.arange(len(keys)) % PARTITIONS, keys, values, ts)
        keys, values, ts = _updates(np.arange(PARTLY_KEYS), rng)
        _produce(broker, "partly", np.zeros(len(keys), np.int64), keys, values, ts)
    _clean_one_round(log_dir, TopicPartition("partly", 0))
    return log_dir


def _clean_one_round(log_dir: Path, tp: TopicPartition) -> None:
    """One cleaner round with a map of 100 keys: the log is cleaned up to where the map filled,
    the rest stays dirty."""
    config = LogConfig(cleanup_policy="compact", segment_bytes=8000)
    lg = UnifiedLog(log_dir, tp, config, high_watermark=1 << 62)
    try:
        lg.roll()
        lg.update_high_watermark(lg.log_end_offset)
        result = Cleaner(SkimpyOffsetMap(24 * 111)).clean(lg, None, now_ms=T0)
        assert result.cleaned and result.end_offset < result.first_uncleanable_offset
    finally:
        lg.close()


def _loader(spark, log_dir: Path, topic: str):
    def load(**options: str):
        opts = {"path": str(log_dir), "subscribe": topic, **options}
        return spark.read.format("kafkalog").options(**opts).load()

    return load


# -- both transports --------------------------------------------------------------------------


@pytest.mark.parametrize("keep_tombstones", [False, True])
def test_events_with_headers_tombstones_and_keyless_records(spark, read_source, keep_tombstones):
    """``events``: null keys (left out), tombstones (dropped, or kept as null-value rows),
    headers and timestamps of the latest record, every codec."""
    load = read_source.load
    n = assert_latest(
        spark,
        lambda **o: load(spark, subscribe="events", includeHeaders="true", **o),
        keep_tombstones,
    )
    assert n > 0


def test_transactions_read_committed(spark, read_source):
    """``txn`` under read_committed: aborted records never count (and under read_uncommitted
    they do, as the plain read shows them)."""
    load = read_source.load
    for level in ("read_committed", "read_uncommitted"):
        assert_latest(
            spark,
            lambda level=level, **o: load(
                spark, subscribe="txn", **{"kafka.isolation.level": level}, **o
            ),
        )


def test_rounds_with_a_tiny_map(spark, read_source):
    """``view.mapSize`` of 1 KiB (32 slots) over ``events``: the keys do not fit, the rounds
    split by hash and the result is still exact."""
    load = read_source.load
    assert_latest(spark, lambda **o: load(spark, subscribe="events", **o), **{"view.mapSize": "1k"})
    keys = (
        load(spark, subscribe="events")
        .where("key IS NOT NULL")
        .groupBy("partition")
        .agg(F.count_distinct("key").alias("n"))
    )
    assert min(r.n for r in keys.collect()) > int(32 * 0.9)  # more keys than one round holds


@pytest.mark.parametrize("mask", [(0, 0), (3, 0), (0x30, 1 << 40)])
def test_forced_hash_collisions_are_resolved(spark, read_source, mask):
    """Digests narrowed to 1, 4 and 4 values: almost every key shares its slot with others; the
    fingerprints flag the slots and the third pass recovers each key's latest record."""
    from datasource.latest_view import read_latest

    options = read_source.options(subscribe="events", view="latest")
    reader = KafkaBatchReader(KafkaSourceOptions.parse(options))
    got = [
        row
        for t in reader.partitions()
        for p in ranges_of(t)
        for b in read_latest(p, mask)
        for row in zip(
            *(b.column(c).to_pylist() for c in ("partition", "key", "offset")), strict=True
        )
    ]
    expected = groupby_latest(read_source.load(spark, subscribe="events"))
    want = [(r.partition, r.key, r.offset) for r in expected.collect()]
    assert sorted(got) == sorted(want)
    assert len(got) == len(set(got))


def test_keyless_records_are_counted_in_one_warning(read_source, caplog):
    from datasource.latest_view import read_latest

    options = read_source.options(subscribe="events", view="latest")
    reader = KafkaBatchReader(KafkaSourceOptions.parse(options))
    with caplog.at_level(logging.WARNING, logger="datasource.latest_view"):
        for p in (p for t in reader.partitions() for p in ranges_of(t)):
            for _ in read_latest(p):
                pass
    warned = [r.getMessage() for r in caplog.records if "without a key" in r.getMessage()]
    assert len(warned) == PARTITIONS
    assert all("left out of the latest view" in w for w in warned)


# -- the demo's profiles and the tables log dir -------------------------------------------------


def test_demo_profiles(spark, tmp_path):
    log_dir = tmp_path / "demo"
    demo.produce(log_dir, demo.generate_events(30_000), demo.generate_profiles(500))
    n = assert_latest(spark, _loader(spark, log_dir, "profiles"))
    live = {k for k, v in demo.latest_profiles(demo.generate_profiles(500)).items() if v}
    assert n == len(live)


def test_ten_updates_per_key(spark, tables):
    load = _loader(spark, tables, "updates")
    n = assert_latest(spark, load)
    assert 0.8 * KEYS < n < KEYS
    assert assert_latest(spark, load, keep_tombstones=True) == KEYS


def test_keys_spread_over_partitions_give_the_latest_of_each(spark, tables):
    """Each key's 10 updates went round-robin over the 3 partitions: a row per partition that
    got the key (its latest there), most keys in all 3."""
    load = _loader(spark, tables, "spread")
    n = assert_latest(spark, load, keep_tombstones=True)
    assert 2 * KEYS < n <= PARTITIONS * KEYS
    assert (
        load(view="latest", **{"view.keepTombstones": "true"}).select("key").distinct().count()
        == KEYS
    )


def test_compacted_and_partly_cleaned(spark, tables):
    assert_latest(spark, _loader(spark, tables, "partly"))
    assert_latest(spark, _loader(spark, tables, "partly"), keep_tombstones=True)


def test_time_travel(spark, tables):
    """``endingOffsets`` and ``endingTimestamp``: the table as of a point."""
    load = _loader(spark, tables, "updates")
    ends = '{"updates": {"0": 500, "1": 700, "2": 1}}'
    assert_latest(spark, load, endingOffsets=ends)
    assert_latest(spark, load, endingTimestamp=str(T0 + 10 * KEYS * UPDATES // 3))
    assert_latest(spark, load, startingOffsets='{"updates": {"0": 100, "1": 0, "2": 50}}')


def test_partitions_are_never_cut(spark, tables):
    """The splitting options are ignored; whole partitions may share a task (packed)."""
    options = {
        "path": str(tables),
        "subscribe": "updates",
        "view": "latest",
        "minPartitions": "12",
        "maxRecordsPerPartition": "50",
    }
    reader = KafkaBatchReader(KafkaSourceOptions.parse(options))
    ranges = [p for t in reader.partitions() for p in ranges_of(t)]
    assert sorted((p.partition, p.start) for p in ranges) == [(0, 0), (1, 0), (2, 0)]
    assert_latest(spark, _loader(spark, tables, "updates"), minPartitions="12")


def test_after_the_broker_cleans(spark, tables, tmp_path):
    """A copy of ``partly`` cleaned to the end: the view is unchanged."""
    copy = Path(shutil.copytree(tables, tmp_path / "logdir"))
    before = _loader(spark, tables, "partly")(view="latest")
    config = LogConfig(cleanup_policy="compact", segment_bytes=8000)
    lg = UnifiedLog(copy, TopicPartition("partly", 0), config, high_watermark=1 << 62)
    try:
        Cleaner(SkimpyOffsetMap(1 << 20)).clean(lg, None, now_ms=T0)
    finally:
        lg.close()
    after = _loader(spark, copy, "partly")(view="latest")
    assert_df_equality(after, before, ignore_row_order=True, ignore_nullable=True)


# -- options ---------------------------------------------------------------------------------


def test_streaming_is_refused_naming_the_option():
    with pytest.raises(InvalidOptionError, match=r"option view='latest' applies to batch"):
        KafkaSourceOptions.parse({"path": "/x", "subscribe": "t", "view": "latest"}, streaming=True)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("view", "newest", r"option view='newest' is invalid: expected one of records, latest"),
        ("view.mapSize", "100", r"option view.mapSize=100 is invalid: the offset map needs"),
        ("view.keepTombstones", "yes", r"option view.keepTombstones='yes' is invalid"),
    ],
)
def test_bad_view_options(option, value, message):
    with pytest.raises(InvalidOptionError, match=message):
        KafkaSourceOptions.parse({"path": "/x", "subscribe": "t", option: value})
