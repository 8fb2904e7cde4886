"""A log dir in Kafka's tiered state (KIP-405) read with the store its broker tiers to: the
early segments only in the store (a real S3 server, the session's ``s3``), the checkpointed log
start offset below the first local segment, some tiered segments still local too. The read
(``remoteLogStorage``) returns every produced record once, exactly, batch and streaming, through
one FetchSource chaining the store and the dir; without the option, a query that needs the
store's offsets fails naming them and the option."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.fetch_source import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ByteCut,
)
from broker_embedded.storage.log_dir_fetch_source import LogDirSource
from broker_embedded.storage.object_store import StoreLocation
from broker_embedded.storage.object_store_fetch_source import ObjectStoreSource
from broker_embedded.storage.offset_checkpoint import (
    LOG_START_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from broker_embedded.storage.tiered_fetch_source import TieredSource
from broker_embedded.storage.topic_partition import TopicPartition
from tests.seaweedfs import S3Server

UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED
TOPIC = "tiered"
TP = TopicPartition(TOPIC, 0)
RECORDS = 120  # in batches of 3: about 14 segments of 1 KiB


@dataclass(frozen=True)
class TieredLogDir:
    """The log dir, its store's URI, the produced (offset, key, value) rows, and the first
    local offset (below it: only in the store)."""

    log_dir: Path
    uri: str
    rows: list[tuple[int, bytes, bytes]]
    local_start: int
    tiered_end: int  # the store's segments end here (at or past local_start)


def local_bases(log_dir: Path) -> list[int]:
    return sorted(int(p.name[:20]) for p in (log_dir / TP.dir_name).glob("*.log"))


def tiering(s3: S3Server, uri: str) -> BrokerConfig:
    rsm = (("location", uri), *s3.options().items())
    return BrokerConfig(
        remote_log_storage_system_enable=True,
        rsm_config=rsm,
        remote_log_manager_task_interval_ms=3_600_000,
    )


def produce_and_tier(broker: Broker, first: int, count: int, word: str = "value") -> list[tuple]:
    """``count`` records from offset ``first`` in batches of 3, then a copy pass and local
    retention; the (offset, key, value) rows."""
    rows = []
    for i in range(first, first + count, 3):
        batch = [
            (f"key-{j:04d}".encode(), f"{word} {j:04d} ".encode() * 4) for j in range(i, i + 3)
        ]
        broker.produce(TOPIC, 0, [ProducerRecord(v, key=k) for k, v in batch])
        rows += [(j, k, v) for j, (k, v) in zip(range(i, i + 3), batch, strict=True)]
    broker.remote_log_manager.run_once()
    broker.log_manager.get_log(TP).delete_old_segments()
    return rows


def build_tiered(s3: S3Server, log_dir: Path, uri: str) -> TieredLogDir:
    """The broker's remote log manager copies the closed segments to the store, local retention
    (``local.retention.bytes``) deletes the first ones locally, and the log start offset stays
    at the store's first offset (Kafka's checkpoint)."""
    with Broker(log_dir, config=tiering(s3, uri), create=True) as broker:
        broker.create_topic(
            TOPIC,
            config={
                "remote.storage.enable": "true",
                "segment.bytes": "1024",
                "local.retention.bytes": "2500",
            },
        )
        rows = produce_and_tier(broker, 0, RECORDS)
    bases = local_bases(log_dir)
    checkpoint = OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT)
    assert checkpoint.read()[TP] == 0  # Kafka's log start: the earliest offset in the store
    store = ObjectStoreSource(StoreLocation(uri, s3.settings)).open()
    tiered_end = store.list_offset(TP, LATEST_TIMESTAMP, UNCOMMITTED)
    store.close()
    assert 0 < bases[0] < tiered_end < RECORDS and len(bases) >= 3, (bases, tiered_end)
    return TieredLogDir(log_dir, uri, rows, bases[0], tiered_end)


@pytest.fixture(scope="module")
def tiered(s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> TieredLogDir:
    uri = f"s3://{s3.new_bucket('tiered-read')}/cluster/broker-0"
    return build_tiered(s3, tmp_path_factory.mktemp("tiered") / "logs", uri)


def fetched_batches(source, end: int, hw: int | None = None) -> list[tuple[int, int, int]]:
    """(base offset, last offset, CRC) of every batch from the log start to ``end`` (each
    fetch answering the high watermark ``hw`` when given)."""
    offset, seen = source.list_offset(TP, EARLIEST_TIMESTAMP, UNCOMMITTED), []
    while offset < end:
        fetched = source.fetch(TP, offset, 500, UNCOMMITTED)
        got = [
            (b.base_offset, b.last_offset, b.compute_crc()) for b in iter_batches(fetched.records)
        ]
        assert got and fetched.high_watermark == (hw or fetched.high_watermark), offset
        seen += [g for g in got if g[1] >= offset]
        offset = got[-1][1] + 1
    return seen


def test_one_source_reads_the_store_then_the_dir(s3: S3Server, tiered: TieredLogDir) -> None:
    store = ObjectStoreSource(StoreLocation(tiered.uri, s3.settings))
    source = TieredSource(LogDirSource(str(tiered.log_dir)), store).open()
    local = LogDirSource(str(tiered.log_dir)).open()
    assert local.tiered_offsets(TP) == (0, tiered.local_start)
    assert local.list_offset(TP, EARLIEST_TIMESTAMP, UNCOMMITTED) == tiered.local_start  # the dir
    assert source.list_offset(TP, EARLIEST_TIMESTAMP, UNCOMMITTED) == 0
    assert source.list_offset(TP, EARLIEST_LOCAL_TIMESTAMP, UNCOMMITTED) == tiered.local_start
    assert source.list_offset(TP, LATEST_TIMESTAMP, UNCOMMITTED) == RECORDS
    batches = fetched_batches(source, RECORDS, hw=RECORDS)
    assert [b[0] for b in batches] == list(range(0, RECORDS, 3))  # every batch once, in order
    remote = store.open()
    assert batches[: tiered.local_start // 3] == fetched_batches(remote, tiered.local_start)
    # bytes: the store's up to the first local offset, then the dir's, exactly
    store_bytes = remote.byte_cut(TP, 0, tiered.local_start, 1 << 40).size
    local_bytes = local.byte_cut(TP, tiered.local_start, RECORDS, 1 << 40).size
    whole = source.byte_cut(TP, 0, RECORDS, 1 << 40)
    assert whole.offset == RECORDS and whole.size == store_bytes + local_bytes
    # from offset 3, the store's bytes are one batch fewer: one more (the same size) fits after
    across = source.byte_cut(TP, 3, RECORDS, store_bytes)
    assert across == ByteCut(tiered.local_start + 3, store_bytes)
    one = source.byte_cut(TP, tiered.local_start - 3, RECORDS, store_bytes // 2)
    assert one.offset > tiered.local_start and one.size <= store_bytes // 2
    committed = source.fetch(TP, 3, 500, IsolationLevel.READ_COMMITTED)  # no transactions
    assert committed.records == source.fetch(TP, 3, 500, UNCOMMITTED).records
    assert committed.aborted_transactions == ()
    assert (committed.last_stable_offset, committed.high_watermark) == (RECORDS, RECORDS)
    cuts = source.byte_cuts(TP, 0, RECORDS, 600)
    assert tiered.local_start in cuts and cuts == sorted(set(cuts))
    assert cuts[: cuts.index(tiered.local_start)] == remote.byte_cuts(
        TP, 0, tiered.local_start, 600
    )
    for source_ in (source, local, remote):
        source_.close()


def rows_of(df) -> list[tuple[int, bytes, bytes]]:
    return sorted(
        (r.offset, bytes(r.key), bytes(r.value))
        for r in df.select("offset", "key", "value").collect()
    )


def test_spark_reads_every_record_once(spark, s3: S3Server, tiered: TieredLogDir) -> None:
    reader = (
        spark.read.format("kafkalog")
        .options(**s3.options())
        .option("subscribe", TOPIC)
        .option("remoteLogStorage", tiered.uri)
    )
    assert rows_of(reader.load(str(tiered.log_dir))) == tiered.rows
    pieces = (
        reader.option("maxBytesPerPartition", "2000")
        .option("packBytesPerPartition", "0")
        .load(str(tiered.log_dir))
    )
    store = ObjectStoreSource(StoreLocation(tiered.uri, s3.settings))
    with TieredSource(LogDirSource(str(tiered.log_dir)), store).open() as source:
        cuts = source.byte_cuts(TP, 0, RECORDS, 2000)
    assert tiered.local_start in cuts and len(cuts) >= 3  # cut on both sides of the split
    assert pieces.rdd.getNumPartitions() == len(cuts) + 1
    assert rows_of(pieces) == tiered.rows


@pytest.mark.slow  # three micro-batches of a streaming query: 10-20 s on a loaded machine
def test_a_stream_reads_every_record_once(
    spark, s3: S3Server, tiered: TieredLogDir, tmp_path: Path
) -> None:
    from tests.datasource.conftest import await_available_now

    collected: list[tuple[int, bytes, bytes]] = []

    def sink(df, _batch_id: int) -> None:
        collected.extend(
            (r.offset, bytes(r.key), bytes(r.value))
            for r in df.select("offset", "key", "value").collect()
        )

    q = (
        spark.readStream.format("kafkalog")
        .options(**s3.options())
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("remoteLogStorage", tiered.uri)
        .option("maxOffsetsPerTrigger", "45")
        .load(str(tiered.log_dir))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert await_available_now(q), "availableNow did not stop"
    assert q.exception() is None and len(q.recentProgress) == 3  # 45 + 45 + 30 offsets
    assert sorted(collected) == tiered.rows and len(collected) == RECORDS


def test_without_the_store_the_query_names_the_offsets_and_the_option(
    spark, tiered: TieredLogDir
) -> None:
    reader = spark.read.format("kafkalog").option("subscribe", TOPIC)
    with pytest.raises(Exception) as failed:
        reader.load(str(tiered.log_dir)).collect()
    start = tiered.local_start
    assert (
        f"OffsetsInRemoteStorageError: {TP}: offsets [0, {start}) of the range [0, {RECORDS}) "
        f"the query reads are only in remote storage (topic {TOPIC} tiers, "
        "remote.storage.enable=true; local retention deleted them from log dir "
        f"{tiered.log_dir}, which holds {TP} from offset {start}, and its log starts at 0): set "
        "the option remoteLogStorage to the store the broker tiers to (its rsm.config.location, "
        f"e.g. s3://bucket/prefix) to read them, or start {TP} at offset {start} or later"
    ) in str(failed.value)
    later = reader.option("startingOffsets", f'{{"{TOPIC}":{{"0":{start}}}}}')
    assert rows_of(later.load(str(tiered.log_dir))) == tiered.rows[start:]


def test_a_task_after_more_tiering_reads_what_went_from_the_store(
    s3: S3Server, tmp_path: Path
) -> None:
    """Planned, then the broker tiers more and local retention deletes it before the task
    runs: the task's split (its ListOffsets -4) is past the store's segments it was planned
    with. The fetch there is out of range, the reader opens the source again and lists the store
    again, and every row of the range is read (a fetch answering nothing there once ended the
    range early, the rows silently missing)."""
    from broker_embedded.errors import OffsetOutOfRangeError
    from datasource.kafka_input_partition import KafkaInputPartition
    from datasource.offset_range_reader import read_offset_range

    uri = f"s3://{s3.new_bucket('tiered-more')}/cluster/broker-0"
    built = build_tiered(s3, tmp_path / "logs", uri)
    store = ObjectStoreSource(StoreLocation(uri, s3.settings))
    planner = TieredSource(LogDirSource(str(built.log_dir)), store).open()
    planned_end = planner.remote.partition(TP).log_end_offset
    task = planner.task_source([TP])
    planner.close()
    with Broker(built.log_dir, config=tiering(s3, uri)) as broker:
        more = produce_and_tier(broker, RECORDS, 90, "more")
    source = task.open()
    try:
        assert source.split(TP).local_start > planned_end  # type: ignore[union-attr]
        with pytest.raises(OffsetOutOfRangeError, match="the broker tiered more since planning"):
            source.fetch(TP, planned_end, 1 << 20, UNCOMMITTED)
    finally:
        source.close()
    end = RECORDS + len(more)
    rows = [
        (o, k, v)
        for batch in read_offset_range(KafkaInputPartition(task, TOPIC, 0, 0, end))
        for o, k, v in zip(
            *(batch.column(c).to_pylist() for c in ("offset", "key", "value")), strict=True
        )
    ]
    assert rows == built.rows + more


def produce_transaction(producer, values: list[bytes], commit: bool) -> list[int]:
    """One transaction of ``values`` to :data:`TXN_TOPIC`, committed or aborted; the records'
    offsets."""
    offsets: list[int] = []
    producer.begin_transaction()
    for v in values:
        producer.produce(
            TXN_TOPIC, v, partition=0, on_delivery=lambda err, m: offsets.append(m.offset())
        )
    assert producer.flush(30) == 0
    (producer.commit_transaction if commit else producer.abort_transaction)(30)
    return offsets


TXN_TOPIC = "tiered-txn"
TXN_TP = TopicPartition(TXN_TOPIC, 0)


def txn_values(name: str, n: int) -> list[bytes]:
    return [f"{name} record {i} ".encode() * 4 for i in range(n)]


@pytest.mark.slow  # a transactional producer, a broker restart and four Spark reads: 15-25 s
def test_read_committed_skips_a_transaction_aborted_after_the_split(
    spark, s3: S3Server, tmp_path: Path
) -> None:
    """A transaction begun in segments that get tiered and aborted in the local log (its
    ``.txnindex`` entry local, not in the store), beside one committed and one aborted wholly
    in the store and one committed after: Spark's read_committed from the log dir and its
    store, and over the wire with ``remoteLogStorage=broker``, returns exactly what Kafka's
    read_committed consumer (confluent-kafka) reads from the broker, and what a read of the
    whole log kept local returns."""
    import shutil
    from dataclasses import replace

    from confluent_kafka import Producer

    from tests.broker_embedded.server._consume import consume
    from tests.broker_embedded.storage.test_remote_fetch import wire

    uri = f"s3://{s3.new_bucket('tiered-txn')}/cluster/broker-0"
    config = replace(tiering(s3, uri), num_network_threads=2, num_io_threads=2)
    logs, whole = tmp_path / "logs", tmp_path / "whole"
    with Broker(logs, config=config, create=True) as broker, wire(broker) as bootstrap:
        broker.create_topic(
            TXN_TOPIC,
            config={
                "remote.storage.enable": "true",
                "segment.bytes": "1024",
                "local.retention.ms": "0",
            },
        )
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": "straddle", "linger.ms": 0}
        )
        producer.init_transactions(30)
        first = produce_transaction(producer, txn_values("t0", 3), True)
        produce_transaction(producer, txn_values("t1", 3), False)  # aborted, tiered
        straddling = txn_values("t2", 9)
        producer.begin_transaction()
        for v in straddling[:6]:
            producer.produce(TXN_TOPIC, v, partition=0)
            assert producer.flush(30) == 0  # a batch each: over a segment or more
        broker.log_manager.get_log(TXN_TP).roll()  # its last records and marker stay local
        for v in straddling[6:]:
            producer.produce(TXN_TOPIC, v, partition=0)
            assert producer.flush(30) == 0
        producer.abort_transaction(30)
        last = produce_transaction(producer, txn_values("t3", 2), True)
        assert broker.controller.transaction_coordinator.wait_completed("straddle", 30)
        del producer  # closed before its broker
    shutil.copytree(logs, whole)  # the whole log, local (closed cleanly: its checkpoints)
    committed = txn_values("t0", 3) + txn_values("t3", 2)

    def spark_rows(reader, path: Path | None = None) -> list[tuple[int, bytes]]:
        reader = reader.option("subscribe", TXN_TOPIC)
        df = reader.option("kafka.isolation.level", "read_committed").load(path and str(path))
        return sorted((r.offset, bytes(r.value)) for r in df.select("offset", "value").collect())

    local_rows = spark_rows(spark.read.format("kafkalog"), whole)
    assert [v for _, v in local_rows] == committed
    assert [o for o, _ in local_rows] == first + last
    with Broker(logs, config=config) as broker, wire(broker) as bootstrap:
        unified = broker.log_manager.get_log(TXN_TP)
        broker.remote_log_manager.run_once()
        unified.delete_old_segments()
        split = unified.local_log_start_offset
        t2_first = first[-1] + 6  # after t0's 3 records, its marker, t1's batch and marker
        assert unified.log_start_offset == 0 < t2_first < split < last[0], (t2_first, split)
        assert [v for _, _, v, _, _ in consume(bootstrap, TXN_TOPIC, 1, "read_committed")] == (
            committed
        )
        wire_rows = spark_rows(
            spark.read.format("kafkalog")
            .options(**s3.options())
            .option("kafka.bootstrap.servers", bootstrap)
            .option("remoteLogStorage", "broker")
        )
    store = ObjectStoreSource(StoreLocation(uri, s3.settings))
    with TieredSource(LogDirSource(str(logs)), store).open() as source:
        fetched = source.fetch(TXN_TP, t2_first, 1 << 20, IsolationLevel.READ_COMMITTED)
        assert [first for _, first in fetched.aborted_transactions] == [t2_first]
    tiered_rows = spark_rows(
        spark.read.format("kafkalog").options(**s3.options()).option("remoteLogStorage", uri), logs
    )
    assert wire_rows == tiered_rows == local_rows
