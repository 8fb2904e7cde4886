"""``kafkalog serve --brokers 3``: an in-process cluster of three brokers, each on its own port.

- Metadata from every broker names the three brokers on their bound ports and each
  partition's leader; a raw Produce to a follower is NOT_LEADER_OR_FOLLOWER (6), to the leader
  it is appended; ``stop ID`` on stdin moves leadership and drops the broker from Metadata,
  ``start ID`` brings it back on the same port.
- Leader failover under a confluent-kafka acks=all idempotent producer: over
  ``KAFKALOG_FAILOVERS`` failovers (default :data:`DEFAULT_FAILOVERS`, the issue's count,
  about a minute here), alternating a clean stop and a kill of the broker
  leading most partitions, every acknowledged record is at its acknowledged offset in the log
  of its partition's final leader.
- A delayed acks=all response over the wire (in-process, one request handler thread): while
  the followers are paused the produce waits in the purgatory and the only handler thread
  answers Metadata at once; resuming them answers the produce.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.common.producer_record import ProducerRecord, build_batch
from tests.spark_kafkalog._serve_proc import ServeProcess
from tests.spark_kafkalog.test_serve import Acks, producer, run_kafkalog

pytest.importorskip("kio", reason="kafkalog serve needs kio (Python 3.11+)")
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402
from kio.schema.metadata.v12 import request as meta_req  # noqa: E402
from kio.schema.metadata.v12 import response as meta_resp  # noqa: E402
from kio.schema.produce.v9 import request as req9  # noqa: E402
from kio.schema.produce.v9 import response as resp9  # noqa: E402

from tests.broker_embedded.server._net import request_frame  # noqa: E402
from tests.broker_embedded.server._serve import decode_response  # noqa: E402

TOPIC = "replicated"
PARTITIONS = 3
BROKERS = 3
DEFAULT_FAILOVERS = 20
RATE_PER_S = 4_000
RATE_STEP = 100
ISR_TIMEOUT_S = 30.0
IO_TIMEOUT_S = 15.0


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5_000})


def create_replicated_topic(bootstrap: str) -> None:
    topic = NewTopic(TOPIC, PARTITIONS, BROKERS, config={"min.insync.replicas": "2"})
    client = admin(bootstrap)  # kept alive until the result arrives
    client.create_topics([topic])[TOPIC].result(IO_TIMEOUT_S)


def partitions(bootstrap: str):
    """Partition id -> confluent-kafka's PartitionMetadata (leader, replicas, isrs)."""
    return admin(bootstrap).list_topics(TOPIC, timeout=IO_TIMEOUT_S).topics[TOPIC].partitions


def wait_for_full_isr(bootstrap: str, count: int = PARTITIONS) -> dict[int, int]:
    """Wait (bounded) until every partition has all brokers in its ISR; the leaders."""
    deadline = time.monotonic() + ISR_TIMEOUT_S
    while True:
        parts = partitions(bootstrap)
        if len(parts) == count and all(len(p.isrs) == BROKERS for p in parts.values()):
            return {p.id: p.leader for p in parts.values()}
        assert time.monotonic() < deadline, f"ISR not full after {ISR_TIMEOUT_S} s: {parts}"
        time.sleep(0.2)


def call(port: int, message: object, response_class: type) -> object:
    """One request on a new connection; the decoded response body (flexible header v1)."""
    with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S) as sock:
        sock.sendall(request_frame(message, 7))
        return decode_response(response_class, recv_frame(sock), message.__flexible__)


def recv_frame(sock: socket.socket) -> bytes:
    size = int.from_bytes(recv_exact(sock, 4), "big")
    return recv_exact(sock, size)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed with {n - len(data)} bytes still expected")
        data += chunk
    return data


def produce_request(partition: int, acks: int = -1) -> object:
    records = build_batch([ProducerRecord(value=b"raw")], now_ms=int(time.time() * 1000))
    return req9.ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            req9.TopicProduceData(
                name=TOPIC,
                partition_data=(req9.PartitionProduceData(index=partition, records=records),),
            ),
        ),
    )


def produce_error(port: int, partition: int) -> ErrorCode:
    response = call(port, produce_request(partition), resp9.ProduceResponse)
    return response.responses[0].partition_responses[0].error_code


METADATA = meta_req.MetadataRequest(
    topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
)


def test_metadata_names_every_broker_and_a_follower_refuses_produce(tmp_path: Path) -> None:
    with ServeProcess(tmp_path / "c", brokers=BROKERS, stderr=tmp_path / "err") as server:
        create_replicated_topic(server.bootstrap)
        leaders = wait_for_full_isr(server.bootstrap)
        for port in server.ports.values():  # every broker names all three and the leaders
            m = call(port, METADATA, meta_resp.MetadataResponse)
            assert {(b.node_id, b.port) for b in m.brokers} == set(server.ports.items())
            (t,) = m.topics
            assert {p.partition_index: p.leader_id for p in t.partitions} == leaders
        leader = leaders[0]
        follower = next(b for b in server.ports if b != leader)
        assert produce_error(server.ports[follower], 0) == ErrorCode.not_leader_or_follower
        assert produce_error(server.ports[leader], 0) == ErrorCode.none

        assert server.control(f"stop {leader}") == f"broker {leader} stopped"
        m = call(server.ports[follower], METADATA, meta_resp.MetadataResponse)
        assert {b.node_id for b in m.brokers} == set(server.ports) - {leader}
        assert m.topics[0].partitions[0].leader_id not in (leader, -1)
        assert server.control(f"start {leader}") == (
            f"broker {leader} listening on PLAINTEXT://127.0.0.1:{server.ports[leader]}"
        )
        assert server.control(f"start {leader}") == f"error: broker {leader} is running"
        assert server.control("stop 9") == "error: no broker 9 (brokers 0..2)"
        wait_for_full_isr(server.bootstrap)
        assert server.terminate() == 0
        assert server.next_line(5) == "stopped"
        assert "Traceback" not in server.stderr_text()


def test_create_topics_places_manual_replica_assignments(tmp_path: Path) -> None:
    """CreateTopics with ``assignments`` (confluent-kafka's ``replica_assignment``): each
    partition's replicas as given, its first replica leading; Kafka's refusals otherwise."""
    E = confluent_kafka.KafkaError
    topics = {
        "manual": NewTopic("manual", 3, replica_assignment=[[2, 0], [1, 2], [0, 1]]),
        "unknown-broker": NewTopic("unknown-broker", 1, replica_assignment=[[0, 7]]),
        "twice": NewTopic("twice", 1, replica_assignment=[[1, 1]]),
        "uneven": NewTopic("uneven", 2, replica_assignment=[[0, 1], [2]]),
    }
    with ServeProcess(tmp_path / "c", brokers=BROKERS, stderr=tmp_path / "err") as server:
        client = admin(server.bootstrap)
        errors = {}
        for name, future in client.create_topics(list(topics.values())).items():
            try:
                future.result(IO_TIMEOUT_S)
                errors[name] = None
            except confluent_kafka.KafkaException as e:
                errors[name] = (e.args[0].code(), e.args[0].str())
        parts = client.list_topics("manual", timeout=IO_TIMEOUT_S).topics["manual"].partitions
        assert server.terminate() == 0
    assert errors["manual"] is None
    assert {p.id: (p.replicas, p.leader) for p in parts.values()} == {
        0: ([2, 0], 2),
        1: ([1, 2], 1),
        2: ([0, 1], 0),
    }
    assert errors["unknown-broker"] == (
        E.INVALID_REPLICA_ASSIGNMENT,
        "topic 'unknown-broker': the manual partition assignment includes broker 7, but no such "
        "broker is registered",
    )
    assert errors["twice"][0] == E.INVALID_REPLICA_ASSIGNMENT
    assert "includes the broker 1 more than once" in errors["twice"][1]
    assert errors["uneven"][0] == E.INVALID_REPLICA_ASSIGNMENT
    assert "a partition with 1 replica(s), but this is not consistent" in errors["uneven"][1]


class BackgroundProducer:
    """An acks=all idempotent producer sending until stopped: at most ``limit`` records, about
    :data:`RATE_PER_S` a second (so the test's memory stays small however long it runs)."""

    def __init__(self, bootstrap: str, limit: int = 1_000_000) -> None:
        self.acks = Acks()
        self.sent = 0
        self._p = producer(
            bootstrap,
            **{
                "message.timeout.ms": 60_000,
                "linger.ms": 2,
                "topic.metadata.refresh.interval.ms": 1_000,
            },
        )
        self._stop = threading.Event()
        self._limit = limit
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.sent < self._limit:
            try:
                self._p.produce(
                    TOPIC,
                    key=b"k%d" % (self.sent % 101),
                    value=b"v%d" % self.sent,
                    on_delivery=self.acks,
                )
                self.sent += 1
            except BufferError:  # the local queue is full: serve delivery reports first
                self._p.poll(0.01)
                continue
            if self.sent % RATE_STEP == 0:
                self._p.poll(0)
                time.sleep(RATE_STEP / RATE_PER_S)

    def stop(self, timeout: float = 60.0) -> int:
        """Stop sending, wait for every delivery report; the records still undelivered."""
        self._stop.set()
        self._thread.join(timeout)
        return self._p.flush(timeout)


def busiest_leader(bootstrap: str) -> int:
    leaders = [p.leader for p in partitions(bootstrap).values()]
    return max(set(leaders), key=leaders.count)


@pytest.mark.slow  # broker kills and failovers
def test_failovers_lose_no_acknowledged_record(tmp_path: Path) -> None:
    failovers = int(os.environ.get("KAFKALOG_FAILOVERS", DEFAULT_FAILOVERS))
    base = tmp_path / "c"
    with ServeProcess(base, brokers=BROKERS, stderr=tmp_path / "err") as server:
        create_replicated_topic(server.bootstrap)
        wait_for_full_isr(server.bootstrap)
        p = BackgroundProducer(server.bootstrap)
        acked_before = []
        for i in range(failovers):
            # records acknowledged since the last failover, then again with the victim down
            acked_before.append(acked_beyond(p, acked_before[-1] if acked_before else 0))
            victim = busiest_leader(server.bootstrap)
            how = "stop" if i % 2 == 0 else "kill"
            assert server.control(f"{how} {victim}").startswith(f"broker {victim} ")
            acked_beyond(p, len(p.acks.records))
            assert server.control(f"start {victim}").startswith(f"broker {victim} listening")
            wait_for_full_isr(server.bootstrap)
        assert p.stop() == 0
        leaders = wait_for_full_isr(server.bootstrap)
        assert server.terminate() == 0
        assert "Traceback" not in server.stderr_text()
    acked = p.acks.records
    assert p.acks.failed == 0 and len(acked) == p.sent
    assert acked_before == sorted(acked_before) and len(acked) > acked_before[-1]
    for partition, leader in leaders.items():
        on_disk = consumed_partition(base / f"broker-{leader}", partition)
        mine = {o: kv for (q, o), kv in acked.items() if q == partition}
        assert {o: on_disk.get(o) for o in mine} == mine, f"partition {partition} lost records"
    print(f"{failovers} failovers, {len(acked)} acks=all records acknowledged, none lost")


def acked_beyond(p: BackgroundProducer, count: int) -> int:
    """Wait (bounded) until more than ``count`` records are acknowledged; how many are."""
    deadline = time.monotonic() + ISR_TIMEOUT_S
    while (acked := len(p.acks.records)) <= count:
        assert time.monotonic() < deadline, f"no record acknowledged in {ISR_TIMEOUT_S} s"
        time.sleep(0.01)
    return acked


def consumed_partition(log_dir: Path, partition: int) -> dict[int, tuple[bytes, bytes]]:
    done = run_kafkalog(
        "consume",
        "--log-dir",
        log_dir,
        "--topic",
        TOPIC,
        "--partition",
        str(partition),
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    return {r["offset"]: (r["key"].encode(), r["value"].encode()) for r in rows}


def test_delayed_acks_all_waits_in_the_purgatory_not_in_a_handler(tmp_path: Path) -> None:
    from broker_embedded.cluster import EmbeddedCluster
    from spark_kafkalog.serve_command import ServedBrokers, parse_listeners

    config = dataclasses.replace(BrokerConfig(), num_io_threads=1, num_network_threads=1)
    cluster = EmbeddedCluster(tmp_path / "c", BROKERS, config=config)
    served = ServedBrokers(
        lambda: cluster.brokers, parse_listeners("PLAINTEXT://127.0.0.1:0"), config, cluster
    )
    try:
        served.start_all()
        cluster.create_topic(TOPIC, 1, BROKERS, {"min.insync.replicas": "2"})
        leader = cluster.describe_topic(TOPIC).partitions[0].leader
        port = served.server(leader).endpoints[0].port
        wait_for_full_isr(f"127.0.0.1:{port}", 1)
        followers = [b for b in range(BROKERS) if b != leader]
        for b in followers:
            cluster.pause_broker(b)
        purgatory = cluster.brokers[leader].replica_manager.produce_purgatory
        with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S) as pending:
            pending.sendall(request_frame(produce_request(0), 1))
            deadline = time.monotonic() + IO_TIMEOUT_S
            while purgatory.pending == 0:  # the produce parked, waiting for the followers
                assert time.monotonic() < deadline, "the acks=all produce never waited"
                time.sleep(0.01)
            # the only handler thread answers Metadata while the produce waits: a handler
            # blocked on it would answer only after the followers resume
            m = call(port, METADATA, meta_resp.MetadataResponse)
            assert m.topics[0].partitions[0].leader_id == leader
            assert purgatory.pending == 1
            pending.setblocking(False)
            with pytest.raises(BlockingIOError):  # nothing answered yet
                pending.recv(1)
            for b in followers:
                cluster.resume_broker(b)
            pending.setblocking(True)
            pending.settimeout(IO_TIMEOUT_S)
            frame = recv_frame(pending)
        response = decode_response(resp9.ProduceResponse, frame, True)
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    finally:
        served.shutdown()
