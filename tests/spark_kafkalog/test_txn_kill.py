"""The issue's kill test: a confluent-kafka transactional consume-transform-produce loop
(tests/spark_kafkalog/_txn_loop_child.py, ``send_offsets_to_transaction``) run as a child
process against ``kafkalog serve``, killed with SIGKILL at random points ``KAFKALOG_TXN_KILLS``
times (default 20) and started again with the same transactional id (the new instance fences the
old one and aborts its open transaction); every :data:`SERVER_KILL_EVERY`-th time the server is
killed with SIGKILL too and started again on the same log dir (the transactions come back from
``__transaction_state``, the group's offsets from ``__consumer_offsets``). At the end a
read_committed consumer of the output sees every input record transformed exactly once, and
``spark.read.format("kafkalog")`` with ``kafka.isolation.level=read_committed`` on the log dir
(after a clean shutdown) reads the same rows, while read_uncommitted also sees the aborted ones.

Server kills are what TxnOffsetCommit's transactional records in ``__consumer_offsets`` make
safe: a server killed between a transaction's PrepareCommit and its markers finds the offsets
pending at restart, and the COMMIT marker it writes then commits them with the output.
A second test kills the server at the worst moment on purpose: ``KAFKALOG_TEST_HOLD_TXN_MARKERS``
(a test hook of the marker writer) keeps a first server from writing any marker, so its SIGKILL
lands after EndTxn(COMMIT) is answered and before the markers (the log shows none); the server
started again commits the transaction's offsets, which OffsetFetch then returns exactly.

Bounded: every wait has a timeout; the whole test takes about a
minute and a half. ``KAFKALOG_TXN_SEED`` fixes the random kill points (printed on failure).
"""

from __future__ import annotations

import os
import queue
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.spark_kafkalog._serve_proc import ROOT, ServeProcess, child_env

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka import TopicPartition as CTP  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kio.schema.offset_fetch.v8.request import (  # noqa: E402
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from kio.schema.offset_fetch.v8.response import OffsetFetchResponse  # noqa: E402
from kio.static.primitive import i32  # noqa: E402

from broker_embedded.coordinator.group_metadata_loader import load_log_dir  # noqa: E402
from broker_embedded.coordinator.transaction_coordinator import HOLD_MARKERS_ENV  # noqa: E402
from broker_embedded.storage.log_dir import LogDir  # noqa: E402
from tests.broker_embedded.server._net import RawClient  # noqa: E402
from tests.broker_embedded.server._serve import decode_response, log_batches  # noqa: E402
from tests.broker_embedded.server.test_transactions_api import committed_values  # noqa: E402

KILLS = int(os.environ.get("KAFKALOG_TXN_KILLS", "20"))
SEED = int(os.environ.get("KAFKALOG_TXN_SEED", str(time.time_ns() % 1_000_000)))
SERVER_KILL_EVERY = 6  # kills 6, 12 and 18 of 20 take the server down too
SERVER_KILLS = True  # switch off to kill only the loop
RECORDS, PARTITIONS = 2400, 3
# A kill lands after the loop's "ready" and 0-MAX_COMMITS_BEFORE_KILL of its commits, then up to
# MAX_KILL_DELAY_S more: before any transaction, inside one (most often), or between two.
MAX_COMMITS_BEFORE_KILL = 3
MAX_KILL_DELAY_S = 0.2
READY_TIMEOUT_S, DONE_TIMEOUT_S, TIMEOUT_S = 30.0, 60.0, 20.0
MAX_RUNS = 3 * KILLS + 5  # runs that end in an error are started again, this many in all
BROKER_TOML = """[broker]
"num.network.threads" = 2
"num.io.threads" = 2
"offsets.topic.num.partitions" = 5
"transaction.state.log.num.partitions" = 5
"""


class LoopProcess:
    """One run of the loop child; its stdout lines in a queue."""

    def __init__(self, bootstrap: str, seed: int, stderr: Path) -> None:
        command = [
            sys.executable,
            "-m",
            "tests.spark_kafkalog._txn_loop_child",
            bootstrap,
            "ctp-loop",
            "in",
            "out",
            str(PARTITIONS),
            str(seed),
        ]
        self._stderr = open(stderr, "ab")  # noqa: SIM115 (closed in close())
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=child_env(),
            cwd=ROOT,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def wait_for(self, word: str, timeout: float, times: int = 1) -> bool:
        """True once the child has printed a line starting with ``word`` ``times`` times;
        False if it ends first (AssertionError after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while times > 0:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"the loop printed no {word!r} within {timeout} s") from None
            if line is None:
                return False
            times -= line.startswith(word)
        return True

    def kill(self) -> None:
        self.proc.kill()
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(TIMEOUT_S)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self._stderr.close()


def create_input(bootstrap: str) -> list[tuple[bytes, bytes]]:
    """Topics ``in`` and ``out`` and the input records (non-transactional); the expected
    output as sorted (partition, value)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in ("in", "out")]).values():
        future.result(TIMEOUT_S)
    p = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 15_000})
    for i in range(RECORDS):
        p.produce("in", key=b"k%d" % i, value=b"v%d" % i, partition=i % PARTITIONS)
    assert p.flush(TIMEOUT_S) == 0
    return sorted((i % PARTITIONS, b"T:v%d" % i) for i in range(RECORDS))


def spark_rows(spark, log_dir: Path, isolation: str) -> list[tuple[int, bytes]]:
    """(partition, value) of every row of ``out`` Spark reads, sorted."""
    df = (
        spark.read.format("kafkalog")
        .option("subscribe", "out")
        .option("kafka.isolation.level", isolation)
        .load(str(log_dir))
    )
    rows = df.select("partition", "value").collect()
    return sorted((r.partition, bytes(r.value)) for r in rows)


class Server:
    """``kafkalog serve`` on the test's log dir, killed and started again on demand (by a
    process started ahead, held until then: see ServeProcess)."""

    def __init__(self, tmp_path: Path) -> None:
        self.log_dir = tmp_path / "logs"
        self.config = tmp_path / "broker.toml"
        self.config.write_text(BROKER_TOML)
        self.stderr = tmp_path / "serve.log"
        self.proc = self._process(held=False)
        self._next = self._process(held=True)

    def _process(self, held: bool) -> ServeProcess:
        return ServeProcess(
            self.log_dir, "--broker-config", self.config, stderr=self.stderr, held=held
        )

    def kill_and_restart(self) -> None:
        self.proc.kill()
        self.proc.close()
        self.proc, self._next = self._next.go(), self._process(held=True)

    def close(self) -> None:
        self.proc.close()
        self._next.close()


def kill_loops(server: Server, rng: random.Random, tmp_path: Path) -> tuple[int, int]:
    """Run the loop and SIGKILL it ``KILLS`` times (the server too, every
    ``SERVER_KILL_EVERY``-th time, when groups are persisted); (kills, server kills)."""
    kills = server_kills = runs = 0
    while kills < KILLS:
        runs += 1
        assert runs <= MAX_RUNS, f"{runs} runs for {kills} kills (seed {SEED})"
        loop = LoopProcess(server.proc.bootstrap, rng.randrange(1 << 30), tmp_path / "loop.log")
        commits = rng.randint(0, MAX_COMMITS_BEFORE_KILL)
        if not (
            loop.wait_for("ready", READY_TIMEOUT_S)
            and loop.wait_for("committed", READY_TIMEOUT_S, commits)
        ):
            loop.close()  # it failed (exit 3, see loop.log): run it again
            continue
        time.sleep(rng.uniform(0, MAX_KILL_DELAY_S))
        loop.kill()
        kills += 1
        if SERVER_KILLS and kills % SERVER_KILL_EVERY == 0:
            server.kill_and_restart()
            server_kills += 1
    return kills, server_kills


def finish(server: Server, tmp_path: Path) -> None:
    """One last run of the loop, to the end of the input (started again after an error)."""
    for _ in range(5):
        loop = LoopProcess(server.proc.bootstrap, 0, tmp_path / "loop.log")
        try:
            if loop.wait_for("done", DONE_TIMEOUT_S):
                assert loop.proc.wait(TIMEOUT_S) == 0
                return
        finally:
            loop.close()
    raise AssertionError(f"the loop never finished: {(tmp_path / 'loop.log').read_text()[-2000:]}")


@pytest.mark.slow  # kills and restarts
def test_killed_transactional_loop_transforms_every_record_exactly_once(tmp_path, spark):
    rng = random.Random(SEED)
    server = Server(tmp_path)
    try:
        expected = create_input(server.proc.bootstrap)
        kills, server_kills = kill_loops(server, rng, tmp_path)
        finish(server, tmp_path)
        got = committed_values(server.proc.bootstrap, "out", PARTITIONS)
        assert server.proc.terminate() == 0
    finally:
        server.close()
    assert (kills, server_kills) == (KILLS, KILLS // SERVER_KILL_EVERY if SERVER_KILLS else 0)
    assert len(got) == len(expected), f"seed {SEED}: {len(got)} records, not {len(expected)}"
    assert got == expected, f"seed {SEED}"
    assert spark_rows(spark, server.log_dir, "read_committed") == expected
    uncommitted = spark_rows(spark, server.log_dir, "read_uncommitted")
    assert set(expected) <= set(uncommitted)  # plus what the killed transactions left aborted
    if KILLS >= 10:  # then some kill lands after a produce (most of them do)
        assert len(uncommitted) > len(expected)


def offset_fetch(port: int, group: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """partition -> (committed offset, error code) by a raw OffsetFetch v8 with
    ``require_stable``."""
    indexes = tuple(i32(p) for p in range(partitions))
    topics = (OffsetFetchRequestTopics(name=topic, partition_indexes=indexes),)
    request = OffsetFetchRequest(
        groups=(OffsetFetchRequestGroup(group_id=group, topics=topics),), require_stable=True
    )
    with RawClient(port, TIMEOUT_S) as client:
        response = decode_response(OffsetFetchResponse, client.call(request), True)
    (g,) = response.groups
    assert g.error_code == 0
    return {
        p.partition_index: (p.committed_offset, p.error_code)
        for t in g.topics
        for p in t.partitions
    }


def transform_once(bootstrap: str, group: str, count: int) -> tuple[dict[int, int], list]:
    """One consume-transform-produce transaction of ``count`` input records with
    ``send_offsets_to_transaction``, committed (EndTxn answered): the positions it sent by
    partition and the (partition, value) records it produced."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"{group}-app",
            "message.timeout.ms": 15_000,
        }
    )
    try:
        c.assign([CTP("in", i, 0) for i in range(PARTITIONS)])
        records: list = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(records) < count and time.monotonic() < deadline:
            records += [m for m in c.consume(count - len(records), 1.0) if not m.error()]
        assert len(records) == count
        p.init_transactions(TIMEOUT_S)
        p.begin_transaction()
        for m in records:
            p.produce("out", value=b"T:" + m.value(), partition=m.partition())
        positions: dict[int, int] = {}
        for m in records:
            positions[m.partition()] = max(positions.get(m.partition(), 0), m.offset() + 1)
        sent = [CTP("in", part, offset) for part, offset in sorted(positions.items())]
        p.send_offsets_to_transaction(sent, c.consumer_group_metadata(), TIMEOUT_S)
        p.commit_transaction(TIMEOUT_S)
    finally:
        c.close()
    return positions, sorted((m.partition(), b"T:" + m.value()) for m in records)


def committed_by_confluent(bootstrap: str, group: str) -> dict[int, int]:
    """The group's committed offsets of ``in`` as a read_committed confluent-kafka consumer
    reads them (it asks with require_stable and waits out UNSTABLE_OFFSET_COMMIT)."""
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"}
    )
    try:
        got = c.committed([CTP("in", i) for i in range(PARTITIONS)], TIMEOUT_S)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


def test_a_server_killed_between_end_txn_and_its_markers_keeps_the_offsets(tmp_path, monkeypatch):
    config, log_dir = tmp_path / "broker.toml", tmp_path / "logs"
    config.write_text(BROKER_TOML)
    monkeypatch.setenv(HOLD_MARKERS_ENV, "1")  # this first server writes no marker
    server = ServeProcess(log_dir, "--broker-config", config, stderr=tmp_path / "serve.log")
    monkeypatch.delenv(HOLD_MARKERS_ENV)
    # the server started again after the kill, held until then (and without the hook)
    again = ServeProcess(
        log_dir, "--broker-config", config, stderr=tmp_path / "serve.log", held=True
    )
    with again:
        try:
            create_input(server.bootstrap)
            positions, produced = transform_once(server.bootstrap, "held", 100)
            port = server.ports[0]
            # 88: UNSTABLE_OFFSET_COMMIT
            unstable = {p: (-1, 88 if p in positions else 0) for p in range(PARTITIONS)}
            assert offset_fetch(port, "held", "in", PARTITIONS) == unstable
            server.kill()
        finally:
            server.close()
        offsets_dirs = list(log_dir.glob("__consumer_offsets-*"))
        assert not any(
            b.is_control for d in offsets_dirs for b in log_batches(log_dir, *d.name.rsplit("-", 1))
        )
        group = load_log_dir(LogDir(log_dir)).groups["held"]
        assert group.offsets == ()
        ((_, undecided),) = group.pending.items()
        assert {c.partition: c.offset for c in undecided} == positions

        again.go()
        committed = {p: positions.get(p, -1001) for p in range(PARTITIONS)}  # -1001: none
        assert committed_by_confluent(again.bootstrap, "held") == committed
        assert offset_fetch(again.ports[0], "held", "in", PARTITIONS) == {
            p: (positions.get(p, -1), 0) for p in range(PARTITIONS)
        }
        assert committed_values(again.bootstrap, "out", PARTITIONS) == produced
        assert again.terminate() == 0
    assert sum(positions.values()) == 100
