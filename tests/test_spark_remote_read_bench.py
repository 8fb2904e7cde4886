"""benchmarks/spark_remote_read.py end to end on tiny workloads: ``kafkalog serve`` as a child
process, the protocol read and the log-dir read checked to give the same rows, the confluent-kafka
consumer every record, and the table has its rows and ratios; beside Apache Kafka 3.9 where
``KAFKALOG_PEERS`` has it, kafkalog and Spark's own connector read the same rows from it, and
the bound (the read loop alone, the ceiling source) is measured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import spark_remote_read
from benchmarks._serve_peers import kafka_home, spark_connector_jars

ROOT = Path(__file__).resolve().parents[1]
RUN_TIMEOUT_S = 300.0


def _reads(out: str) -> list[str]:
    rows = [line for line in out.splitlines() if line.startswith("| ") and " M |" in line]
    return [r.split(" | ")[2] for r in rows]


def _run(argv: list[str]) -> str:
    """The benchmark as a script, in a process of its own: it stops the SparkSession it gets,
    which in this process could be the one the other tests share."""
    cmd = [sys.executable, spark_remote_read.__file__, *argv]
    done = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_tiny_run_reads_every_record_three_ways():
    """Two record counts, as the 2 M and 10 M data sets: each its own log dir, rows, ratios."""
    out = _run(["--records", "4000,6000", "--codecs", "none", "--repeat", "1", "--no-kafka"])
    for n in ("4,000", "6,000"):
        assert (
            "checked: kafkalog from serve, kafkalog from the log dir give the same rows "
            f"(count {n} and hash)" in out
        )
        assert f"{n} records, none: kafkalog from serve / kafkalog from the log dir = " in out
    assert _reads(out) == ["kafkalog from serve", "kafkalog from the log dir", "confluent"] * 2
    assert "kafkalog from serve / kafkalog from the log dir = " in out
    assert "kafkalog from serve / confluent = " in out
    assert "Kafka 3.9 not read: --no-kafka" in out


@pytest.mark.peer  # starts the peer itself
def test_beside_kafka39_both_connectors_read_the_same_rows():
    """In a process of its own: the connector's jars load only in a fresh JVM (a SparkSession
    this process made before keeps its JVM and its class path)."""
    home = kafka_home()
    if isinstance(home, str) or not spark_connector_jars():
        pytest.skip(f"needs Apache Kafka 3.9 and Spark's Kafka connector: {home}")
    out = _run(["--records", "4000", "--codecs", "lz4", "--repeat", "1"])
    assert (
        "checked: kafkalog from serve, kafkalog from the log dir, kafkalog from Kafka 3.9, "
        "Spark's kafka from Kafka 3.9 give the same rows (count 4,000 and hash)" in out
    )
    assert _reads(out) == [
        "kafkalog from serve",
        "kafkalog from the log dir",
        "kafkalog from Kafka 3.9",
        "Spark's kafka from Kafka 3.9",
        "read loop from Kafka 3.9, no Spark",
        "ceiling (prebuilt Arrow)",
        "confluent",
    ]
    assert "kafkalog from Kafka 3.9 / Spark's kafka from Kafka 3.9 = " in out
    assert (
        "4,000 records, lz4: bound: Spark's kafka from Kafka 3.9 / ceiling (prebuilt Arrow) = "
        in out
    )
