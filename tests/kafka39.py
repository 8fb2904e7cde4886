"""Apache Kafka 3.9 as the reference for the tests: one broker per test session, its tools.

The peer is found only through ``KAFKALOG_PEERS`` (a folder holding ``kafka-3.9/``, see
benchmarks/_serve_peers.py); without it, or without Java, the tests that need it skip and say
why. :func:`kafka_broker` starts a broker (tests/conftest.py's ``kafka39`` fixture: one for the
session, shared by the tests, each with its own topics and groups). :func:`kafka_tool` runs one
of Kafka's ``bin/kafka-*.sh`` tools, bounded. The same folder holds Spark's own Kafka connector
(:func:`spark_connector_jars`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from benchmarks._serve_peers import Server, kafka_home, kafka_server

TOOL_TIMEOUT_S = 180.0
CONNECTOR_JARS = (
    "spark-kafka/spark-sql-kafka-0-10_2.13-4.0.0.jar",
    "spark-kafka/spark-token-provider-kafka-0-10_2.13-4.0.0.jar",
    "spark-kafka/commons-pool2-2.12.0.jar",
    "kafka-3.9/libs/kafka-clients-3.9.1.jar",
)


def spark_connector_jars() -> list[str]:
    """The jars of Spark's own Kafka connector (``format("kafka")``) under ``KAFKALOG_PEERS``,
    for a SparkSession's ``spark.jars``; empty when any is missing."""
    peers = os.environ.get("KAFKALOG_PEERS")
    jars = [Path(peers) / jar for jar in CONNECTOR_JARS] if peers else []
    return [str(j) for j in jars] if jars and all(j.is_file() for j in jars) else []


def kafka39_home() -> Path:
    """Kafka 3.9's folder, or a skip naming what is missing."""
    home = kafka_home()
    if isinstance(home, str):
        pytest.skip(f"needs Apache Kafka 3.9: {home}")
    return home


@contextmanager
def kafka_broker(run_dir: Path) -> Iterator[Server]:
    """A running Kafka 3.9 whose data and logs are in ``run_dir`` (skips without the peer)."""
    with kafka_server(kafka39_home(), run_dir) as server:
        yield server


def kafka_tool(
    tool: str,
    *args: str | Path,
    work: Path,
    timeout: float = TOOL_TIMEOUT_S,
    check: bool = True,
    stdin: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """``bin/<tool>.sh ARGS`` of Kafka 3.9 (256 MB heap, its log4j output in ``work``), its
    output captured as text; ``check``: a non-zero exit raises with the tool's output."""
    home = kafka39_home()
    env = dict(os.environ, KAFKA_HEAP_OPTS="-Xmx256m", LOG_DIR=str(work))
    done = subprocess.run(
        [str(home / "bin" / f"{tool}.sh"), *map(str, args)], env=env, input=stdin,
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    if check and done.returncode != 0:
        raise AssertionError(
            f"{tool} {' '.join(map(str, args))} exited {done.returncode}:\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return done
