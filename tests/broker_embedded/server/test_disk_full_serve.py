"""Issue 27 part 1, end to end: ``kafkalog serve`` (a real child process) on a log dir that is a
real 20 MB tmpfs, a confluent-kafka producer (acks=all, idempotent) filling it with 4 KB
values, the space freed, more produced, SIGTERM. Then the server starts again, every
acknowledged record reads back exactly once in produce order, ``kafkalog dump --verify`` is
clean, and the server logged no traceback but one line per full-disk episode."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.spark_kafkalog._serve_proc import ServeProcess
from tests.spark_kafkalog.test_serve import Acks, run_kafkalog
from tests.tmpfs_mount import tmpfs

pytest.importorskip("kio", reason="kafkalog serve needs kio (Python 3.11+)")
confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "df"
PARTITIONS = 2
SEGMENT_BYTES = 4 << 20
VALUE_BYTES = 4096
FIRST, SECOND = 5_000, 300
STOP_BOUND_S = 15.0


def _producer(bootstrap: str) -> confluent_kafka.Producer:
    return confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 6_000,
            "socket.timeout.ms": 5_000,
            "reconnect.backoff.max.ms": 200,
            "retry.backoff.ms": 100,
        }
    )


def _value(i: int) -> bytes:
    return f"{i:08d}".encode() * (VALUE_BYTES // 8)


def _produce(p: confluent_kafka.Producer, acks: Acks, first: int, count: int) -> None:
    for i in range(first, first + count):
        while True:  # bounded by the producer's queue and message.timeout.ms
            try:
                p.produce(TOPIC, key=f"k{i}".encode(), value=_value(i), on_delivery=acks)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    p.flush(30)


def _stop(server: ServeProcess) -> str:
    assert server.terminate(STOP_BOUND_S) == 0, server.stderr_text()[-3000:]
    return server.stderr_text()


def _create_topic(log_dir: Path) -> None:
    done = run_kafkalog(
        "topics",
        "create",
        "--log-dir",
        log_dir,
        TOPIC,
        "--partitions",
        str(PARTITIONS),
        "--config",
        f"segment.bytes={SEGMENT_BYTES}",
    )
    assert done.returncode == 0, done.stderr


def _read_back_and_verify(log_dir: Path, acks: Acks) -> None:
    """``kafkalog dump --verify`` is clean and ``kafkalog consume`` reads every acknowledged
    record exactly once, at its offset, in produce order per partition."""
    verify = run_kafkalog(
        "dump", "--verify", "--summary", log_dir / f"{TOPIC}-0", log_dir / f"{TOPIC}-1", timeout=120
    )
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]
    read = run_kafkalog(
        "consume", "--log-dir", log_dir, "--topic", TOPIC, "--format", "json", timeout=120
    )
    assert read.returncode == 0, read.stderr[-2000:]
    on_disk: dict[bytes, list[tuple[int, int]]] = {}
    for line in read.stdout.splitlines():
        r = json.loads(line)
        on_disk.setdefault(r["key"].encode(), []).append((r["partition"], r["offset"]))
        assert r["value"].encode() == _value(int(r["key"][1:])), r["key"]
    for (partition, offset), (key, _) in acks.records.items():
        assert on_disk.get(key) == [(partition, offset)], f"acknowledged {key!r} read back wrong"
    for partition in range(PARTITIONS):  # produce order per partition (idempotence)
        keys = [int(k[1:]) for (p, _), (k, _) in sorted(acks.records.items()) if p == partition]
        assert keys == sorted(keys)


def _acked_after(acks: Acks, first: int) -> int:
    return sum(1 for key, _ in acks.records.values() if int(key[1:]) >= first)


def test_a_full_disk_loses_no_acknowledged_record_and_the_server_starts_again(
    tmp_path: Path,
) -> None:
    with tmpfs(20 << 20) as mount:
        log_dir = mount / "logs"
        _create_topic(log_dir)
        filler = mount / "filler"
        filler.write_bytes(b"\0" * (4 << 20))
        acks = Acks()
        with ServeProcess(log_dir, stderr=tmp_path / "serve.err") as server:
            p = _producer(server.bootstrap)
            _produce(p, acks, 0, FIRST)
            assert 0 < len(acks.records) < FIRST, "the disk never filled: the test tests nothing"
            filler.unlink()
            time.sleep(0.5)  # a retried batch that timed out must not be confused with these
            _produce(p, acks, FIRST, SECOND)
            assert _acked_after(acks, FIRST) == SECOND
            first_log = _stop(server)
        with ServeProcess(log_dir, stderr=tmp_path / "serve2.err") as server:
            second_log = _stop(server)
        _read_back_and_verify(log_dir, acks)
    assert "Traceback" not in first_log and "Traceback" not in second_log
    episode_lines = [line for line in first_log.splitlines() if "No space left" in line]
    assert 1 <= len(episode_lines) <= 2, episode_lines[:5]


def test_a_server_stopped_while_the_disk_is_full_recovers_at_the_next_start(
    tmp_path: Path,
) -> None:
    with tmpfs(20 << 20) as mount:
        log_dir = mount / "logs"
        _create_topic(log_dir)
        filler = mount / "filler"
        filler.write_bytes(b"\0" * (4 << 20))
        acks = Acks()
        with ServeProcess(log_dir, stderr=tmp_path / "serve.err") as server:
            _produce(_producer(server.bootstrap), acks, 0, FIRST)
            assert 0 < len(acks.records) < FIRST, "the disk never filled: the test tests nothing"
            first_log = _stop(server)  # still full (a clean close if its last files fit)
        filler.unlink()
        with ServeProcess(log_dir, stderr=tmp_path / "serve2.err") as server:
            _produce(_producer(server.bootstrap), acks, FIRST, SECOND)
            assert _acked_after(acks, FIRST) == SECOND
            second_log = _stop(server)
        assert (log_dir / ".kafka_cleanshutdown").exists()
        _read_back_and_verify(log_dir, acks)
    assert "Traceback" not in first_log and "Traceback" not in second_log
