"""The Prometheus endpoint of ``kafkalog serve --metrics-port``: one served broker for the module
(the serve command's own ``open_brokers``, in this process), real clients over loopback
(confluent-kafka, kafka-python), real scrapes over HTTP (urllib), parsed with
prometheus-client's text parser.

Counters are checked exactly: messages in is the number of records produced, bytes in the
record batch bytes appended (the partition files' sizes on disk, read independently of the
broker), bytes out the bytes a consumer fetched once; lag is the high watermark a client reads
minus the offset it committed.
"""

from __future__ import annotations

import dataclasses
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kio", reason="kafkalog serve needs kio (Python 3.11+)")
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from broker_embedded.broker_config import BrokerConfig  # noqa: E402
from spark_kafkalog.serve_command import (  # noqa: E402
    MetricsOptions,
    ServedBrokers,
    open_brokers,
    parse_listeners,
)
from tests.spark_kafkalog._serve_proc import ServeProcess  # noqa: E402

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
WAIT_S = 30.0
CLEAN_WAIT_S = 180.0  # the cleaner's numba kernel compiles on its first use in a fresh clone
VALUE = b"v" * 100


@dataclasses.dataclass
class Served:
    served: ServedBrokers
    log_dir: Path
    bootstrap: str
    url: str

    def scrape(self) -> Samples:
        with urllib.request.urlopen(self.url, timeout=10) as answer:
            text = answer.read().decode()
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def create(self, topic: str, partitions: int, replicas: int = 1, **config: str) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        new = NewTopic(topic, partitions, replicas, config=config)
        admin.create_topics([new])[topic].result(WAIT_S)

    def log_bytes(self, topic: str, partitions: int) -> int:
        """The partitions' segment files on disk, summed."""
        return sum(
            f.stat().st_size
            for p in range(partitions)
            for f in (self.log_dir / f"{topic}-{p}").glob("*.log")
        )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    log_dir = tmp_path_factory.mktemp("metrics")
    config = dataclasses.replace(
        BrokerConfig(), log_cleaner_backoff_ms=100, log_cleaner_dedupe_buffer_size=1 << 20
    )
    listeners = parse_listeners("PLAINTEXT://127.0.0.1:0")
    served = open_brokers(log_dir, config, 1, listeners, None, MetricsOptions(port=0))
    try:
        lines = served.start_all()
        port = served.server(0).endpoints[0].port
        assert lines[-1].startswith("broker 0 metrics on http://127.0.0.1:")
        yield Served(served, log_dir, f"127.0.0.1:{port}", lines[-1].split(" on ")[1])
    finally:
        served.shutdown()


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def produce(bootstrap: str, topic: str, count: int, partitions: int, key=None) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        p.produce(topic, value=VALUE, key=None if key is None else key(i), partition=i % partitions)
    assert p.flush(WAIT_S) == 0


def consumer(bootstrap: str, group: str) -> confluent_kafka.Consumer:
    return confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "fetch.max.bytes": 50 << 20,
            "max.partition.fetch.bytes": 50 << 20,
        }
    )


def consume_all(c: confluent_kafka.Consumer, count: int) -> None:
    got, deadline = 0, time.monotonic() + WAIT_S
    while got < count and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            assert m.error() is None, m.error()
            got += 1
    assert got == count


def test_produce_moves_messages_and_bytes_in_by_exactly_what_was_appended(server: Served) -> None:
    topic, partitions = "produced", 2
    server.create(topic, partitions)
    before = server.scrape()
    assert value(before, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 0
    produce(server.bootstrap, topic, 1200, partitions)
    middle = server.scrape()  # between two runs of the producer
    produce(server.bootstrap, topic, 800, partitions)
    after = server.scrape()

    def delta(name: str, a: Samples, b: Samples, **labels: str) -> float:
        return value(b, name, **labels) - value(a, name, **labels)

    messages = "kafka_server_brokertopicmetrics_messagesin_total"
    size = "kafka_server_brokertopicmetrics_bytesin_total"
    assert value(middle, messages, topic=topic) == 1200
    assert delta(messages, middle, after, topic=topic) == 800
    on_disk = server.log_bytes(topic, partitions)
    assert value(after, size, topic=topic) == on_disk
    logged = sum(
        value(after, "kafka_log_log_size", topic=topic, partition=str(p)) for p in range(partitions)
    )
    assert logged == on_disk
    # the all-topics sample moved by the same (no other topic was written meanwhile)
    assert delta(messages, before, after) == 2000
    assert delta(size, before, after) == on_disk
    requests = delta(
        "kafka_server_brokertopicmetrics_totalproducerequests_total", before, after, topic=topic
    )
    assert requests >= partitions
    assert (
        value(after, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic)
        == 0
    )


def test_a_consumer_moves_bytes_out_by_the_bytes_it_fetched(server: Served) -> None:
    topic, partitions = "fetched", 3
    server.create(topic, partitions)
    produce(server.bootstrap, topic, 3000, partitions)
    before = server.scrape()
    c = consumer(server.bootstrap, "fetcher")
    try:
        c.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
        consume_all(c, 3000)
        during = server.scrape()
    finally:
        c.close()
    out = "kafka_server_brokertopicmetrics_bytesout_total"
    assert value(during, out, topic=topic) == server.log_bytes(topic, partitions)
    assert value(during, out) - value(before, out) == server.log_bytes(topic, partitions)
    fetches = value(during, "kafka_server_brokertopicmetrics_totalfetchrequests_total", topic=topic)
    assert fetches >= partitions
    assert (
        value(during, "kafka_server_brokertopicmetrics_failedfetchrequests_total", topic=topic) == 0
    )
    assert value(during, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 3000


def test_lag_is_the_high_watermark_minus_the_committed_offset(server: Served) -> None:
    topic, partitions, group = "lagging", 2, "lag-group"
    server.create(topic, partitions)
    produce(server.bootstrap, topic, 1000, partitions)
    c = consumer(server.bootstrap, group)
    try:
        committed = {0: 120, 1: 500}
        c.commit(
            offsets=[confluent_kafka.TopicPartition(topic, p, o) for p, o in committed.items()],
            asynchronous=False,
        )
        highs = {
            p: c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), 10)[1]
            for p in range(partitions)
        }
    finally:
        c.close()
    assert highs == {0: 500, 1: 500}
    samples = server.scrape()
    for p, offset in committed.items():
        labels = {"consumergroup": group, "topic": topic, "partition": str(p)}
        assert value(samples, "kafka_consumergroup_current_offset", **labels) == offset
        assert value(samples, "kafka_consumergroup_lag", **labels) == highs[p] - offset


def test_request_latency_is_split_as_kafka_splits_it(server: Served) -> None:
    topic = "waited"
    server.create(topic, 1)
    before = server.scrape()
    c = consumer(server.bootstrap, "waiter")
    c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    try:  # nothing to read: each fetch waits fetch.wait.max.ms (500) in the purgatory
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            assert c.poll(0.2) is None
    finally:
        c.close()
    produce(server.bootstrap, topic, 10, 1)
    after = server.scrape()
    stages = (
        "requestqueuetimems",
        "localtimems",
        "remotetimems",
        "responsequeuetimems",
        "responsesendtimems",
    )
    for request in ("Produce", "Fetch", "Metadata"):
        name = "kafka_network_requestmetrics_"
        count = value(after, name + "totaltimems_count", request=request)
        requests = name + "requests_total"
        versions = sum(
            v
            for (n, labels), v in after.items()
            if n == requests and ("request", request) in labels
        )
        assert count == versions > 0
        for stage in stages:
            assert value(after, f"{name}{stage}_count", request=request) == count
        total = value(after, name + "totaltimems_sum", request=request)
        split = sum(value(after, f"{name}{stage}_sum", request=request) for stage in stages)
        assert split == pytest.approx(total, rel=1e-6)
        quantiles = [
            value(after, name + "totaltimems", request=request, quantile=q)
            for q in ("0.50", "0.75", "0.95", "0.98", "0.99", "0.999")
        ]
        assert quantiles == sorted(quantiles)
    remote = "kafka_network_requestmetrics_remotetimems_sum"
    waited = value(after, remote, request="Fetch") - value(before, remote, request="Fetch")
    assert waited >= 400  # at least one fetch waited (most of) its 500 ms in the purgatory
    assert value(after, remote, request="Metadata") == 0  # answered at once


def test_gauges_read_at_scrape_time(server: Served) -> None:
    topic = "gauged"
    flushes = "kafka_log_logflushstats_logflushrateandtimems_count"
    before = value(server.scrape(), flushes)
    server.create(topic, 2, **{"segment.bytes": "4096", "flush.messages": "1"})
    for _ in range(5):  # a batch per partition each time: 4 KiB segments roll
        produce(server.bootstrap, topic, 40, 2)
    samples = server.scrape()
    assert value(samples, flushes) - before >= 10  # each batch appended was flushed
    broker = server.served._brokers()[0]
    held = len(broker.replica_manager.partitions)
    assert value(samples, "kafka_server_replicamanager_partitioncount") == held
    assert value(samples, "kafka_server_replicamanager_leadercount") == held
    assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    for p in range(2):
        files = len(list((server.log_dir / f"{topic}-{p}").glob("*.log")))
        assert files > 1
        labels = {"topic": topic, "partition": str(p)}
        assert value(samples, "kafka_log_log_numlogsegments", **labels) == files
        assert value(samples, "kafka_log_log_logendoffset", **labels) == 100
        assert value(samples, "kafka_log_log_logstartoffset", **labels) == 0
    assert value(samples, "kafka_network_requestchannel_requestqueuesize") == 0
    for name in (
        "kafka_network_socketserver_networkprocessoravgidlepercent",
        "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
    ):
        assert 0.0 < value(samples, name) <= 1.0
    for op in ("Produce", "Fetch"):
        key = (
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            frozenset({("delayedOperation", op)}),
        )
        assert key in samples


def test_fetch_sessions_are_counted(server: Served) -> None:
    kafka = pytest.importorskip("kafka")
    topic = "sessions"
    server.create(topic, 3)
    produce(server.bootstrap, topic, 30, 3)
    c = kafka.KafkaConsumer(
        bootstrap_servers=server.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=50
    )
    try:
        c.assign([kafka.TopicPartition(topic, p) for p in range(3)])
        c.seek_to_beginning()
        got, deadline = 0, time.monotonic() + WAIT_S
        while got < 30 and time.monotonic() < deadline:
            got += sum(len(v) for v in c.poll(200).values())
        c.poll(200)  # an incremental fetch in the session
        assert got == 30
        samples = server.scrape()
    finally:
        c.close()
    prefix = "kafka_server_fetchsessioncache_"
    assert value(samples, prefix + "numincrementalfetchsessions") >= 1
    assert value(samples, prefix + "numincrementalfetchpartitionscached") >= 3
    assert (prefix + "incrementalfetchsessionevictions_total", frozenset()) in samples


def test_cleaner_metrics_follow_a_compacted_topic(server: Served) -> None:
    topic = "compacted"
    server.create(
        topic,
        1,
        **{
            "cleanup.policy": "compact",
            "segment.bytes": "2048",
            "min.cleanable.dirty.ratio": "0.01",
        },
    )
    for _ in range(5):  # a batch each time: 2 KiB segments roll, the closed ones are dirty
        produce(server.bootstrap, topic, 80, 1, key=lambda i: b"k%d" % (i % 5))
    deadline = time.monotonic() + CLEAN_WAIT_S
    samples = server.scrape()
    while value(samples, "kafkalog_logcleaner_bytesread_total") == 0:
        assert time.monotonic() < deadline, "the cleaner cleaned nothing"
        time.sleep(0.2)
        samples = server.scrape()
    assert value(samples, "kafkalog_logcleaner_byteswritten_total") > 0
    assert 0 <= value(samples, "kafka_log_logcleanermanager_max_dirty_percent") <= 100
    assert 0 <= value(samples, "kafka_log_logcleaner_time_since_last_run_ms") < 10_000


def test_metrics_are_off_by_default(tmp_path: Path) -> None:
    listeners = parse_listeners("PLAINTEXT://127.0.0.1:0")
    served = open_brokers(tmp_path / "d", BrokerConfig(), 1, listeners)
    try:
        lines = served.start_all()
        assert len(lines) == 1 and "metrics" not in lines[0]
        assert served._brokers()[0].replica_manager.topic_stats is None
        assert all(p.metrics is None for p in served.server(0).socket_server.processors)
    finally:
        served.shutdown()


def test_kafkalog_serve_metrics_port(tmp_path: Path) -> None:
    with ServeProcess(tmp_path / "d", "--metrics-port", "0", stderr=tmp_path / "err") as proc:
        line = proc.next_line(30)
        assert line.startswith("broker 0 metrics on http://127.0.0.1:"), line
        url = line.split(" on ")[1]
        produce(f"127.0.0.1:{proc.ports[0]}", "cli", 7, 1)
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
    assert 'kafka_server_brokertopicmetrics_messagesin_total{topic="cli"} 7.0' in text


def test_isr_shrink_and_expand_in_a_cluster_each_broker_on_its_own_endpoint(
    tmp_path: Path,
) -> None:
    brokers, topic = 3, "replicated"
    listeners = parse_listeners("PLAINTEXT://127.0.0.1:0")
    served = open_brokers(
        tmp_path / "c", BrokerConfig(), brokers, listeners, None, MetricsOptions(port=0)
    )
    try:
        lines = served.start_all()
        urls = [line.split(" on ")[1] for line in lines if " metrics on " in line]
        assert len(set(urls)) == brokers  # one registry and one port per broker
        ports = {i: served.server(i).endpoints[0].port for i in range(brokers)}
        node = Served(served, tmp_path, f"127.0.0.1:{ports[0]}", "")
        node.create(topic, 1, brokers, **{"min.insync.replicas": "1"})
        assert served.cluster is not None
        leader = served.cluster.describe_topic(topic).partitions[0].leader
        follower = next(b for b in range(brokers) if b != leader)
        at = dataclasses.replace(node, url=urls[leader])
        shrinks, expands = (
            "kafka_server_replicamanager_isrshrinks_total",
            "kafka_server_replicamanager_isrexpands_total",
        )
        under = "kafka_server_replicamanager_underreplicatedpartitions"
        first = at.scrape()
        assert (value(first, under), value(first, shrinks)) == (0, 0)
        led = [
            value(
                dataclasses.replace(node, url=u).scrape(), "kafka_server_replicamanager_leadercount"
            )
            for u in urls
        ]
        assert led == [1 if i == leader else 0 for i in range(brokers)]

        assert served.control(f"stop {follower}") == f"broker {follower} stopped"
        stopped = at.scrape()
        assert value(stopped, shrinks) == 1
        assert value(stopped, under) == 1
        assert served.control(f"start {follower}").startswith(f"broker {follower} listening")
        deadline = time.monotonic() + WAIT_S
        while value(samples := at.scrape(), expands) < 1:
            assert time.monotonic() < deadline, "the restarted follower never rejoined the ISR"
            time.sleep(0.1)
        assert value(samples, under) == 0
    finally:
        served.shutdown()
