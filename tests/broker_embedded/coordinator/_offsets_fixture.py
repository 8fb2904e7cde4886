"""The Kafka 3.7 ``__consumer_offsets-6`` fixture (written by Kafka 3.7.0, LDI-POC) and the Java
decoder run over it (java/ConsumerOffsetsDump.java: Kafka's FileRecords and ConsumerProtocol from
kafka-clients 4.3)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from broker_embedded.record.record_batch import Record
from broker_embedded.record.records import iter_batches
from tests.fixture_paths import FIXTURES

KAFKA_37 = FIXTURES / "kafka-logdirs" / "kafka-3.7-ldi-poc"
SEGMENT = KAFKA_37 / "__consumer_offsets-6" / "00000000000000000000.log"
JAVA_DUMP = Path(__file__).parent / "java" / "ConsumerOffsetsDump.java"
GROUP = "DEVSmileCDR"


def fixture_records() -> list[Record]:
    """Every record of the fixture segment (no control batches in it)."""
    return [r for b in iter_batches(SEGMENT.read_bytes(), str(SEGMENT)) for r in b.records()]


def copy_log_dir(tmp_path: Path) -> Path:
    """A writable copy of the Kafka 3.7 log dir (fixtures are never opened in place)."""
    target = tmp_path / "kafka-3.7"
    shutil.copytree(KAFKA_37, target)
    for p in [target, *target.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return target


def java_dump(segment: Path, *hash_strings: str) -> list[str]:
    """The Java decoder's lines for ``segment``, then one ``hash`` line per string; skips
    without Java or the kafka-clients jars."""
    try:  # the jar cache of the Java client test (its module needs kio: Python 3.11+)
        from tests.broker_embedded.server.test_java_client import java_jars
    except ImportError as e:
        pytest.skip(f"the kafka-clients jar cache is unavailable here ({e})")
    jars = java_jars()  # skips without Java or the jars
    classpath = ":".join(str(j) for j in jars)
    proc = subprocess.run(
        ["java", "-cp", classpath, str(JAVA_DUMP), str(segment), *hash_strings],
        capture_output=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return proc.stdout.decode("utf-8").splitlines()
