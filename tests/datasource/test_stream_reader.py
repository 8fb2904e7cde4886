"""``spark.readStream.format("kafkalog")``: real streaming queries on the session's SparkSession
over log dirs owned by a running embedded broker in this process (it publishes its high
watermarks every ~100 ms; the queries only read the files), plus the planner's pieces called
directly where a query would hide them (fair shares, byte cuts, initial offsets, deleted topics).

Queries are short: triggers of 100-200 ms, ``availableNow`` where the data is known up front,
every wait polled with a deadline. Sinks the test can inspect: foreachBatch (it runs in this
process) collecting rows by batch id, and the progress of each batch (start and end offsets).
Tests taking ``open_stream`` run twice: over the log dir, and over the Kafka protocol from a
server in front of the same broker."""

from __future__ import annotations

import bisect
import json
import logging
import random
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
)
from pyspark.sql.types import StructType

from broker_embedded.broker import Broker
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.server.handlers import broker_server
from broker_embedded.storage.topic_partition import TopicPartition
from datasource.errors import DataLossError, KafkaSourceError
from datasource.kafka_input_partition import ranges_of
from datasource.kafka_offset_reader import KafkaOffsetReader
from datasource.kafka_source_options import KafkaSourceOptions
from datasource.kafka_stream_reader import (
    KafkaStreamReader,
    fair_shares,
    offsets_json,
    parse_offsets_json,
)
from datasource.kafkalog_data_source import KafkaLogDataSource
from tests.broker_embedded.server._net import config as server_config
from tests.datasource._logdirs import T0, batch_bounds

NO_RETENTION = {"retention.ms": -1, "retention.bytes": -1}
STREAM_SCHEMA_JSON = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": n, "type": t, "nullable": True, "metadata": {}}
            for n, t in [
                ("key", "binary"),
                ("value", "binary"),
                ("topic", "string"),
                ("partition", "integer"),
                ("offset", "long"),
                ("timestamp", "timestamp"),
                ("timestampType", "integer"),
            ]
        ],
    }
)


# -- helpers -----------------------------------------------------------------------------------


@pytest.fixture
def broker(tmp_path: Path):
    b = Broker(tmp_path / "logdir", create=True)
    yield b
    b.close()


@pytest.fixture(params=["logdir", "wire"])
def location(request, broker: Broker) -> Iterator[dict[str, str]]:
    """The options that say where to read: ``broker``'s log dir, or the Kafka protocol from a
    server in front of the same broker (127.0.0.1, port 0)."""
    if request.param == "logdir":
        yield {"path": str(broker.log_dir)}
        return
    server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"], server_config())
    server.start()
    try:
        yield {"kafka.bootstrap.servers": f"127.0.0.1:{server.endpoints[0].port}"}
    finally:
        server.shutdown(5.0)


@pytest.fixture
def open_stream(spark, location: dict[str, str]):
    """``open_stream(**options)``: a streaming DataFrame over :func:`location`."""
    return lambda **options: (
        spark.readStream.format("kafkalog").options(**location, **options).load()
    )


def publish(broker: Broker) -> None:
    """Write the checkpoint files now instead of within the next ~100 ms."""
    broker.log_manager.checkpoint()


def produce(broker: Broker, topic: str, partition: int, values: list[bytes], **kw) -> None:
    broker.produce(topic, partition, [ProducerRecord(v, timestamp=T0) for v in values], **kw)


def stream(spark, broker: Broker, **options: str):
    return spark.readStream.format("kafkalog").options(**options).load(str(broker.log_dir))


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


class Batches:
    """A foreachBatch sink: the rows ``(topic, partition, offset, value)`` of each batch id, in
    the order Spark gave them. A batch id given again (a replay after a failure) must bring the
    same rows: a deterministic sink keeps one copy. ``hooks[batch_id]`` runs after a batch is
    stored (the first time), in this process: a place to produce or to fail on purpose."""

    def __init__(self) -> None:
        self.rows: dict[int, list[tuple]] = {}
        self.calls: list[int] = []
        self.replays_differ: list[int] = []
        self.hooks: dict[int, Callable[[], None]] = {}

    def __call__(self, df, batch_id: int) -> None:
        cols = df.select("topic", "partition", "offset", "value").collect()
        rows = [(r.topic, r.partition, r.offset, bytes(r.value)) for r in cols]
        self.calls.append(batch_id)
        if batch_id in self.rows:
            if self.rows[batch_id] != rows:
                self.replays_differ.append(batch_id)
            return
        self.rows[batch_id] = rows
        hook = self.hooks.pop(batch_id, None)
        if hook is not None:
            hook()

    def all_rows(self) -> list[tuple]:
        return [row for b in sorted(self.rows) for row in self.rows[b]]

    def count(self) -> int:
        return sum(len(r) for r in self.rows.values())

    def per_partition(self) -> dict[tuple[str, int], list[int]]:
        """The offsets of each partition in the order they arrived (batch id, then row)."""
        out: dict[tuple[str, int], list[int]] = {}
        for topic, partition, offset, _ in self.all_rows():
            out.setdefault((topic, partition), []).append(offset)
        return out


def start(df, sink, checkpoint: Path, **trigger):
    return (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def finished(query, timeout: float) -> bool:
    """Whether ``query`` terminated within ``timeout`` s (failed or not)."""
    try:
        return query.awaitTermination(timeout)
    except StreamingQueryException:
        return True


def ends_of(query, topic: str) -> list[tuple[int, ...]]:
    """The end offsets of ``topic``'s partitions after each batch that read something."""
    out = []
    for p in query.recentProgress:
        if p.numInputRows:
            end = json.loads(p.sources[0].endOffset)[topic]
            out.append(tuple(end[k] for k in sorted(end, key=int)))
    return out


def reader_for(broker: Broker, **options: str) -> KafkaStreamReader:
    """The stream reader Spark would make for these options, called directly."""
    if "kafka.bootstrap.servers" not in options:
        options = {"path": str(broker.log_dir), **options}
    return KafkaStreamReader(KafkaSourceOptions.parse(options, streaming=True))


def ranges(partitions) -> list[tuple[str, int, int, int]]:
    """The planned ranges of the tasks (packed or not), in task order."""
    return [(p.topic, p.partition, p.start, p.end) for t in partitions for p in ranges_of(t)]


# -- the pieces, directly ------------------------------------------------------------------------


def test_fair_shares_rules() -> None:
    # everything when it fits; keys without a lag are left out
    assert fair_shares({"a": 3, "b": 0, "c": 2}, 10) == {"a": 3, "c": 2}
    # one each, then in proportion to the rest; the odd unit to the largest remainder
    assert fair_shares({"a": 30, "b": 10, "c": 2}, 7) == {"a": 4, "b": 2, "c": 1}
    # a hot partition does not starve a small one
    assert fair_shares({"hot": 10**9, "small": 1}, 100) == {"hot": 99, "small": 1}
    # fewer units than keys: the turn says who goes, round robin
    lags = {"a": 50, "b": 50, "c": 50}
    assert [sorted(fair_shares(lags, 2, turn=t)) for t in range(3)] == [
        ["a", "b"],
        ["b", "c"],
        ["a", "c"],
    ]
    # steps (a batch's bytes): while the budget allows, the key whose turn it is in any case
    assert fair_shares({"a": 400, "b": 900}, 300, first={"a": 100, "b": 900}) == {"a": 300}
    assert fair_shares({"a": 400, "b": 900}, 300, first={"a": 100, "b": 900}, turn=1) == {"b": 900}
    rng = random.Random(5)
    for _ in range(500):
        lags = {k: rng.choice([0, 1, 2, 7, 100, 10**6]) for k in range(rng.randint(1, 6))}
        budget = rng.randint(1, 300)
        shares = fair_shares(lags, budget, turn=rng.randint(0, 9))
        assert sum(shares.values()) == min(budget, sum(lags.values()))
        assert all(0 < shares[k] <= lags[k] for k in shares)
        lagging = [k for k in lags if lags[k]]
        if budget >= len(lagging):
            assert sorted(shares) == lagging  # everyone with a backlog moves


def test_offsets_json_is_sparks_and_canonical() -> None:
    offsets = {TopicPartition("b", 10): 7, TopicPartition("a", 2): 5, TopicPartition("b", 9): 1}
    as_json = offsets_json(offsets)
    assert json.dumps(as_json) == '{"a": {"2": 5}, "b": {"9": 1, "10": 7}}'
    assert parse_offsets_json(json.loads(json.dumps(as_json))) == offsets
    for bad in ({"a": 3}, {"a": {"x": 1}}, {"a": {"0": -4}}, {"a": {"0": "5"}}):
        with pytest.raises(KafkaSourceError, match="not kafkalog offsets"):
            parse_offsets_json(bad)


def expected_cut(bounds, start: int, end: int, budget: int, min_one: bool) -> tuple[int, int]:
    """``KafkaOffsetReader.byte_cut`` worked out from the batch framing: whole batches from the
    one holding ``start`` up to the one starting at ``end`` (or the log end), while they fit."""
    bases = [base for base, _ in bounds]
    first = bisect.bisect_right(bases, start) - 1
    stop = bases.index(end) if end in bases else len(bases)
    cut, used = start, 0
    for j in range(first, stop):
        if used + bounds[j][1] > budget and not (min_one and j == first):
            return cut, used
        used += bounds[j][1]
        cut = bases[j + 1] if j + 1 < len(bases) else end
    return end, used


def test_byte_cut_follows_the_batches(source_log_dir: Path) -> None:
    bounds = batch_bounds(source_log_dir, "events", 0)  # several segments, every codec
    bases = [base for base, _ in bounds]
    tp = TopicPartition("events", 0)
    rng = random.Random(7)
    with KafkaOffsetReader(source_log_dir, "read_uncommitted") as offsets:
        log_end = offsets.source.view(tp).log_end_offset
        assert len(set(bases)) == len(bases) > 30 and log_end > bases[-1]
        for _ in range(300):
            i = rng.randrange(len(bounds) - 1)
            start = bases[i] + rng.choice([0, 0, 1])  # a batch start, or inside the batch
            end = rng.choice([log_end, bases[rng.randrange(i + 1, len(bases))]])
            budget = rng.choice([0, 1, 500, 3000, 20_000, 10**9])
            for min_one in (False, True):
                got = offsets.byte_cut(tp, start, end, budget, min_one_batch=min_one)
                assert got == expected_cut(bounds, start, end, budget, min_one), (
                    start,
                    end,
                    budget,
                    min_one,
                )
        assert offsets.log_bytes(tp, bases[3], bases[9]) == sum(s for _, s in bounds[3:9])


def test_initial_offsets_and_options(broker: Broker) -> None:
    broker.create_topic("a", 2, config=NO_RETENTION)
    broker.produce("a", 0, [ProducerRecord(b"x", timestamp=T0 + i) for i in range(5)])
    produce(broker, "a", 1, [b"y"] * 3)  # at T0
    publish(broker)
    latest = reader_for(broker, subscribe="a")
    assert latest.initialOffset() == {"a": {"0": 5, "1": 3}}
    produce(broker, "a", 1, [b"z"])  # Spark asks again for batch 0's start: the same answer
    publish(broker)
    assert latest.initialOffset() == {"a": {"0": 5, "1": 3}}
    assert reader_for(broker, subscribe="a").initialOffset() == {"a": {"0": 5, "1": 4}}
    early = reader_for(broker, subscribe="a", startingOffsets="earliest")
    assert early.initialOffset() == {"a": {"0": 0, "1": 0}}
    assert isinstance(early.getDefaultReadLimit(), ReadAllAvailable)
    specific = reader_for(
        broker,
        assign='{"a":[1,0]}',
        maxBytesPerTrigger="1m",
        startingOffsets='{"a":{"0":2,"1":-1}}',
    )
    assert specific.initialOffset() == {"a": {"0": 2, "1": 4}}
    assert specific.getDefaultReadLimit() == ReadMaxBytes(1 << 20)
    stamped = reader_for(
        broker,
        subscribe="a",
        startingTimestamp=str(T0 + 2),
        startingOffsetsByTimestampStrategy="latest",
    )
    assert stamped.initialOffset() == {"a": {"0": 2, "1": 4}}  # a-1 has nothing that late
    assert reader_for(
        broker, subscribe="a", maxOffsetsPerTrigger="9", minOffsetsPerTrigger="3"
    ).getDefaultReadLimit() == ReadMaxRows(9)
    assert reader_for(
        broker, subscribe="a", minOffsetsPerTrigger="3", maxTriggerDelay="2s"
    ).getDefaultReadLimit() == ReadMinRows(3)
    # a start past the high watermark: data loss, as in Spark
    past = '{"a":{"0":9,"1":0}}'
    with pytest.raises(DataLossError, match=r"offset 9 of a-0, past its high watermark 5"):
        reader_for(broker, subscribe="a", startingOffsets=past).initialOffset()
    lenient = reader_for(broker, subscribe="a", startingOffsets=past, failOnDataLoss="false")
    assert lenient.initialOffset() == {"a": {"0": 5, "1": 0}}  # a-1 asked for 0
    # the data source makes it, checking the streaming options and the schema
    source = KafkaLogDataSource({"path": str(broker.log_dir), "subscribe": "a"})
    schema = StructType.fromJson(json.loads(STREAM_SCHEMA_JSON))
    assert isinstance(source.streamReader(schema), KafkaStreamReader)
    bad = KafkaLogDataSource(
        {"path": str(broker.log_dir), "subscribe": "a", "endingOffsets": "latest"}
    )
    with pytest.raises(ValueError, match="endingOffsets.*batch queries"):
        bad.streamReader(schema)


def test_deleted_topic_is_data_loss(broker: Broker, caplog, location: dict[str, str]) -> None:
    for topic in ("keep", "gone"):
        broker.create_topic(topic, 1, config=NO_RETENTION)
        produce(broker, topic, 0, [b"v"] * 4)
    publish(broker)
    strict = reader_for(broker, subscribe="keep,gone", startingOffsets="earliest", **location)
    lenient = reader_for(
        broker,
        subscribe="keep,gone",
        startingOffsets="earliest",
        failOnDataLoss="false",
        **location,
    )
    start = strict.initialOffset()
    assert start == {"gone": {"0": 0}, "keep": {"0": 0}}
    broker.delete_topic("gone")
    produce(broker, "keep", 0, [b"w"])
    publish(broker)
    end = strict.latestOffset(start, ReadAllAvailable())
    assert end == {"keep": {"0": 5}}  # the deleted partition is left out ...
    assert strict.reportLatestOffset() == {"keep": {"0": 5}}
    with pytest.raises(DataLossError, match=r"gone-0 is gone .*offsets from 0 on"):
        strict.partitions(start, end)  # ... and its batch reports it
    with caplog.at_level(logging.WARNING):
        assert ranges(lenient.partitions(start, end)) == [("keep", 0, 0, 5)]
    assert "gone-0 is gone" in caplog.text


def test_delete_records_below_the_start_is_data_loss(broker: Broker, caplog) -> None:
    broker.create_topic("t", 1, config=NO_RETENTION)
    produce(broker, "t", 0, [b"v"] * 10)
    publish(broker)
    strict = reader_for(broker, subscribe="t", maxOffsetsPerTrigger="100")
    start = {"t": {"0": 4}}  # the query has read offsets below 4
    broker.delete_records("t", 0, 7)
    publish(broker)
    end = strict.latestOffset(start, strict.getDefaultReadLimit())
    assert end == {"t": {"0": 10}}
    with pytest.raises(DataLossError, match=r"t-0: .* offsets \[4, 7\) were deleted"):
        strict.partitions(start, end)
    lenient = reader_for(broker, subscribe="t", failOnDataLoss="false")
    with caplog.at_level(logging.WARNING):
        assert ranges(lenient.partitions(start, end)) == [("t", 0, 7, 10)]
    assert "offsets [4, 7) were deleted" in caplog.text


# -- real queries ----------------------------------------------------------------------------------


def test_max_offsets_per_trigger_available_now(
    spark, broker: Broker, tmp_path: Path, open_stream
) -> None:
    broker.create_topic("m", 3, config=NO_RETENTION)
    for p, n in enumerate((12, 4, 1)):
        produce(broker, "m", p, [b"m%d-%d" % (p, i) for i in range(n)])
    publish(broker)
    sink = Batches()

    def late() -> None:  # after the run's target was taken: not read by this run
        produce(broker, "m", 0, [b"late"] * 3)
        publish(broker)

    sink.hooks[0] = late
    df = open_stream(subscribe="m", startingOffsets="earliest", maxOffsetsPerTrigger="5")
    q = start(df, sink, tmp_path / "ck", availableNow=True)
    assert finished(q, 60), "availableNow did not stop"
    assert q.exception() is None
    # 17 offsets shared out as Spark's rateLimit does: 5 * 12/17 = 3.5 down, 5 * 4/17 = 1.2
    # down, 5 * 1/17 up (never starved); then 5 * 9/12 = 3.75 and 5 * 3/12 = 1.25 down, ...
    assert ends_of(q, "m") == [(3, 1, 1), (6, 2, 1), (9, 3, 1), (12, 4, 1)]
    assert [len(sink.rows[b]) for b in sorted(sink.rows)] == [5, 4, 4, 4]
    assert sink.per_partition() == {
        ("m", 0): list(range(12)),
        ("m", 1): list(range(4)),
        ("m", 2): [0],
    }
    # progress shows how far behind the query is: the late records are there, not read
    assert json.loads(q.recentProgress[-1].sources[0].latestOffset) == {
        "m": {"0": 15, "1": 4, "2": 1}
    }


def test_max_bytes_per_trigger_available_now(spark, broker: Broker, tmp_path: Path) -> None:
    broker.create_topic("b", 3, config=NO_RETENTION)
    for i in range(9):
        produce(broker, "b", 0, [b"%03d" % i + b"x" * 97] * 3)
    for i in range(2):
        produce(broker, "b", 1, [b"%03d" % i + b"y" * 97] * 3)
    produce(broker, "b", 2, [b"z" * 1000] * 10)  # one batch larger than the limit
    publish(broker)
    bounds = {p: batch_bounds(broker.log_dir, "b", p) for p in range(3)}
    size = bounds[0][0][1]
    assert {s for p in (0, 1) for _, s in bounds[p]} == {size}
    assert bounds[2][0][1] > 4 * size
    limit = 3 * size + size // 2
    sink = Batches()
    df = stream(
        spark, broker, subscribe="b", startingOffsets="earliest", maxBytesPerTrigger=str(limit)
    )
    q = start(df, sink, tmp_path / "ck", availableNow=True)
    assert finished(q, 60), "availableNow did not stop"
    assert q.exception() is None
    # fair_shares over bytes, turn by turn: b-0 and b-1 get their first batches and share the
    # rest while b-2's batch does not fit; then b-2's turn comes: its batch alone; then b-0
    assert ends_of(q, "b") == [(6, 3, 0), (12, 6, 0), (21, 6, 0), (21, 6, 10), (27, 6, 10)]
    for b, rows in sink.rows.items():  # whole batches, at most `limit` bytes unless one batch
        read = {(p, o) for _, p, o, _ in rows}
        taken = [s for p in range(3) for base, s in bounds[p] if (p, base) in read]
        assert sum(taken) <= limit or len(taken) == 1, (b, taken)
    assert sink.per_partition() == {
        ("b", 0): list(range(27)),
        ("b", 1): list(range(6)),
        ("b", 2): list(range(10)),
    }


def test_min_offsets_per_trigger_waits_for_data_or_the_delay(
    spark, broker: Broker, tmp_path: Path
) -> None:
    broker.create_topic("lo", 2, config=NO_RETENTION)
    produce(broker, "lo", 0, [b"a"] * 4)
    publish(broker)
    # warm the executors' Python workers first: the timing below assumes batches of ~1 s
    assert (
        spark.read.format("kafkalog").option("subscribe", "lo").load(str(broker.log_dir)).count()
        == 4
    )
    sink = Batches()
    df = stream(
        spark,
        broker,
        subscribe="lo",
        startingOffsets="earliest",
        minOffsetsPerTrigger="10",
        maxTriggerDelay="4s",
    )
    q = start(df, sink, tmp_path / "ck", processingTime="100 milliseconds")
    try:
        wait_until(lambda: sink.count() == 4, 30, "the first batch (never delayed)")
        produce(broker, "lo", 1, [b"b"] * 6)  # 6 < 10: no batch for now
        time.sleep(0.6)
        assert sink.count() == 4
        produce(broker, "lo", 0, [b"c"] * 4)  # 10 new offsets: a batch
        t_enough = time.monotonic()
        wait_until(lambda: sink.count() == 14, 10, "a batch once 10 offsets are there")
        assert [len(r) for r in sink.rows.values()] == [4, 10]
        produce(broker, "lo", 1, [b"d"] * 3)  # 3 < 10: only once the delay passed
        while time.monotonic() < t_enough + 3.5:  # the last batch ran after t_enough
            assert sink.count() == 14
            time.sleep(0.1)
        wait_until(lambda: sink.count() == 17, 10, "a batch after maxTriggerDelay")
    finally:
        q.stop()
    assert q.exception() is None
    assert [len(r) for r in sink.rows.values()] == [4, 10, 3]
    # (the loop above proved the small batch waited; recentProgress keeps only the last 100
    # progress updates, which idle 100 ms triggers push the first batches out of)


def test_producer_thread_exactly_once_across_restarts(
    spark, broker: Broker, tmp_path: Path, open_stream
) -> None:
    """Records arrive while the query runs; the query is stopped and restarted with another
    startingOffsets (the checkpoint wins), then fails inside a batch and is restarted (the
    batch is replayed with the same offsets): every record once, in order per partition."""
    broker.create_topic("live", 3, config={**NO_RETENTION, "segment.bytes": 4000})
    per_partition, stop = 100, threading.Event()

    def producer() -> None:
        for i in range(per_partition):
            for p in range(3):
                produce(broker, "live", p, [b"%d-%d" % (p, i)])
            time.sleep(0.01)
            if stop.is_set():
                return

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    sink, ck = Batches(), tmp_path / "ck"

    def run(starting: str):
        df = open_stream(subscribe="live", startingOffsets=starting, maxOffsetsPerTrigger="60")
        return start(df, sink, ck, processingTime="200 milliseconds")

    try:
        q = run("earliest")
        wait_until(lambda: len(sink.rows) >= 2, 30, "two batches")
        q.stop()
        seen = sink.count()

        def fail() -> None:
            raise RuntimeError("killed on purpose after writing the batch")

        sink.hooks[max(sink.rows) + 1] = fail  # a batch id that run 1 did not write
        q = run("latest")  # ignored: the checkpoint says where to go on
        assert finished(q, 30)
        assert "killed on purpose" in str(q.exception())
        q = run("latest")
        thread.join(30)
        wait_until(lambda: sink.count() >= 3 * per_partition, 30, "every record")
        time.sleep(0.5)  # nothing more may come
    finally:
        stop.set()
        q.stop()
    assert seen > 0 and q.exception() is None
    assert sink.replays_differ == []
    assert len(sink.calls) > len(sink.rows)  # the failed batch was given again
    for p in range(3):
        assert sink.per_partition()[("live", p)] == list(range(per_partition))
    values = {(p, o): v for _, p, o, v in sink.all_rows()}
    assert all(values[(p, o)] == b"%d-%d" % (p, o) for p, o in values)
    assert all(len(rows) <= 60 for rows in sink.rows.values())


def test_new_partitions_and_pattern_topics_start_at_earliest(
    spark, broker: Broker, tmp_path: Path
) -> None:
    broker.create_topic("pat-a", 1, config=NO_RETENTION)
    broker.create_topic("other", 1, config=NO_RETENTION)
    produce(broker, "pat-a", 0, [b"old"] * 5)  # before the start (latest, the default)
    publish(broker)
    sink = Batches()
    df = stream(spark, broker, subscribePattern="pat-.*")
    q = start(df, sink, tmp_path / "ck", processingTime="100 milliseconds")
    try:
        wait_until(lambda: q.lastProgress is not None, 30, "the first trigger")
        produce(broker, "pat-a", 0, [b"a-new"] * 3)
        broker.create_partitions("pat-a", 2)
        produce(broker, "pat-a", 1, [b"a1"] * 2)
        broker.create_topic("pat-b", 2, config=NO_RETENTION)
        produce(broker, "pat-b", 1, [b"b1"] * 4)
        produce(broker, "other", 0, [b"no"] * 2)
        wait_until(lambda: sink.count() >= 9, 30, "the new partitions and topic")
        produce(broker, "pat-b", 0, [b"b0"])
        wait_until(lambda: sink.count() >= 10, 30, "pat-b-0")
        time.sleep(0.3)
    finally:
        q.stop()
    assert q.exception() is None
    assert sink.per_partition() == {
        ("pat-a", 0): [5, 6, 7],
        ("pat-a", 1): [0, 1],
        ("pat-b", 0): [0],
        ("pat-b", 1): [0, 1, 2, 3],
    }


def test_retention_deleting_unread_data(spark, broker: Broker, tmp_path: Path) -> None:
    """A query reads to offset 10 and stops; retention deletes segments past 10 before it runs
    again: with failOnDataLoss=true the restarted query fails naming the partition and the lost
    offsets, with false (same checkpoint, copied) it goes on from the new log start offset."""
    broker.create_topic(
        "r", 1, config={"segment.bytes": 600, "retention.bytes": 1500, "retention.ms": -1}
    )
    for i in range(10):
        produce(broker, "r", 0, [b"%03d" % i + b"r" * 60])
    publish(broker)
    sink = Batches()

    def run(checkpoint: Path, fail_on_data_loss: str):
        df = stream(
            spark,
            broker,
            subscribe="r",
            startingOffsets="earliest",
            failOnDataLoss=fail_on_data_loss,
        )
        q = start(df, sink, checkpoint, availableNow=True)
        assert finished(q, 60)
        return q

    assert run(tmp_path / "ck", "true").exception() is None
    assert sink.per_partition() == {("r", 0): list(range(10))}
    shutil.copytree(tmp_path / "ck", tmp_path / "ck-lenient")
    for i in range(10, 60):  # more data, and retention deletes some before it is read
        produce(broker, "r", 0, [b"%03d" % i + b"r" * 60])
    assert broker.log_manager.cleanup_logs() > 0
    publish(broker)
    with KafkaOffsetReader(broker.log_dir, "read_uncommitted") as offsets:
        log_start = offsets.earliest(TopicPartition("r", 0))
    assert 10 < log_start < 60

    message = str(run(tmp_path / "ck", "true").exception())
    assert "r-0: the query had read it up to offset 10" in message
    assert f"offsets [10, {log_start}) were deleted before they were read" in message
    assert sink.count() == 10

    assert run(tmp_path / "ck-lenient", "false").exception() is None
    assert sink.per_partition() == {("r", 0): [*range(10), *range(log_start, 60)]}


def test_read_committed_never_shows_aborted_or_open_transactions(
    spark, broker: Broker, tmp_path: Path
) -> None:
    broker.create_topic("tx", 1, config=NO_RETENTION)
    sink = Batches()
    df = stream(
        spark,
        broker,
        subscribe="tx",
        startingOffsets="earliest",
        **{"kafka.isolation.level": "read_committed"},
    )
    q = start(df, sink, tmp_path / "ck", processingTime="100 milliseconds")

    def values() -> list[bytes]:
        return [v for *_, v in sink.all_rows()]

    try:
        produce(broker, "tx", 0, [b"plain-1"])
        open_txn = broker.transactional_producer("open")
        open_txn.begin()
        open_txn.send("tx", 0, [ProducerRecord(b"open-1")])
        produce(broker, "tx", 0, [b"plain-2"])  # behind the open transaction: held back
        aborted = broker.transactional_producer("aborted")
        aborted.begin()
        aborted.send("tx", 0, [ProducerRecord(b"aborted-1"), ProducerRecord(b"aborted-2")])
        wait_until(lambda: values() == [b"plain-1"], 30, "the records below the open txn")
        time.sleep(0.6)
        assert values() == [b"plain-1"]
        aborted.abort()
        open_txn.send("tx", 0, [ProducerRecord(b"open-2")])
        open_txn.commit()
        produce(broker, "tx", 0, [b"plain-3"])
        wait_until(lambda: b"plain-3" in values(), 30, "everything after the commit")
    finally:
        q.stop()
    assert q.exception() is None
    assert values() == [b"plain-1", b"open-1", b"plain-2", b"open-2", b"plain-3"]


def test_over_the_wire_one_client_serves_every_trigger_and_commit(broker: Broker) -> None:
    """A streaming query's planning and ``commitOffsetsToGroup`` go through one client, connected
    once and kept across triggers (as Spark's Kafka source keeps its admin client); Spark's copy
    for the executors carries no socket, and ``stop`` closes it."""
    import pickle

    from broker_embedded.client.kafka_client import KafkaClient

    broker.create_topic("w", 2, config=NO_RETENTION)
    server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"], server_config())
    server.start()
    bootstrap = f"127.0.0.1:{server.endpoints[0].port}"
    try:
        reader = reader_for(
            broker,
            subscribe="w",
            startingOffsets="earliest",
            commitOffsetsToGroup="wg",
            **{"kafka.bootstrap.servers": bootstrap},
        )
        start = reader.initialOffset()
        assert parse_offsets_json(start) == {TopicPartition("w", 0): 0, TopicPartition("w", 1): 0}
        client = reader._client
        sockets = {a: c._sock for a, c in client._connections.items()}
        assert sockets
        for n in range(1, 4):
            produce(broker, "w", n % 2, [b"x"] * n)
            end = reader.latestOffset(start, ReadAllAvailable())
            assert len(reader.partitions(start, end)) == 1
            reader.commit(end)
            start = end
        assert parse_offsets_json(start) == {TopicPartition("w", 0): 2, TopicPartition("w", 1): 4}
        assert reader._client is client
        assert {a: c._sock for a, c in client._connections.items()} == sockets
        with KafkaClient(bootstrap) as other:
            assert other.committed_offsets("wg") == {("w", 0): 2, ("w", 1): 4}
        assert pickle.loads(pickle.dumps(reader))._client is None
        reader.stop()
        assert reader._client is None and all(s.fileno() == -1 for s in sockets.values())
    finally:
        server.shutdown(5.0)
