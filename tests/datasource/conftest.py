"""Shared fixtures of the data source tests: one SparkSession for the whole test session, and
log dirs built once.

``spark``: ``local[2]``, few shuffle partitions, no UI, UTC session time zone, the Python workers
running this interpreter (the venv's, where the packages are installed). It is never told about
the ``kafkalog`` source: Spark finds it through ``pyspark_kafkalog``, as after ``pip install``.
Tests that change a SQL setting use :func:`sql_conf`, which restores it.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.datasource._logdirs import build_source_log_dir
from tests.fixture_paths import FIXTURES


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("kafkalog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


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
    """Copies of the real Kafka log dirs of ../shared/fixtures/kafka-logdirs, by name."""
    base = tmp_path_factory.mktemp("kafka-logdirs")
    out = {}
    for src in sorted((FIXTURES / "kafka-logdirs").iterdir()):
        if src.is_dir():
            out[src.name] = Path(shutil.copytree(src, base / src.name))
    return out
