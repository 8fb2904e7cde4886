"""A cluster read over the protocol with its tiered part read from the store (KIP-405): the
broker names its store in DescribeConfigs (``rsm.config.location``; secrets sensitive, without
their values), and with ``remoteLogStorage=broker`` the source reads [ListOffsets -2, -4) from
the store (a real S3 server, the session's ``s3``) and only the local tail over the wire."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.client.kafka_client import KafkaClient
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.record.records import iter_batches
from broker_embedded.server.handlers import broker_server
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.fetch_source import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ByteCut,
)
from broker_embedded.storage.tiered_fetch_source import TieredFetchSource
from broker_embedded.storage.topic_partition import TopicPartition
from datasource.errors import InvalidOptionError
from datasource.kafka_offset_reader import source_of
from datasource.kafka_source_options import KafkaSourceOptions
from tests.seaweedfs import S3Server

UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED
TOPIC = "tiered-wire"
TP = TopicPartition(TOPIC, 0)
RECORDS = 90


@dataclass(frozen=True)
class TieredCluster:
    bootstrap: str
    uri: str
    rows: list[tuple[int, bytes, bytes]]
    local_start: int


@pytest.fixture(scope="module")
def cluster(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TieredCluster]:
    """One broker serving a topic whose first segments local retention deleted once tiered."""
    uri = f"s3://{s3.new_bucket('tiered-wire')}/cluster/broker-0"
    rsm = (("location", uri), *s3.options().items())
    config = BrokerConfig(
        remote_log_storage_system_enable=True,
        rsm_config=rsm,
        remote_log_manager_task_interval_ms=3_600_000,
        num_network_threads=2,
        num_io_threads=2,
    )
    rows = []
    log_dir = tmp_path_factory.mktemp("tiered-wire") / "logs"
    with Broker(log_dir, config=config, create=True) as broker:
        tiered = {
            "remote.storage.enable": "true",
            "segment.bytes": "1024",
            "local.retention.ms": "0",
        }
        broker.create_topic(TOPIC, config=tiered)
        for i in range(0, RECORDS, 3):
            batch = [
                (f"key-{j:04d}".encode(), f"value {j:04d} ".encode() * 4) for j in range(i, i + 3)
            ]
            broker.produce(TOPIC, 0, [ProducerRecord(v, key=k) for k, v in batch])
            rows += [(j, k, v) for j, (k, v) in zip(range(i, i + 3), batch, strict=True)]
        broker.remote_log_manager.run_once()
        broker.log_manager.get_log(TP).delete_old_segments(broker.clock_ms() + 1000)
        local_start = broker.list_offsets(TOPIC, 0, EARLIEST_LOCAL_TIMESTAMP).offset
        assert broker.list_offsets(TOPIC, 0, EARLIEST_TIMESTAMP).offset == 0 < local_start
        server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"])
        server.start()
        try:
            endpoint = server.endpoints[0]
            yield TieredCluster(f"{endpoint.host}:{endpoint.port}", uri, rows, local_start)
        finally:
            server.shutdown(5.0)


def test_the_broker_names_its_store_and_hides_its_secrets(cluster: TieredCluster) -> None:
    with KafkaClient(cluster.bootstrap) as client:
        configs = {
            c.name: c.value
            for c in client.broker_configs(client.broker_ids()[0])
            if c.name.startswith("rsm.config.")
        }
    assert configs["rsm.config.location"] == cluster.uri
    assert configs["rsm.config.fs.s3a.path.style.access"] == "true"
    assert configs["rsm.config.fs.s3a.access.key"] is None  # sensitive: listed, no value
    assert configs["rsm.config.fs.s3a.secret.key"] is None


def batches(source, start: int, end: int) -> list[int]:
    offset, seen = start, []
    while offset < end:
        got = [
            b
            for b in iter_batches(source.fetch(TP, offset, 400, UNCOMMITTED).records)
            if b.last_offset >= offset
        ]
        assert got, offset
        seen += [b.base_offset for b in got]
        offset = got[-1].last_offset + 1
    return seen


def test_the_tiered_part_comes_from_the_store(s3: S3Server, cluster: TieredCluster) -> None:
    options = {
        "kafka.bootstrap.servers": cluster.bootstrap,
        "subscribe": TOPIC,
        "remoteLogStorage": "broker",
        "fs.s3a.access.key": s3.options()["fs.s3a.access.key"],
        "fs.s3a.secret.key": s3.options()["fs.s3a.secret.key"],
    }
    descriptor = source_of(KafkaSourceOptions.parse(options))
    assert descriptor.remote.store.uri == cluster.uri  # type: ignore[attr-defined]
    source = descriptor.open()
    assert isinstance(source, TieredFetchSource)
    try:
        assert [
            source.list_offset(TP, w, UNCOMMITTED)
            for w in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, LATEST_TIMESTAMP)
        ] == [0, cluster.local_start, RECORDS]
        assert source.split(TP) is not None
        assert batches(source, 0, RECORDS) == list(range(0, RECORDS, 3))
        stored = source.remote.byte_cut(TP, 0, cluster.local_start, 1 << 40).size
        assert source.byte_cut(TP, 0, RECORDS, 1 << 40) == ByteCut(RECORDS, stored)  # wire: 0
    finally:
        source.close()


def test_spark_reads_every_record_once(spark, s3: S3Server, cluster: TieredCluster) -> None:
    df = (
        spark.read.format("kafkalog")
        .options(**s3.options())
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", TOPIC)
        .option("remoteLogStorage", "broker")
        .load()
    )
    got = sorted(
        (r.offset, bytes(r.key), bytes(r.value))
        for r in df.select("offset", "key", "value").collect()
    )
    assert got == cluster.rows


def test_a_cluster_that_tiers_nowhere_is_named(tmp_path: Path) -> None:
    with Broker(tmp_path / "l", create=True) as broker:
        broker.create_topic("plain")
        server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"])
        server.start()
        try:
            e = server.endpoints[0]
            options = {
                "kafka.bootstrap.servers": f"{e.host}:{e.port}",
                "subscribe": "plain",
                "remoteLogStorage": "broker",
            }
            with pytest.raises(InvalidOptionError) as refused:
                source_of(KafkaSourceOptions.parse(options))
        finally:
            server.shutdown(5.0)
    assert str(refused.value) == (
        f"option remoteLogStorage=broker: Kafka cluster {e.host}:{e.port}: the brokers' "
        "rsm.config.location (DescribeConfigs) must name one store to read tiered segments "
        "from; broker 0: none"
    )


@pytest.mark.slow  # a kafkalog serve child tiering and deleting locally: 5-15 s
def test_spark_reads_kafkalog_serve_s_tiered_topic(spark, s3: S3Server, tmp_path: Path) -> None:
    """End to end: ``kafkalog serve`` with ``[rsm_config]`` tiers a topic's closed segments and
    local retention deletes them; Spark asks it where the store is and reads every record."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.broker_embedded.storage.test_remote_log_manager import (
        TIERED,
        produce,
        wait_for,
        write_broker_config,
    )
    from tests.spark_kafkalog._serve_proc import ServeProcess

    uri = f"s3://{s3.new_bucket('tiered-serve')}/cluster/broker-0"
    config = write_broker_config(tmp_path / "broker.toml", uri, s3.options())
    config.write_text(
        config.read_text().replace(
            "[rsm_config]", '"log.retention.check.interval.ms" = 100\n\n[rsm_config]'
        )
    )
    with ServeProcess(
        tmp_path / "logs", "--broker-config", config, stderr=tmp_path / "serve.err"
    ) as serve:
        admin = AdminClient({"bootstrap.servers": serve.bootstrap})
        topic = NewTopic("tiered", 1, 1, config={**TIERED, "local.retention.ms": "0"})
        admin.create_topics([topic])["tiered"].result(30)
        produce(serve.bootstrap, 0, 40)
        with KafkaClient(serve.bootstrap) as client:

            def local_start() -> int:
                return client.list_offset("tiered", 0, EARLIEST_LOCAL_TIMESTAMP)

            wait_for("local retention of tiered segments", lambda: local_start() >= 20)
            first_local = local_start()
            assert client.list_offset("tiered", 0, EARLIEST_TIMESTAMP) == 0
        df = (
            spark.read.format("kafkalog")
            .options(**s3.options())
            .option("kafka.bootstrap.servers", serve.bootstrap)
            .option("subscribe", "tiered")
            .option("remoteLogStorage", "broker")
            .load()
        )
        got = sorted((r.offset, bytes(r.value)) for r in df.select("offset", "value").collect())
        assert serve.terminate() == 0
    assert got == [(i, f"record {i:03d} ".encode() * 8) for i in range(40)]
    assert 20 <= first_local < 40  # the first 20 and more were read from the store


def transactional_producers(bootstrap: str, *ids: str) -> list:
    """A confluent-kafka producer per transactional id, its transactions initialised."""
    from confluent_kafka import Producer

    producers = [
        Producer({"bootstrap.servers": bootstrap, "transactional.id": i, "linger.ms": 0})
        for i in ids
    ]
    for p in producers:
        p.init_transactions(30)
    return producers


@pytest.mark.parametrize("peer", ["kafka39", "kafkalog"])
def test_a_read_committed_fetch_names_a_transaction_begun_below_its_offset(
    peer: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """What the tiered source relies on to learn the aborted transactions whose markers are
    local (tiered_fetch_source.py): a read_committed Fetch answers those overlapping what it
    returned, also one begun below the fetch offset (Kafka's collectAbortedTransactions takes
    those whose marker is at or past it). Asked of Apache Kafka 3.9 and of kafkalog's server."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from broker_embedded.client.wire_fetch_source import WireSource

    topic = f"begun-below-{peer}"
    with contextlib.ExitStack() as stack:
        if peer == "kafka39":
            bootstrap = request.getfixturevalue("kafka39").bootstrap
        else:
            broker = stack.enter_context(Broker(tmp_path / "l", create=True))
            server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"])
            server.start()
            stack.callback(server.shutdown, 5.0)
            bootstrap = f"{server.endpoints[0].host}:{server.endpoints[0].port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        a, b = transactional_producers(bootstrap, f"{topic}-a", f"{topic}-b")
        for p in (a, b):
            p.begin_transaction()
        for i in range(4):
            a.produce(topic, f"aborted {i}".encode(), partition=0)
            assert a.flush(30) == 0  # a batch each, offsets 0 to 3
        b.produce(topic, b"open", partition=0)
        assert b.flush(30) == 0  # offset 4, its transaction open: the last stable offset
        a.abort_transaction(30)  # its marker at 5
        tp = TopicPartition(topic, 0)
        committed = IsolationLevel.READ_COMMITTED
        with WireSource(bootstrap).open() as source:
            uncommitted = source.fetch(tp, 0, 1 << 20, UNCOMMITTED)
            pid = next(iter_batches(uncommitted.records)).producer_id
            fetched = source.fetch(tp, 2, 1, committed)
            at_lso = source.fetch(tp, 4, 1 << 20, committed)
            lso = source.list_offset(tp, LATEST_TIMESTAMP, committed)
        b.abort_transaction(30)
    assert lso == 4
    assert [b.base_offset for b in iter_batches(fetched.records)] == [2]
    assert fetched.aborted_transactions == ((pid, 0),)
    # at the last stable offset: no records, and no aborted transactions (Kafka's LocalLog.read
    # answers its empty read), though A overlaps it: the tiered source asks below the split then
    assert (at_lso.records, at_lso.aborted_transactions) == (b"", ())


def test_brokers_naming_different_stores_are_refused_naming_each(
    s3: S3Server, tmp_path: Path
) -> None:
    """Three brokers of one cluster: broker 1 tiers to another prefix, broker 2 to the same
    location at another endpoint (another store). ``remoteLogStorage=broker`` fails at load
    naming each broker and its store, not reading one of them as if it held every segment."""
    from broker_embedded.replication.controller import Controller
    from broker_embedded.server.broker_server import BrokerServer
    from broker_embedded.server.handlers import register_all
    from broker_embedded.server.handlers.api_context import ApiContext, Node

    bucket = s3.new_bucket("stores")
    endpoint = s3.options()["fs.s3a.endpoint"]
    stores = {
        0: (f"s3://{bucket}/c", endpoint),
        1: (f"s3://{bucket}/other", endpoint),
        2: (f"s3://{bucket}/c", "http://127.0.0.1:9"),
    }
    controller = Controller(store=tmp_path / "controller.json")
    servers: dict[int, BrokerServer] = {}

    def nodes() -> tuple[Node, ...]:
        return tuple(
            Node(i, s.endpoints[0].host, s.endpoints[0].port, None)
            for i, s in sorted(servers.items())
        )

    with contextlib.ExitStack() as stack:
        for i, (uri, at) in stores.items():
            rsm = (("location", uri), *{**s3.options(), "fs.s3a.endpoint": at}.items())
            config = BrokerConfig(
                remote_log_storage_system_enable=True,
                rsm_config=rsm,
                remote_log_manager_task_interval_ms=3_600_000,
            )
            broker = stack.enter_context(
                Broker(
                    tmp_path / f"b{i}",
                    broker_id=i,
                    config=config,
                    controller=controller,
                    create=True,
                )
            )
            ctx = ApiContext.of(broker, nodes)
            server = BrokerServer(
                config, ["PLAINTEXT://127.0.0.1:0"], lambda apis, ctx=ctx: register_all(apis, ctx)
            )
            servers[i] = server.start()
            stack.callback(server.shutdown, 5.0)
        bootstrap = f"127.0.0.1:{servers[0].endpoints[0].port}"
        options = {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": TOPIC,
            "remoteLogStorage": "broker",
        }
        with pytest.raises(InvalidOptionError) as refused:
            source_of(KafkaSourceOptions.parse(options))
    at = endpoint.partition("://")[2] or endpoint
    assert str(refused.value) == (
        f"option remoteLogStorage=broker: Kafka cluster {bootstrap}: the brokers tier to "
        "different stores (rsm.config.location and rsm.config.fs.s3a.endpoint, "
        f"DescribeConfigs): broker 0: s3://{bucket}/c at endpoint {at}, broker 1: "
        f"s3://{bucket}/other at endpoint {at}, broker 2: s3://{bucket}/c at endpoint "
        "127.0.0.1:9; each broker copies the segments of the partitions it leads to its own "
        "store, so a partition's tiered segments may be in several: give every broker the "
        "same store, or read one store with remoteLogStorage=<its URI> and its fs.s3a.* "
        "options (a partition whose tiered offsets it does not hold fails naming them)"
    )


def test_read_committed_at_a_split_the_last_stable_offset_stops_at(
    s3: S3Server, tmp_path: Path
) -> None:
    """Transaction A begins in a segment that gets tiered; B begins at the split and stays
    open; A is aborted after B began: the last stable offset is the split, so a read_committed
    fetch there answers no records (and no aborted transactions). The tiered source then asks
    the broker's own read at the offset before the split, which collects A from its local log
    (Kafka's RemoteLogManager.read): A's records in the store are skipped."""
    from dataclasses import replace

    from tests.broker_embedded.storage.test_remote_fetch import wire
    from tests.datasource.test_tiered_read import tiering

    uri = f"s3://{s3.new_bucket('tiered-lso')}/cluster/broker-0"
    tp = TopicPartition("lso-split", 0)
    config = replace(tiering(s3, uri), num_network_threads=2, num_io_threads=2)
    with Broker(tmp_path / "l", config=config, create=True) as broker, wire(broker) as bootstrap:
        broker.create_topic(
            tp.topic,
            config={
                "remote.storage.enable": "true",
                "segment.bytes": "1024",
                "local.retention.ms": "0",
            },
        )
        a, b = transactional_producers(bootstrap, "lso-a", "lso-b")
        a.begin_transaction()
        for i in range(3):
            a.produce(tp.topic, f"a {i} ".encode() * 8, partition=0)
            assert a.flush(30) == 0
        unified = broker.log_manager.get_log(tp)
        unified.roll()
        split = unified.log_end_offset
        b.begin_transaction()
        b.produce(tp.topic, b"b, open", partition=0)
        assert b.flush(30) == 0
        a.abort_transaction(30)
        assert broker.controller.transaction_coordinator.wait_completed("lso-a", 30)
        broker.remote_log_manager.run_once()
        unified.delete_old_segments()
        assert unified.local_log_start_offset == split
        options = {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": tp.topic,
            "remoteLogStorage": "broker",
            **s3.options(),
        }
        with source_of(KafkaSourceOptions.parse(options)).open() as source:
            committed = IsolationLevel.READ_COMMITTED
            assert source.list_offset(tp, LATEST_TIMESTAMP, committed) == split
            fetched = source.fetch(tp, 0, 1 << 20, committed)
        pid = next(iter_batches(fetched.records)).producer_id
        assert fetched.aborted_transactions == ((pid, 0),)
        del a, b
