"""``kafkalog serve`` as a real child process on 127.0.0.1 (port 0, parsed from its output),
with confluent-kafka (librdkafka) producing over the wire: SIGTERM shuts it down cleanly and
``kafkalog consume --log-dir`` then reads exactly what was acknowledged; SIGKILL mid-produce
loses no acknowledged acks=all record; a second writer of a served log dir is refused naming
the holder; without kio (Python 3.10) ``serve`` is refused in one line and the rest works."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.spark_kafkalog._serve_proc import (
    STOP_TIMEOUT_S,
    ServeProcess,
    child_env,
    kafkalog_command,
)

pytest.importorskip("kio", reason="kafkalog serve needs kio (Python 3.11+)")
confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "events"
PARTITIONS = 3
SHUTDOWN_BOUND_S = 15.0
ACKED_BEFORE_KILL = 1_000  # records acknowledged (acks=all) while producing, then the kill
ACKED_BEFORE_KILL_S = 120.0  # the bound on getting them: a server that acks none fails


def producer(bootstrap: str, **extra) -> confluent_kafka.Producer:
    return confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 20_000,
            "socket.timeout.ms": 5_000,
            "reconnect.backoff.max.ms": 200,
            "retry.backoff.ms": 50,
            **extra,
        }
    )


class Acks:
    """The delivery callback's acknowledged records: (partition, offset) -> (key, value)."""

    def __init__(self) -> None:
        self.records: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        self.failed = 0
        self._lock = threading.Lock()

    def __call__(self, err, msg) -> None:
        with self._lock:
            if err is None:
                self.records[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
            else:
                self.failed += 1


def run_kafkalog(*args: str | Path, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        kafkalog_command(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(**env),
    )


def create_topic(log_dir: Path, partitions: int = PARTITIONS) -> None:
    done = run_kafkalog(
        "topics", "create", "--log-dir", log_dir, TOPIC, "--partitions", str(partitions)
    )
    assert done.returncode == 0, done.stderr


def consumed(log_dir: Path) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """Every record of the topic as ``kafkalog consume --log-dir --format json`` reads it."""
    done = run_kafkalog("consume", "--log-dir", log_dir, "--topic", TOPIC, "--format", "json")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    return {(r["partition"], r["offset"]): (r["key"].encode(), r["value"].encode()) for r in rows}


def shut_down(server: ServeProcess) -> None:
    started = time.monotonic()
    assert server.terminate(SHUTDOWN_BOUND_S) == 0, server.stderr_text()
    assert time.monotonic() - started < SHUTDOWN_BOUND_S
    assert server.next_line(5) == "stopped"
    assert "Traceback" not in server.stderr_text()


def test_produce_sigterm_then_consume_reads_exactly_the_acknowledged(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    create_topic(log_dir)
    count = 3_000
    with ServeProcess(log_dir, stderr=tmp_path / "serve.err") as server:
        acks = Acks()
        p = producer(server.bootstrap)
        for i in range(count):
            p.produce(TOPIC, key=f"k{i % 97}", value=f"value-{i}", on_delivery=acks)
            p.poll(0)
        assert p.flush(30) == 0
        assert acks.failed == 0 and len(acks.records) == count
        shut_down(server)
    assert (log_dir / ".kafka_cleanshutdown").exists()
    assert consumed(log_dir) == acks.records
    assert sorted(v for _, v in acks.records.values()) == sorted(
        f"value-{i}".encode() for i in range(count)
    )


def test_sigkill_mid_produce_loses_no_acknowledged_record(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    create_topic(log_dir)
    acks = Acks()
    with ServeProcess(log_dir, stderr=tmp_path / "serve.err") as server:
        p = producer(server.bootstrap, **{"message.timeout.ms": 30_000})
        deadline = time.monotonic() + ACKED_BEFORE_KILL_S
        i = 0
        while len(acks.records) < ACKED_BEFORE_KILL:  # acks=all traffic, killed mid-stream
            assert time.monotonic() < deadline, f"{len(acks.records)} acknowledged in time"
            if len(p) > 10_000:  # the producer's queue: let acks come before adding more
                p.poll(0.05)
                continue
            p.produce(TOPIC, key=f"k{i % 13}", value=f"v{i}", on_delivery=acks)
            p.poll(0)
            i += 1
        server.kill()
    # recovery: serve again (recovers the unclean log), stop cleanly, read the log dir; the
    # process starts (held) while the producer's last records time out
    with ServeProcess(log_dir, stderr=tmp_path / "serve2.err", held=True) as server:
        p.flush(10)
        shut_down(server.go())
    on_disk = consumed(log_dir)
    missing = {k: v for k, v in acks.records.items() if on_disk.get(k) != v}
    assert missing == {}, f"{len(missing)} of {len(acks.records)} acknowledged records lost"


def test_a_served_log_dir_refuses_a_second_writer_naming_the_holder(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    with ServeProcess(log_dir, stderr=tmp_path / "serve.err") as server:
        second = run_kafkalog(
            "serve",
            "--log-dir",
            log_dir,
            "--listeners",
            "PLAINTEXT://127.0.0.1:0",
            timeout=STOP_TIMEOUT_S,
        )
        assert second.returncode == 1
        line = f"kafkalog serve: log dir {log_dir} is locked by pid {server.proc.pid} on host"
        assert second.stderr.startswith(line) and "another process owns it" in second.stderr
        assert len(second.stderr.splitlines()) == 1 and second.stdout == ""
        topics = run_kafkalog("topics", "create", "--log-dir", log_dir, "t")
        assert topics.returncode == 1 and f"locked by pid {server.proc.pid}" in topics.stderr
        shut_down(server)
    # released: the next writer gets it
    create_topic(log_dir, partitions=1)


def test_bad_listeners_and_brokers_are_one_line_errors(tmp_path: Path) -> None:
    bad = run_kafkalog("serve", "--log-dir", tmp_path / "a", "--listeners", "BOGUS://h:1")
    assert bad.returncode == 1
    assert bad.stderr == (
        "kafkalog serve: --listeners: listener 'BOGUS://h:1': BOGUS is not in "
        "listener.security.protocol.map (PLAINTEXT, SASL_PLAINTEXT, SASL_SSL, SSL)\n"
    )
    create_topic(tmp_path / "b", partitions=1)
    mixed = run_kafkalog("serve", "--log-dir", tmp_path / "b", "--brokers", "3")
    assert mixed.returncode == 1 and "is the log dir of one broker" in mixed.stderr


def test_without_kio_serve_is_refused_in_one_line_and_the_rest_works(tmp_path: Path) -> None:
    serve = run_kafkalog("serve", "--log-dir", tmp_path / "logs", KAFKALOG_HIDE_KIO="1")
    assert serve.returncode == 1 and serve.stdout == ""
    assert serve.stderr.startswith("kafkalog serve: the server needs Python 3.11+ with kio")
    assert len(serve.stderr.splitlines()) == 1
    assert not (tmp_path / "logs").exists()
    topics = run_kafkalog(
        "topics", "create", "--log-dir", tmp_path / "logs", TOPIC, KAFKALOG_HIDE_KIO="1"
    )
    assert topics.returncode == 0 and topics.stdout == f"Created topic {TOPIC}.\n", topics.stderr


def test_readme_snippet_spark_reads_the_log_dir_a_running_server_owns(tmp_path, spark) -> None:
    """The steps of docs/serving/index.md: serve, create the topic and produce with
    confluent-kafka, read the same log dir with Spark while the server still runs (readers
    take no lock; the server publishes its high watermark within checkpoint.interval.ms)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    log_dir = tmp_path / "kl"
    with ServeProcess(log_dir, stderr=tmp_path / "serve.err") as server:
        client = AdminClient({"bootstrap.servers": server.bootstrap})
        client.create_topics([NewTopic(TOPIC, 3)])[TOPIC].result(30)
        acks = Acks()
        p = producer(server.bootstrap)
        for i in range(1000):
            p.produce(TOPIC, key=f"user-{i % 10}", value=f"event {i}", on_delivery=acks)
        assert p.flush(30) == 0 and len(acks.records) == 1000
        time.sleep(0.5)  # the published high watermark follows within checkpoint.interval.ms
        df = spark.read.format("kafkalog").option("subscribe", TOPIC).load(str(log_dir))
        rows = df.select("partition", "offset", "key", "value").collect()
        read = {(r.partition, r.offset): (bytes(r.key), bytes(r.value)) for r in rows}
        assert read == acks.records
        shut_down(server)


def test_confluent_consumer_reads_back_what_it_produced_over_the_wire(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    create_topic(log_dir)
    with ServeProcess(log_dir, stderr=tmp_path / "serve.err") as server:
        acks = Acks()
        p = producer(server.bootstrap)
        for i in range(2_000):
            p.produce(TOPIC, key=f"k{i % 31}", value=f"v{i}", on_delivery=acks)
        assert p.flush(30) == 0 and len(acks.records) == 2_000
        settings = {"bootstrap.servers": server.bootstrap, "group.id": "serve-test"}
        c = confluent_kafka.Consumer({**settings, "enable.auto.commit": False})
        c.assign([confluent_kafka.TopicPartition(TOPIC, q, 0) for q in range(PARTITIONS)])
        read: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        deadline = time.monotonic() + 30
        while len(read) < len(acks.records) and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                assert m.error() is None, m.error()
                read[(m.partition(), m.offset())] = (m.key(), m.value())
        c.close()
        assert read == acks.records
        shut_down(server)
