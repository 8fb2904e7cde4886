"""Issue 27 part 1, repeated: ``kafkalog serve --metrics-port 0`` on a real size-limited tmpfs
whose space is taken and given back :data:`CYCLES` times under a running confluent-kafka
acks=all idempotent producer and a consumer, then killed (SIGKILL) in the middle of a full-disk
episode and started again once space is back.

Each episode is seen by a client: a probe producer without retries gets KAFKA_STORAGE_ERROR (56).
While the disk is full the broker keeps answering ApiVersions and Metadata (an AdminClient's
``list_topics``), Fetch (the consumer reads every record acknowledged before the disk filled),
the metrics endpoint, and ``kafkalog consume --log-dir`` reads the log dir beside it. Once space
is back the producer's retries land. After the kill and restart every acknowledged record is at
its acknowledged offset exactly once, no key is in the log twice, ``kafkalog dump --verify`` is
clean, the server logged no traceback and at most two lines per episode.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.spark_kafkalog._serve_proc import ServeProcess
from tests.spark_kafkalog.test_serve import Acks, producer, run_kafkalog
from tests.tmpfs_mount import fill_while_written, tmpfs

pytest.importorskip("kio", reason="kafkalog serve needs kio (Python 3.11+)")
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

TOPIC, PROBE = "cyc", "probe"
PARTITIONS = 2
CYCLES = 5  # episodes before the one the kill ends: each the same steps again
VALUE_BYTES = 1024
RATE_PER_S = 1_000
LEAVE_BYTES = 16 << 10
DEADLINE_S = 120.0  # a hang guard: each wait ends when its outcome is seen
IO_TIMEOUT_S = 15.0
MAX_SENT = 200_000


def value(i: int) -> bytes:
    return (b"%08d" % i) * (VALUE_BYTES // 8)


class Producing:
    """The idempotent producer, sending ``<prefix><i>`` at about :data:`RATE_PER_S`."""

    def __init__(self, bootstrap: str, prefix: bytes = b"k") -> None:
        self.acks = Acks()
        self.sent = 0
        self.prefix = prefix
        self.p = producer(bootstrap, **{"message.timeout.ms": 120_000, "linger.ms": 5})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.sent < MAX_SENT:
            try:
                self.p.produce(
                    TOPIC,
                    key=self.prefix + b"%d" % self.sent,
                    value=value(self.sent),
                    on_delivery=self.acks,
                )
            except BufferError:
                self.p.poll(0.05)
                continue
            self.sent += 1
            if self.sent % 50 == 0:
                self.p.poll(0)
                time.sleep(50 / RATE_PER_S)

    def halt(self) -> None:
        self._stop.set()
        self._thread.join(IO_TIMEOUT_S)


class Consuming:
    """A consumer of :data:`TOPIC` from the start; ``count`` records received."""

    def __init__(self, bootstrap: str) -> None:
        self.count = 0
        self.errors: list[str] = []
        self._c = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "cycles",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "socket.timeout.ms": 5_000,
            }
        )
        self._c.subscribe([TOPIC])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for m in self._c.consume(500, 0.2):
                if m.error() is None:
                    self.count += 1
                elif m.error().fatal():
                    self.errors.append(str(m.error()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(IO_TIMEOUT_S)
        self._c.close()


def wait_for(what: str, check, deadline_s: float = DEADLINE_S, server: ServeProcess | None = None):
    """``check()`` once it is true; at the deadline an error naming ``what``, with the end of
    ``server``'s log when given."""
    deadline = time.monotonic() + deadline_s
    while True:  # bounded by the deadline
        got = check()
        if got:
            return got
        if time.monotonic() >= deadline:
            log = (
                ""
                if server is None
                else "\nthe server's log ends:\n" + server.stderr_text()[-3000:]
            )
            raise AssertionError(f"{what} not seen in {deadline_s} s{log}")
        time.sleep(0.1)


def probe_error(bootstrap: str) -> int | None:
    """One 8 KB record to :data:`PROBE` without retries: its error code (None: appended)."""
    p = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "retries": 0,
            "enable.idempotence": False,
            "message.timeout.ms": 5_000,
        }
    )
    got: list[int | None] = []
    p.produce(
        PROBE,
        value=b"p" * 8192,
        on_delivery=lambda err, _m: got.append(None if err is None else err.code()),
    )
    p.flush(IO_TIMEOUT_S)
    return got[0] if got else -1


def create_topics(log_dir: Path) -> None:
    for name, partitions in ((TOPIC, PARTITIONS), (PROBE, 1)):
        done = run_kafkalog(
            "topics",
            "create",
            "--log-dir",
            log_dir,
            name,
            "--partitions",
            str(partitions),
            "--config",
            "segment.bytes=1048576",
        )
        assert done.returncode == 0, done.stderr


def during_the_episode(server: ServeProcess, metrics_url: str, log_dir: Path) -> None:
    """Metadata, the metrics endpoint and a reader of the log dir answer while it is full."""
    admin = AdminClient({"bootstrap.servers": server.bootstrap, "socket.timeout.ms": 5_000})
    assert len(admin.list_topics(TOPIC, timeout=IO_TIMEOUT_S).topics[TOPIC].partitions) == 2
    with urllib.request.urlopen(metrics_url, timeout=IO_TIMEOUT_S) as answer:
        assert answer.status == 200 and b"kafka_server" in answer.read()
    read = run_kafkalog(
        "consume",
        "--log-dir",
        log_dir,
        "--topic",
        TOPIC,
        "--partition",
        "0",
        "--format",
        "json",
        "--max-messages",
        "10",
    )
    assert read.returncode == 0 and len(read.stdout.splitlines()) == 10, read.stderr[-2000:]


def read_back(log_dir: Path, acks: Acks) -> None:
    dirs = [log_dir / f"{TOPIC}-{q}" for q in range(PARTITIONS)]
    verify = run_kafkalog("dump", "--verify", "--summary", *dirs, timeout=120)
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]
    read = run_kafkalog(
        "consume", "--log-dir", log_dir, "--topic", TOPIC, "--format", "json", timeout=120
    )
    assert read.returncode == 0, read.stderr[-2000:]
    rows = [json.loads(line) for line in read.stdout.splitlines()]
    keys = [r["key"] for r in rows]
    assert len(keys) == len(set(keys)), "a record is in the log twice"
    on_disk = {
        (r["partition"], r["offset"]): (r["key"].encode(), r["value"].encode()) for r in rows
    }
    lost = [po for po, kv in acks.records.items() if on_disk.get(po) != kv]
    assert not lost, f"{len(lost)} acknowledged records wrong, first {sorted(lost)[:3]}"


@pytest.mark.slow  # full-disk episodes and a kill
def test_fill_and_free_cycles_then_a_kill_in_a_full_disk_episode(tmp_path: Path) -> None:
    with tmpfs(64 << 20) as mount:
        log_dir = mount / "logs"
        create_topics(log_dir)
        with ServeProcess(log_dir, "--metrics-port", "0", stderr=tmp_path / "a.err") as server:
            metrics_url = server.next_line(30).split(" on ")[1]
            p = Producing(server.bootstrap)
            c = Consuming(server.bootstrap)
            for cycle in range(CYCLES + 1):
                acked = len(p.acks.records)
                wait_for("acknowledgements", lambda a=acked: len(p.acks.records) >= a + 300)
                filler = fill_while_written(mount, LEAVE_BYTES)
                wait_for("KAFKA_STORAGE_ERROR", lambda: probe_error(server.bootstrap) == 56)
                full_acked = len(p.acks.records)
                wait_for("the consumer reading while full", lambda a=full_acked: c.count >= a)
                if cycle == CYCLES:
                    server.kill()  # in the middle of the episode
                    break
                during_the_episode(server, metrics_url, log_dir)
                filler.unlink()
            first_log = server.stderr_text()
            p.halt()
            p.p.purge()
            p.p.flush(IO_TIMEOUT_S)
            c.stop()
        filler.unlink()
        acked_before_kill = len(p.acks.records)
        with ServeProcess(log_dir, stderr=tmp_path / "b.err") as server:
            after = Producing(server.bootstrap, b"r")
            wait_for(
                "acknowledgements after the restart",
                lambda: len(after.acks.records) >= 300,
                server=server,
            )
            after.halt()
            assert after.p.flush(60) == 0
            assert server.terminate() == 0
            second_log = server.stderr_text()
        p.acks.records.update(after.acks.records)
        read_back(log_dir, p.acks)
    assert c.errors == []
    assert "Traceback" not in first_log, first_log[-3000:]
    assert "Traceback" not in second_log, second_log[-3000:]
    lines = [line for line in first_log.splitlines() if "No space left" in line]
    assert 1 <= len(lines) <= 2 * (CYCLES + 1), lines[:5]
    print(
        f"{CYCLES} cycles and a kill: {acked_before_kill} acknowledged before the kill, "
        f"{len(after.acks.records)} after the restart, {len(lines)} log lines"
    )
