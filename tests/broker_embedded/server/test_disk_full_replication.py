"""Issue 27 part 1 under replication: ``kafkalog serve --brokers 3`` with one broker's log dir on
a real size-limited tmpfs, a confluent-kafka acks=all idempotent producer running, that disk
filled and then freed.

The full broker follows two partitions: its fetchers' appends fail (KAFKA_STORAGE_ERROR,
nothing kept), the fetcher threads back off and retry without logging a traceback, the follower
drops out of the ISR after ``replica.lag.time.max.ms`` while the other two keep acknowledging
(``min.insync.replicas`` 2), and once space is back it catches up and rejoins. It leads the
third: produces to it answer KAFKA_STORAGE_ERROR and the producer retries (kafkalog keeps a full
log dir online rather than moving leadership, storage/unified_log.py); its followers, caught up,
stay in the ISR, and the records are acknowledged once space is back. Then every acknowledged
record is at its acknowledged offset exactly once on every replica (``kafkalog consume`` of each
broker's log dir) and ``kafkalog dump --verify`` is clean on each.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.spark_kafkalog._serve_proc import ServeProcess
from tests.spark_kafkalog.test_serve import Acks, producer, run_kafkalog
from tests.tmpfs_mount import fill_leaving, fill_while_written, tmpfs

pytest.importorskip("kio", reason="kafkalog serve needs kio (Python 3.11+)")
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

TOPIC = "rep"
BROKERS = 3
FULL = 2  # the broker whose log dir fills
ASSIGNMENT = [[0, 1, 2], [1, 0, 2], [2, 0, 1]]  # broker 2 follows two partitions, leads one
LAG_MS = 2_000
VALUE_BYTES = 1024
RATE_PER_S = 500
DEADLINE_S = 45.0
IO_TIMEOUT_S = 15.0


class Producing:
    """An acks=all idempotent producer sending :data:`VALUE_BYTES` values at about
    :data:`RATE_PER_S` until stopped (key ``k<i>``, value ``i`` repeated)."""

    def __init__(self, bootstrap: str) -> None:
        self.acks = Acks()
        self.sent = 0
        self._p = producer(
            bootstrap,
            **{
                "message.timeout.ms": 120_000,
                "linger.ms": 5,
                "topic.metadata.refresh.interval.ms": 1_000,
            },
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.sent < 200_000:
            try:
                self._p.produce(
                    TOPIC, key=b"k%d" % self.sent, value=value(self.sent), on_delivery=self.acks
                )
            except BufferError:
                self._p.poll(0.05)
                continue
            self.sent += 1
            if self.sent % 50 == 0:
                self._p.poll(0)
                time.sleep(50 / RATE_PER_S)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(IO_TIMEOUT_S)
        return self._p.flush(60)


def value(i: int) -> bytes:
    return (b"%08d" % i) * (VALUE_BYTES // 8)


def isrs(bootstrap: str) -> dict[int, list[int]]:
    client = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5_000})
    parts = client.list_topics(TOPIC, timeout=IO_TIMEOUT_S).topics[TOPIC].partitions
    return {p.id: sorted(p.isrs) for p in parts.values()}


def wait_for(what: str, check, deadline_s: float = DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while True:  # bounded by the deadline
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what} not seen in {deadline_s} s"
        time.sleep(0.2)


def consumed(log_dir: Path) -> dict[int, list[tuple[int, bytes, bytes]]]:
    """(offset, key, value) of every record of each partition of the topic: one ``kafkalog
    consume`` of the whole topic (a process a partition cost a second of CPU each)."""
    done = run_kafkalog(
        "consume", "--log-dir", log_dir, "--topic", TOPIC, "--format", "json", timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out: dict[int, list[tuple[int, bytes, bytes]]] = {q: [] for q in range(len(ASSIGNMENT))}
    for r in map(json.loads, done.stdout.splitlines()):
        out[r["partition"]].append((r["offset"], r["key"].encode(), r["value"].encode()))
    return out


def check_replicas(base: Path, acks: Acks) -> None:
    for b in range(BROKERS):
        dirs = [base / f"broker-{b}" / f"{TOPIC}-{q}" for q in range(len(ASSIGNMENT))]
        verify = run_kafkalog("dump", "--verify", "--summary", *dirs, timeout=120)
        assert verify.returncode == 0, f"broker {b}: {verify.stdout[-2000:]}{verify.stderr[-2000:]}"
        for q, rows in consumed(base / f"broker-{b}").items():
            keys = [k for _, k, _ in rows]
            assert len(keys) == len(set(keys)), f"broker {b} partition {q} holds duplicates"
            on_disk = {o: (k, v) for o, k, v in rows}
            mine = {o: kv for (p, o), kv in acks.records.items() if p == q}
            lost = [o for o, kv in mine.items() if on_disk.get(o) != kv]
            assert not lost, f"broker {b} partition {q}: {len(lost)} acknowledged records wrong"


@pytest.mark.slow  # full disks in a cluster, restarts
def test_a_follower_on_a_full_disk_leaves_the_isr_and_catches_up_once_space_is_back(
    tmp_path: Path,
) -> None:
    base = tmp_path / "c"
    conf = tmp_path / "broker.toml"
    conf.write_text(
        f'[broker]\n"replica.lag.time.max.ms" = {LAG_MS}\n"replica.fetch.backoff.ms" = 200\n'
    )
    with tmpfs(16 << 20) as mount:
        base.mkdir()
        (mount / "logs").mkdir()
        (base / f"broker-{FULL}").symlink_to(mount / "logs")
        with ServeProcess(
            base, "--broker-config", conf, brokers=BROKERS, stderr=tmp_path / "err"
        ) as server:
            client = AdminClient({"bootstrap.servers": server.bootstrap})
            topic = NewTopic(
                TOPIC,
                len(ASSIGNMENT),
                replica_assignment=ASSIGNMENT,
                config={"min.insync.replicas": "2", "segment.bytes": "1048576"},
            )
            client.create_topics([topic])[TOPIC].result(IO_TIMEOUT_S)
            full_isr = {q: [0, 1, 2] for q in range(len(ASSIGNMENT))}
            wait_for("the full ISR", lambda: isrs(server.bootstrap) == full_isr)
            p = Producing(server.bootstrap)
            wait_for("acknowledgements", lambda: len(p.acks.records) >= 500)
            filler = fill_leaving(mount, 256 << 10)
            shrunk = {0: [0, 1], 1: [0, 1], 2: [0, 1, 2]}  # its followers are caught up
            wait_for(f"broker {FULL} out of the ISR", lambda: isrs(server.bootstrap) == shrunk)
            acked_full = len(p.acks.records)
            wait_for(
                "acknowledgements while the follower's disk is full",
                lambda: len(p.acks.records) >= acked_full + 1_000,
            )
            filler.unlink()
            wait_for("the full ISR again", lambda: isrs(server.bootstrap) == full_isr)
            assert p.stop() == 0
            wait_for("the full ISR at the end", lambda: isrs(server.bootstrap) == full_isr)
            assert server.terminate() == 0
            err = server.stderr_text()
        check_replicas(base, p.acks)
    assert p.acks.failed == 0 and len(p.acks.records) == p.sent
    assert "Traceback" not in err, err[-3000:]
    episode = [line for line in err.splitlines() if "No space left" in line]
    assert 1 <= len(episode) <= 2, episode[:5]
    print(f"{len(p.acks.records)} records acknowledged, {len(episode)} log line(s) for the episode")


@pytest.mark.slow  # full disks in a cluster, restarts
def test_a_broker_stopped_and_started_while_the_whole_cluster_disk_is_full(
    tmp_path: Path,
) -> None:
    """Every broker's log dir and the controller's state on one full tmpfs: the leaders answer
    KAFKA_STORAGE_ERROR, the producer retries; a broker stopped meanwhile (its leadership moves:
    the controller's state file cannot be rewritten) and started again once space is back
    rejoins every ISR, and every acknowledged record is once on every replica."""
    conf = tmp_path / "broker.toml"
    conf.write_text(
        f'[broker]\n"replica.lag.time.max.ms" = {LAG_MS}\n"replica.fetch.backoff.ms" = 200\n'
    )
    with tmpfs(32 << 20) as mount:
        base = mount / "c"
        with ServeProcess(
            base, "--broker-config", conf, brokers=BROKERS, stderr=tmp_path / "err"
        ) as server:
            client = AdminClient({"bootstrap.servers": server.bootstrap})
            topic = NewTopic(
                TOPIC,
                len(ASSIGNMENT),
                replica_assignment=ASSIGNMENT,
                config={"min.insync.replicas": "2", "segment.bytes": "1048576"},
            )
            client.create_topics([topic])[TOPIC].result(IO_TIMEOUT_S)
            full_isr = {q: [0, 1, 2] for q in range(len(ASSIGNMENT))}
            wait_for("the full ISR", lambda: isrs(server.bootstrap) == full_isr)
            p = Producing(server.bootstrap)
            wait_for("acknowledgements", lambda: len(p.acks.records) >= 500)
            filler = fill_while_written(mount, 0)
            acked = len(p.acks.records)
            time.sleep(2)  # appends fail meanwhile
            assert len(p.acks.records) < acked + 2 * RATE_PER_S
            assert server.control("stop 1") == "broker 1 stopped"
            assert isrs(server.bootstrap)[1] != [0, 1, 2]  # still answers Metadata
            filler.unlink()
            assert server.control("start 1").startswith("broker 1 listening")
            wait_for("the full ISR again", lambda: isrs(server.bootstrap) == full_isr)
            acked = len(p.acks.records)
            wait_for("acknowledgements after", lambda: len(p.acks.records) >= acked + 500)
            assert p.stop() == 0
            wait_for("the full ISR at the end", lambda: isrs(server.bootstrap) == full_isr)
            assert server.terminate() == 0
            err = server.stderr_text()
        check_replicas(base, p.acks)
    assert p.acks.failed == 0 and len(p.acks.records) == p.sent
    assert "Traceback" not in err, err[-3000:]
    print(f"{len(p.acks.records)} records acknowledged")
