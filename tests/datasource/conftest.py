"""Shared fixtures of the data source tests: one SparkSession for the whole test session, and
log dirs built once; the source log dir also served over the Kafka protocol (``read_source``,
parametrised over the transport: the same options and expected rows for both). A representative
subset of the tests (marked :data:`ALSO_ON_TANSU`) runs against Tansu too, loaded with the same
records of the topics :data:`TANSU_TOPICS` (tests/datasource/_tansu.py), and against Apache Kafka
3.9, loaded with :data:`KAFKA_TOPICS`.

``spark``: ``local[2]``, few shuffle partitions, no UI, UTC session time zone, the driver's JIT at
its first tier (:data:`JIT_FIRST_TIER`), the Python workers running this interpreter (the venv's,
where the packages are installed). It is never told about the ``kafkalog`` source: Spark finds
it through ``pyspark_kafkalog``, as after ``pip install``.
Tests that change a SQL setting use :func:`sql_conf`, which restores it.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.datasource._logdirs import EVENTS_PARTITIONS, TRIMMED_LOG_START, build_source_log_dir
from tests.fixture_paths import FIXTURES
from tests.jvm_env import JIT_FIRST_TIER


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from tests.kafka39 import spark_connector_jars

    builder = SparkSession.builder
    jars = spark_connector_jars()
    if jars:  # Spark's own Kafka connector, the reference of test_spark_connector_parity.py
        builder = builder.config("spark.jars", ",".join(jars))
    session = (
        builder.master("local[2]")
        .appName("kafkalog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        # the JIT's first tier only: the tests' queries are small and many, and C2 compiled the
        # same code paths again at a cost of a core for much of the suite (a Spark-heavy module:
        # 49 s of the JVM's CPU with both tiers, 25 s with the first)
        .config("spark.driver.extraJavaOptions", JIT_FIRST_TIER)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    # Spark looks the Python sources up once per session, at the first name it resolves, and
    # keeps an empty list when that lookup fails: look now, before any test changes a setting
    manager = session._jsparkSession.sessionState().dataSourceManager()
    assert manager.dataSourceExists("kafkalog"), "Spark's lookup did not find pyspark_kafkalog"
    yield session
    session.stop()


def await_available_now(query, stall_s: float = 120.0, cap_s: float = 900.0) -> bool:
    """Wait for an ``availableNow`` query to stop: True once it has. Waits as long as it makes
    progress (a new micro-batch within ``stall_s``), up to ``cap_s`` in all, so that a loaded
    machine makes the test slower, not red; a query that stalls still fails it."""
    start = last_change = time.monotonic()
    seen = None
    while not query.awaitTermination(2):
        progress = query.lastProgress
        batch = None if progress is None else progress["batchId"]
        now = time.monotonic()
        if batch != seen:
            seen, last_change = batch, now
        if now - last_change > stall_s or now - start > cap_s:
            return False
    return True


@contextmanager
def sql_conf(spark, key: str, value: str) -> Iterator[None]:
    """Set a SQL setting of ``spark`` for the duration of the block."""
    old = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if old is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, old)


@pytest.fixture(scope="session")
def source_log_dir(tmp_path_factory) -> Path:
    """The log dir of tests/datasource/_logdirs.py (read-only: copy it before changing it)."""
    return build_source_log_dir(tmp_path_factory.mktemp("source") / "logdir")


@pytest.fixture(scope="session")
def kafka_log_dirs(tmp_path_factory) -> dict[str, Path]:
    """Copies of the real Kafka log dirs of tests/fixtures/kafka-logdirs, by name."""
    base = tmp_path_factory.mktemp("kafka-logdirs")
    out = {}
    for src in sorted((FIXTURES / "kafka-logdirs").iterdir()):
        if src.is_dir():
            out[src.name] = Path(shutil.copytree(src, base / src.name))
    return out


@dataclass(frozen=True)
class ReadSource:
    """Where a test reads from: ``log_dir`` in place, ``bootstrap`` (a server over a copy of
    it), or ``store`` (the options of a copy uploaded to an S3 server: its ``path`` and the
    ``fs.s3a.*`` settings). ``log_dir`` is what the expected rows are worked out from, for
    every transport."""

    transport: str
    log_dir: Path
    bootstrap: str | None = None
    store: tuple[tuple[str, str], ...] = ()

    def options(self, **options: str) -> dict[str, str]:
        if self.store:
            return {**dict(self.store), **options}
        if self.bootstrap is None:
            return {"path": str(self.log_dir), **options}
        return {"kafka.bootstrap.servers": self.bootstrap, **options}

    def load(self, spark, **options: str):
        return spark.read.format("kafkalog").options(**self.options(**options)).load()

    def read_stream(self, spark, **options: str):
        return spark.readStream.format("kafkalog").options(**self.options(**options)).load()


@pytest.fixture(scope="session")
def served_source(source_log_dir: Path, tmp_path_factory) -> Iterator[ReadSource]:
    """A copy of the source log dir behind an in-process server on 127.0.0.1 (port 0). Served
    once and stopped first: opening the log dir aborts the transaction the build left open
    (the broker's recovery), so that the files tell what the server then serves."""
    from tests.broker_embedded.server._serve import served

    copy = Path(shutil.copytree(source_log_dir, tmp_path_factory.mktemp("served") / "logdir"))
    with served(copy):
        pass
    with served(copy) as running:
        yield ReadSource("wire", copy, running.bootstrap)


@pytest.fixture(scope="session")
def s3_source(source_log_dir: Path, s3) -> ReadSource:
    """The source log dir uploaded (``kafkalog upload``'s code) to a bucket of the session's S3
    server and read from there with ``load("s3://...")``: the log-dir suites on object storage."""
    from broker_embedded.storage.log_dir_upload import upload_log_dir
    from broker_embedded.storage.object_store import StoreLocation

    location = StoreLocation(f"s3://{s3.new_bucket('source')}/logdir", s3.settings)
    upload_log_dir(source_log_dir, location.open())
    return ReadSource("s3", source_log_dir, store=(("path", location.uri), *s3.options().items()))


TANSU_TOPICS = {"events": EVENTS_PARTITIONS, "empty": 1}
KAFKA_TOPICS = {**TANSU_TOPICS, "trimmed": 1}
# the tests of the peer subset take their ``read_source`` from every transport
ALSO_ON_TANSU = pytest.mark.parametrize(
    "read_source", ["logdir", "wire", "s3", "tansu", "kafka"], indirect=True
)


@pytest.fixture(scope="session")
def tansu_source(source_log_dir: Path, tmp_path_factory) -> Iterator[ReadSource]:
    """One Tansu for the session (127.0.0.1, memory storage) holding :data:`TANSU_TOPICS` of
    the source log dir, record for record at the same offsets (tests/datasource/_tansu.py);
    skipped when its binary cannot be had."""
    from benchmarks._serve_peers import tansu_server
    from broker_embedded.client.kafka_client import KafkaClient
    from tests.datasource._tansu import load_log_dir_topics, tansu_binary_or_skip

    binary = tansu_binary_or_skip()
    with tansu_server(binary, tmp_path_factory.mktemp("tansu")) as server:
        with KafkaClient(server.bootstrap) as client:
            load_log_dir_topics(client, source_log_dir, TANSU_TOPICS)
        yield ReadSource("tansu", source_log_dir, server.bootstrap)


@pytest.fixture(scope="session")
def datasource_kafka(kafka39) -> str:
    """The bootstrap of the session's Apache Kafka 3.9 (tests/conftest.py ``kafka39``; skipped
    without it): :func:`kafka_source`'s topics, and the topics and groups each Kafka test of the
    data source creates under its own names, beside the other tests' (one broker per worker,
    not two: a Kafka start is 10-60 s of a core and 0.5 GB)."""
    return kafka39.bootstrap


@pytest.fixture(scope="session")
def kafka_source(source_log_dir: Path, datasource_kafka: str) -> ReadSource:
    """:func:`datasource_kafka` holding :data:`KAFKA_TOPICS` of the source log dir, record for
    record at the same offsets, and ``trimmed``'s log start moved to :data:`TRIMMED_LOG_START`
    by DeleteRecords."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    from broker_embedded.client.kafka_client import KafkaClient
    from tests.datasource._tansu import load_log_dir_topics

    with KafkaClient(datasource_kafka) as client:
        load_log_dir_topics(client, source_log_dir, KAFKA_TOPICS, split_last=False)
    admin = AdminClient({"bootstrap.servers": datasource_kafka})
    (done,) = admin.delete_records([TopicPartition("trimmed", 0, TRIMMED_LOG_START)]).values()
    assert done.result(60).low_watermark == TRIMMED_LOG_START
    return ReadSource("kafka", source_log_dir, datasource_kafka)


@pytest.fixture(params=["logdir", "wire", "s3"])
def read_source(request, source_log_dir: Path) -> ReadSource:
    """The source log dir read in place, over the Kafka protocol (``kafkalog serve``; and
    Tansu and Kafka 3.9 for the tests marked :data:`ALSO_ON_TANSU`), and from an S3 server."""
    if request.param == "wire":
        return request.getfixturevalue("served_source")
    if request.param in ("s3", "tansu", "kafka"):
        return request.getfixturevalue(f"{request.param}_source")
    return ReadSource("logdir", source_log_dir)


def skip_on_tansu(source: ReadSource, gap: str) -> None:
    """Skip this case on Tansu, naming the gap (where Tansu answers otherwise than Kafka)."""
    if source.transport == "tansu":
        pytest.skip(f"Tansu gap: {gap}")
