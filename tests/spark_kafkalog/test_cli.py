"""``kafkalog dump`` run as a user runs it: the installed console script (``kafkalog demo``:
test_demo.py)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from tests.fixture_paths import FIXTURES

JAVA_LOG = FIXTURES / "kafka-java-ref" / "filerecords_00000000000000000000.log"
BITNAMI = FIXTURES / "kafka-logdirs" / "kafka-bitnami-rolled"
OFFSETS_6 = FIXTURES / "kafka-logdirs" / "kafka-3.7-ldi-poc" / "__consumer_offsets-6"


def kafkalog(*args: str | Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "kafkalog"
    assert exe.exists(), f"the kafkalog console script is not installed beside {sys.executable}"
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=120)


def peer_records(path: Path) -> list[tuple[int, int, bytes | None, bytes | None]]:
    records = MemoryRecords(path.read_bytes())
    out = []
    while (batch := records.next_batch()) is not None:
        out += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    return out


def test_dump_json_records_equal_kafka_python(tmp_path: Path) -> None:
    seg = tmp_path / JAVA_LOG.name
    shutil.copy(JAVA_LOG, seg)
    result = kafkalog("dump", "--json", "--records", "--verify", seg)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]

    def b64(v: str | None) -> bytes | None:
        return None if v is None else base64.b64decode(v)

    records = [
        (r["offset"], r["CreateTime"], b64(r["key"]), b64(r["value"]))
        for r in lines
        if "offset" in r
    ]
    assert records == peer_records(seg)
    batches = [line for line in lines if "baseOffset" in line]
    assert len(batches) == 3 and all(b["isvalid"] for b in batches)
    assert lines[-1]["summary"] == str(seg) and lines[-1]["bytes"] == seg.stat().st_size


def test_dump_log_dir_summarises_every_segment(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    shutil.copytree(BITNAMI, logs)
    result = kafkalog("dump", "--summary", "--verify", logs)
    assert result.returncode == 0, result.stderr
    summaries = result.stdout.splitlines()
    segments = sorted(logs.glob("*/*.log"))
    assert [s.split(":")[0] for s in summaries] == [f"Summary {p}" for p in segments]
    assert all("invalid CRCs 0" in s for s in summaries)


def test_verify_names_the_first_bad_crc(tmp_path: Path) -> None:
    seg = tmp_path / JAVA_LOG.name
    data = bytearray(JAVA_LOG.read_bytes())
    data[-1] ^= 0xFF  # a record byte of the last batch: its CRC no longer matches
    seg.write_bytes(bytes(data))
    plain = kafkalog("dump", seg)
    assert plain.returncode == 0 and "isvalid: false" in plain.stdout
    result = kafkalog("dump", "--verify", seg)
    assert result.returncode == 1
    assert str(seg) in result.stderr and "CRC mismatch" in result.stderr
    assert "batch base offset" in result.stderr


def test_torn_tail_and_bad_path_are_errors(tmp_path: Path) -> None:
    seg = tmp_path / JAVA_LOG.name
    seg.write_bytes(JAVA_LOG.read_bytes()[:-10])
    result = kafkalog("dump", seg)
    assert result.returncode == 1 and "torn tail" in result.stderr and str(seg) in result.stderr
    missing = kafkalog("dump", tmp_path / "nope")
    assert missing.returncode == 1 and "no such file or directory" in missing.stderr


@pytest.mark.parametrize("index", ["00000000000000000000.index", "00000000000000000000.timeindex"])
def test_verify_checks_index_entries(tmp_path: Path, index: str) -> None:
    part = tmp_path / OFFSETS_6.name
    shutil.copytree(OFFSETS_6, part)
    data = bytearray((part / index).read_bytes())
    assert len(data) >= 12
    data[-1] ^= 0x01  # last entry's position / relative offset now points at no batch start
    (part / index).write_bytes(bytes(data))
    result = kafkalog("dump", "--summary", "--verify", part)
    assert result.returncode == 1, result.stdout
    assert index in result.stderr
