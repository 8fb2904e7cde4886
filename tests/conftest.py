"""Fixtures every part of the suite may use, and the suite's markers (pyproject.toml), put on
each test at collection from what it uses rather than by hand:

- ``spark``: it uses the ``spark`` fixture (a SparkSession);
- ``peer``: it needs a reference peer of ``KAFKALOG_PEERS`` (Apache Kafka 3.9, Tansu, Spark's
  Kafka connector): one of :data:`PEER_FIXTURES`, a ``read_source`` of Tansu or Kafka, or marked
  by hand where a test starts the peer itself;
- ``serve``: it runs the wire-protocol server (``kafkalog serve`` or a ``BrokerServer``, in
  process or as a child): its module is one of the server's tests or imports the server or one
  of the tests' server helpers (:data:`SERVE_MODULES`), or it reads through ``served_source``;
- ``slow``: long by nature (crash and recovery, disk limits, the soak's Spark child, a log dir
  a Kafka 3.9 of its own wrote): marked by hand, or using one of :data:`SLOW_FIXTURES`; they
  still run in ``bash dev.sh test``.

Under pytest-xdist (``--dist worksteal``) each worker starts on a contiguous half of the tests
and takes over half of the other's remaining ones when it runs out: a module's tests mostly run
on one worker (a module fixture built once, twice where the module is split), so no test may
depend on another having run; the session fixtures (SparkSession, the Kafka 3.9 broker, Tansu)
are one per worker.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks._serve_peers import Server
from tests import jvm_env
from tests.kafka39 import kafka_broker
from tests.seaweedfs import S3Server, s3_server

PEER_FIXTURES = frozenset(
    {"kafka39", "datasource_kafka", "kafka_source", "tansu_source", "kafka_written"}
)
SLOW_FIXTURES = frozenset({"stopped_mid_batch", "kafka_written"})
PEER_SOURCES = frozenset({"tansu", "kafka"})
SERVE_DIRS = ("tests/broker_embedded/server/", "tests/differential/")
SERVE_MODULES = (
    "broker_embedded.server",
    "tests.broker_embedded.server",
    "tests.spark_kafkalog._serve_proc",
    "tests.differential",
    "benchmarks._serve_peers",
)


def pytest_configure(config: pytest.Config) -> None:
    jvm_env.set_up()  # before any JVM or Spark worker starts: tests/jvm_env.py


def pytest_unconfigure(config: pytest.Config) -> None:
    jvm_env.tear_down()


@pytest.fixture(scope="session")
def kafka39(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One Apache Kafka 3.9 broker for the session (skips without ``KAFKALOG_PEERS`` or Java):
    tests share it, each with its own topics and groups."""
    with kafka_broker(tmp_path_factory.mktemp("kafka39")) as server:
        yield server


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """One real S3 server (SeaweedFS, tests/seaweedfs.py) for the session, on loopback; tests
    take a bucket each (``s3.new_bucket``). Skips without the ``weed`` binary."""
    with s3_server(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


def _imports_the_server(module: object) -> bool:
    for value in vars(module).values():
        name = getattr(value, "__module__", None) or getattr(value, "__name__", "")
        if isinstance(name, str) and name.startswith(SERVE_MODULES):
            return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    serving: dict[object, bool] = {}
    for item in items:
        used = set(item.fixturenames)
        params = getattr(getattr(item, "callspec", None), "params", {})
        source = params.get("read_source")
        if "spark" in used:
            item.add_marker(pytest.mark.spark)
        if used & PEER_FIXTURES or source in PEER_SOURCES:
            item.add_marker(pytest.mark.peer)
        if used & SLOW_FIXTURES:
            item.add_marker(pytest.mark.slow)
        module = getattr(item, "module", None)
        if module not in serving:
            path = item.nodeid.split("::", 1)[0]
            serving[module] = path.startswith(SERVE_DIRS) or (
                module is not None and _imports_the_server(module)
            )
        if serving[module] or "served_source" in used or source == "wire":
            item.add_marker(pytest.mark.serve)
