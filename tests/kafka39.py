"""Apache Kafka 3.9 as the reference for the tests: one broker per test session, its tools.

The peer is found only through ``KAFKALOG_PEERS`` (a folder holding ``kafka-3.9/``, see
benchmarks/_serve_peers.py); without it, or without Java, the tests that need it skip and say
why. :func:`kafka_broker` starts a broker (tests/conftest.py's ``kafka39`` fixture: one for the
session, shared by the tests, each with its own topics and groups). :func:`kafka_tool` runs one
of Kafka's ``bin/kafka-*.sh`` tools, bounded. The same folder holds Spark's own Kafka connector
(:func:`spark_connector_jars`, from benchmarks/_serve_peers.py, which the benchmarks share).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from benchmarks._serve_peers import Server, kafka_home, kafka_server, spark_connector_jars

TOOL_TIMEOUT_S = 180.0
__all__ = ["kafka_broker", "kafka_tool", "kafka39_home", "spark_connector_jars"]


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
