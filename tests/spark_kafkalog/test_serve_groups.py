"""Consumer group state kept in ``__consumer_offsets`` by ``kafkalog serve`` (a child process):

- a confluent-kafka group commits offsets; the server is stopped (SIGTERM, or SIGKILL) and
  started again on the same log dir; a new consumer of the group resumes exactly at the
  committed offsets, and OffsetFetch answers them;
- what the server wrote decodes with the Java decoder (Kafka's FileRecords and
  ConsumerProtocol, java/ConsumerOffsetsDump.java) line for line as kafkalog decodes it, with the
  record versions Kafka writes (offset commit key v1 + value v3, group metadata key v2 + value v3);
- a log dir copied from Kafka 3.7 serves the committed offsets Kafka wrote over OffsetFetch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_embedded.coordinator.coordinator_partition import partition_for
from broker_embedded.coordinator.group_metadata_record import (
    GroupRecord,
    RecordPlace,
    decode_key,
    decode_value,
)
from broker_embedded.record.records import iter_batches
from tests.broker_embedded.coordinator._offsets_fixture import copy_log_dir, java_dump
from tests.broker_embedded.server._groups import consumer_config, poll_until
from tests.spark_kafkalog._serve_proc import ServeProcess

pytest.importorskip("kio", reason="kafkalog serve needs kio (Python 3.11+)")
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka import TopicPartition as CTP  # noqa: E402

TOPIC = "events"
PARTITIONS = 3
PER_PARTITION = 10
GROUP = "resumers"
CONSUMED = 12  # records the first consumer processes before committing
TIMEOUT_S = 60.0


# a group's first join is not held for Kafka's default 3 s (as in Kafka's own integration
# tests): every consumer here joins an empty group, alone
BROKER_TOML = '[broker]\n"group.initial.rebalance.delay.ms" = 0\n'


def serve(log_dir: Path, tmp_path: Path, brokers: int = 1, held: bool = False) -> ServeProcess:
    config = tmp_path / "broker.toml"
    config.write_text(BROKER_TOML)
    return ServeProcess(
        log_dir,
        "--broker-config",
        config,
        brokers=brokers,
        stderr=tmp_path / "serve.log",
        held=held,
    )


def create_topic(cli, log_dir: Path) -> None:
    """``kafkalog topics create`` in this process (the ``cli`` fixture: no interpreter start)."""
    code, _, err = cli("topics create --log-dir", log_dir, TOPIC, "--partitions", str(PARTITIONS))
    assert code == 0, err


def produce(bootstrap: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for partition in range(PARTITIONS):
        for i in range(PER_PARTITION):
            p.produce(TOPIC, value=f"{partition}-{i}".encode(), partition=partition)
    assert p.flush(30) == 0


def consume_and_commit(bootstrap: str) -> dict[int, int]:
    """A group member consumes :data:`CONSUMED` records, commits its positions (sync) and
    leaves; the committed offset per partition (partitions it read nothing from: none)."""
    c = Consumer(consumer_config(bootstrap, GROUP))
    c.subscribe([TOPIC])
    got: list[tuple[int, int]] = []
    try:
        poll_until(
            [c],
            lambda: len(got) >= CONSUMED,
            lambda _, m: got.append((m.partition(), m.offset())),
            TIMEOUT_S,
        )
        positions = {}
        for partition, offset in got:
            positions[partition] = max(positions.get(partition, -1), offset + 1)
        c.commit(offsets=[CTP(TOPIC, p, o) for p, o in positions.items()], asynchronous=False)
        return positions
    finally:
        c.close()


def resumed(bootstrap: str, wanted: set[int]) -> tuple[dict[int, int], dict[int, int]]:
    """A new member of the group: (the group's committed offsets as OffsetFetch answers them,
    the first offset it is given per partition of ``wanted``, those with records left)."""
    c = Consumer(consumer_config(bootstrap, GROUP))
    try:
        asked = [CTP(TOPIC, p) for p in range(PARTITIONS)]
        committed = {tp.partition: tp.offset for tp in c.committed(asked, timeout=30)}
        c.subscribe([TOPIC])
        first: dict[int, int] = {}
        poll_until(
            [c],
            lambda: set(first) == wanted,
            lambda _, m: first.setdefault(m.partition(), m.offset()),
            TIMEOUT_S,
        )
        return committed, first
    finally:
        c.close()


def written_lines(segment: Path) -> list[str]:
    """kafkalog's decoding of a ``__consumer_offsets`` segment, in the Java decoder's format."""
    from tests.broker_embedded.coordinator.test_group_metadata_record import _java_line

    lines = []
    for batch in iter_batches(segment.read_bytes(), str(segment)):
        if batch.is_control:
            continue
        for r in batch.records():
            key = decode_key(r.key, RecordPlace(offset=r.offset))
            lines += _java_line(r.offset, GroupRecord(key, decode_value(key, r.value)))
    return lines


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_group_resumes_at_committed_offsets_after_restart(tmp_path: Path, cli, stop: str) -> None:
    log_dir = tmp_path / "logs"
    create_topic(cli, log_dir)
    # the server started again is started ahead, held until the first one is gone
    with serve(log_dir, tmp_path) as server, serve(log_dir, tmp_path, held=True) as again:
        produce(server.bootstrap)
        committed = consume_and_commit(server.bootstrap)
        if stop == "sigterm":
            assert server.terminate() == 0
        else:
            server.kill()
        assert sum(o for o in committed.values()) == CONSUMED
        again.go()
        left = {p for p in range(PARTITIONS) if committed.get(p, 0) < PER_PARTITION}
        fetched, first = resumed(again.bootstrap, left)
        assert again.terminate() == 0
    expected = {p: committed.get(p, 0) for p in left}
    assert first == expected
    assert fetched == {p: committed.get(p, -1001) for p in range(PARTITIONS)}  # -1001: none

    segment = log_dir / f"__consumer_offsets-{partition_for(GROUP)}" / "00000000000000000000.log"
    java = java_dump(segment)
    assert java == written_lines(segment)
    commits = [line for line in java if "OffsetCommit" in line]
    groups = [line for line in java if "GroupMetadata" in line]
    assert len(commits) == len(committed)
    assert all("key_version=1" in c and "value_version=3" in c for c in commits)
    assert groups and all("value_version=3" in g for g in groups)


def test_kafka_log_dir_serves_its_committed_offsets(tmp_path: Path) -> None:
    """Kafka 3.7's last commits of group DEVSmileCDR (group_metadata_record tests) over
    OffsetFetch from a copy of its log dir."""
    log_dir = copy_log_dir(tmp_path)
    with serve(log_dir, tmp_path) as server:
        c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "DEVSmileCDR"})
        try:
            got = c.committed([CTP("TestTopicPatient", 0)], timeout=30)
        finally:
            c.close()
        assert server.terminate() == 0
    assert [(tp.topic, tp.partition, tp.offset) for tp in got] == [("TestTopicPatient", 0, 3)]


def test_group_survives_stopping_its_coordinator(tmp_path: Path) -> None:
    """``kafkalog serve --brokers 3``: FindCoordinator names the leader of the group's
    ``__consumer_offsets`` partition; stopping that broker moves the leadership, the member
    finds the new coordinator and keeps committing, and the commits made before are intact
    (replicated)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    with serve(tmp_path / "cluster", tmp_path, brokers=3) as server:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        futures = admin.create_topics([NewTopic(TOPIC, PARTITIONS, replication_factor=3)])
        futures[TOPIC].result(30)
        produce(server.bootstrap)
        first = consume_and_commit(server.bootstrap)
        offsets_tp = partition_for(GROUP)
        meta = admin.list_topics("__consumer_offsets", timeout=30)
        coordinator = meta.topics["__consumer_offsets"].partitions[offsets_tp].leader
        assert server.control(f"stop {coordinator}") == f"broker {coordinator} stopped"
        meta = admin.list_topics("__consumer_offsets", timeout=30)
        moved = meta.topics["__consumer_offsets"].partitions[offsets_tp].leader
        assert moved not in (coordinator, -1)
        left = {p for p in range(PARTITIONS) if first.get(p, 0) < PER_PARTITION}
        fetched, resumed_at = resumed(server.bootstrap, left)
        assert resumed_at == {p: first.get(p, 0) for p in left}
        assert fetched == {p: first.get(p, -1001) for p in range(PARTITIONS)}
        merged = first | consume_and_commit(server.bootstrap)  # through the new coordinator
        left = {p for p in range(PARTITIONS) if merged.get(p, 0) < PER_PARTITION}
        fetched, resumed_at = resumed(server.bootstrap, left)
        assert resumed_at == {p: merged.get(p, 0) for p in left}
        assert fetched == {p: merged.get(p, -1001) for p in range(PARTITIONS)}
        assert server.terminate() == 0


def test_groups_command_over_the_wire_prints_what_the_log_dir_shows(tmp_path: Path, cli) -> None:
    """``kafkalog groups list|describe --bootstrap-server`` (in this process) on a running
    server, then ``--log-dir`` on its log dir after shutdown: the same exit status, stdout and
    stderr, byte for byte (a group with an active member holding every partition, and an Empty
    one)."""
    log_dir = tmp_path / "logs"
    create_topic(cli, log_dir)
    commands = [("list",), ("describe",), ("describe", "--group", GROUP)]
    with serve(log_dir, tmp_path) as server:
        produce(server.bootstrap)
        consume_and_commit(server.bootstrap)  # GROUP: Empty, with commits
        active = Consumer(consumer_config(server.bootstrap, "active", **{"client.id": "busy"}))
        try:
            active.subscribe([TOPIC])
            seen: list[int] = []
            poll_until([active], lambda: len(seen) >= 5, lambda _, m: seen.append(m.offset()))
            active.commit(asynchronous=False)
            wire = [cli("groups", *c, "--bootstrap-server", server.bootstrap) for c in commands]
            assert server.terminate() == 0
        finally:
            active.close()
    local = [cli("groups", *c, "--log-dir", log_dir) for c in commands]
    for w, d in zip(wire, local, strict=True):  # (exit status, stdout, stderr)
        assert w == d
    assert wire[0][1] == f"active\n{GROUP}\n"
    rows = [line.split() for line in wire[1][1].splitlines() if line.startswith("active ")]
    assert [(r[1], r[2], r[4], r[7], r[8]) for r in rows] == [
        (TOPIC, str(p), str(PER_PARTITION), "/127.0.0.1", "busy") for p in range(PARTITIONS)
    ]
    assert f"Consumer group '{GROUP}' has no active members." in wire[2][2]
