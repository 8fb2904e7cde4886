"""The Fetch API over the wire: raw kio Fetch requests of several versions against a real broker on
a tmp log dir, each answer compared whole with the kio response expected (records equal to the
segment file's bytes): offsets, KIP-74 byte limits, isolation levels with aborted transactions,
Kafka's error codes and -1 offsets for errors, unknown topic ids."""

from __future__ import annotations

import uuid

import pytest

from broker_embedded.broker import Broker
from tests.broker_embedded._broker_util import log_bytes
from tests.broker_embedded.server._fetch import (
    decode,
    expected,
    fetch_request,
    fetch_server,
    partition_data,
)
from tests.broker_embedded.server._net import RawClient

VERSIONS = [4, 5, 7, 11, 12, 13, 15, 16, 17, 18]
MB = 1 << 20


def topic_key(broker: Broker, name: str, version: int) -> str | uuid.UUID:
    return broker.describe_topic(name).topic_id if version >= 13 else name


def fill(broker: Broker, topic: str, partition: int, batches: int, size: int = 100) -> list[int]:
    """``batches`` batches of 3 records of ``size`` bytes; the byte length of each batch."""
    before = len(log_bytes(broker, topic, partition))
    lengths = []
    for i in range(batches):
        broker.produce(topic, partition, [bytes([i]) * size] * 3)
        now = len(log_bytes(broker, topic, partition))
        lengths.append(now - before)
        before = now
    return lengths


@pytest.mark.parametrize("version", VERSIONS)
def test_fetch_versions_answer_exactly(broker, version):
    broker.create_topic("t", 2)
    fill(broker, "t", 0, 3)
    fill(broker, "t", 1, 1)
    key = topic_key(broker, "t", version)
    with fetch_server(broker) as (server, api), RawClient(server) as c:
        request = fetch_request(version, [(key, [(0, 3, MB, -1), (1, 0, MB, -1)])])
        got = decode(version, c.call(request))
        want = expected(
            version,
            [
                (
                    key,
                    [
                        partition_data(
                            version,
                            0,
                            hw=9,
                            lso=9,
                            log_start=0,
                            records=log_bytes(broker, "t", 0)[len(log_bytes(broker, "t", 1)) :],
                        ),
                        partition_data(
                            version, 1, hw=3, lso=3, log_start=0, records=log_bytes(broker, "t", 1)
                        ),
                    ],
                )
            ],
        )
        assert got == want
        assert api.pins.open == 0 or _settles(api)


def _settles(api) -> bool:
    import time

    deadline = time.monotonic() + 5
    while api.pins.open and time.monotonic() < deadline:
        time.sleep(0.01)
    return api.pins.open == 0


@pytest.mark.parametrize("version", [4, 12, 13, 18])
def test_errors_carry_kafkas_codes_and_unknown_offsets(broker, version):
    broker.create_topic("t", 1)
    fill(broker, "t", 0, 2)
    epoch = broker.describe_topic("t").partitions[0].leader_epoch
    key = topic_key(broker, "t", version)
    with fetch_server(broker) as (server, _), RawClient(server) as c:
        if version >= 9:  # current leader epoch (KIP-320)
            parts = [(0, 100, MB, -1), (0, 0, MB, epoch + 1)]
            got = decode(version, c.call(fetch_request(version, [(key, parts)])))
            # the same partition twice: the last parameters win, at the first position
            assert got == expected(version, [(key, [partition_data(version, 0, error=75)])])
        got = decode(version, c.call(fetch_request(version, [(key, [(0, 100, MB, -1)])])))
        assert got == expected(version, [(key, [partition_data(version, 0, error=1)])])
        if epoch > 0 and version >= 9:
            got = decode(version, c.call(fetch_request(version, [(key, [(0, 0, MB, epoch - 1)])])))
            assert got == expected(version, [(key, [partition_data(version, 0, error=74)])])
        if version >= 13:
            unknown = uuid.uuid4()
            got = decode(version, c.call(fetch_request(version, [(unknown, [(0, 0, MB, -1)])])))
            # Kafka answers the partitions it refuses before reading with an empty (not null)
            # aborted transactions list (tests/differential: fetch_epochs)
            want = [(unknown, [partition_data(version, 0, error=100, aborted=())])]
            assert got == expected(version, want)
        else:
            got = decode(version, c.call(fetch_request(version, [("nope", [(0, 0, MB, -1)])])))
            want = [("nope", [partition_data(version, 0, error=3, aborted=())])]
            assert got == expected(version, want)
            got = decode(version, c.call(fetch_request(version, [("t", [(-1, 0, MB, -1)])])))
            want = [("t", [partition_data(version, -1, error=3, aborted=())])]
            assert got == expected(version, want)
        # a follower's fetch over the wire: this project replicates in-process
        got = decode(
            version, c.call(fetch_request(version, [(key, [(0, 0, MB, -1)])], replica_id=1))
        )
        assert got == expected(version, [(key, [partition_data(version, 0, error=6)])])


@pytest.mark.parametrize("version", [4, 12, 15])
def test_kip74_byte_limits(broker, version):
    broker.create_topic("t", 3)
    sizes0 = fill(broker, "t", 0, 3, size=1000)
    fill(broker, "t", 1, 2, size=1000)
    fill(broker, "t", 2, 2, size=10)
    logs = [log_bytes(broker, "t", p) for p in range(3)]
    t = topic_key(broker, "t", version)
    with fetch_server(broker) as (server, _), RawClient(server) as c:
        # max_bytes below the first batch: partition 0 still returns exactly one whole batch,
        # the others nothing (no budget left)
        parts = [(0, 0, MB, -1), (1, 0, MB, -1), (2, 0, MB, -1)]
        got = decode(version, c.call(fetch_request(version, [(t, parts)], max_bytes=10)))
        want = [
            partition_data(version, 0, hw=9, lso=9, log_start=0, records=logs[0][: sizes0[0]]),
            partition_data(version, 1, hw=6, lso=6, log_start=0),
            partition_data(version, 2, hw=6, lso=6, log_start=0),
        ]
        assert got == expected(version, [(t, want)])
        # partition max bytes below a batch: the first partition with data gets one batch,
        # a later one whose first batch does not fit gets none, a small one fits whole
        parts = [(0, 0, 10, -1), (1, 0, 10, -1), (2, 0, MB, -1)]
        got = decode(version, c.call(fetch_request(version, [(t, parts)])))
        want[2] = partition_data(version, 2, hw=6, lso=6, log_start=0, records=logs[2])
        assert got == expected(version, [(t, want)])
        # a budget that ends inside a batch: the records end after the last whole batch (Kafka
        # would send the cut batch's first bytes too, which the client drops)
        for cut in (sizes0[0] + 50, sizes0[0] + sizes0[1] - 1):
            got = decode(version, c.call(fetch_request(version, [(t, [(0, 0, cut, -1)])])))
            whole = logs[0][: sizes0[0]]
            want0 = partition_data(version, 0, hw=9, lso=9, log_start=0, records=whole)
            assert got == expected(version, [(t, [want0])])
        cut = sizes0[0] + sizes0[1]
        got = decode(version, c.call(fetch_request(version, [(t, [(0, 0, cut, -1)])])))
        want0 = partition_data(version, 0, hw=9, lso=9, log_start=0, records=logs[0][:cut])
        assert got == expected(version, [(t, [want0])])


def test_a_byte_limit_ends_the_records_after_the_last_whole_batch(broker):
    """Many small batches of varied sizes (sparse offset index entries): for every limit, the
    records are the segment bytes up to the last batch end at or below it, found here by
    walking the batch length fields of the file."""
    broker.create_topic("t", 1)
    for i in range(300):
        broker.produce("t", 0, [bytes([i % 256]) * (7 * i % 90)] * (1 + i % 4))
    log = log_bytes(broker, "t", 0)
    ends, at = [], 0
    while at < len(log):
        at += 12 + int.from_bytes(log[at + 8 : at + 12], "big")
        ends.append(at)
    assert at == len(log)
    with fetch_server(broker) as (server, _), RawClient(server) as c:
        for limit in [*range(ends[0], len(log) + 1, 997), ends[5], ends[5] + 1, len(log)]:
            got = decode(12, c.call(fetch_request(12, [("t", [(0, 0, limit, -1)])])))
            want = log[: max(e for e in ends if e <= limit)]
            assert got.responses[0].partitions[0].records == want, limit


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16])
def test_read_committed_returns_the_aborted_transactions(broker, version):
    broker.create_topic("t", 1)
    fill(broker, "t", 0, 1)
    txp = broker.transactional_producer("tx-1")
    txp.begin()
    aborted_at = txp.send("t", 0, [b"a", b"b"]).base_offset
    txp.abort()
    txp.begin()
    txp.send("t", 0, [b"c"])
    txp.commit()
    txp.begin()
    txp.send("t", 0, [b"open"])  # an open transaction: the LSO stops before it
    log = log_bytes(broker, "t", 0)
    hw = broker.list_offsets("t", 0, -1).offset
    lso = broker.list_offsets("t", 0, -1, "read_committed").offset
    assert lso < hw
    below_lso = len(log) - len(log_bytes_after(broker, lso))
    key = topic_key(broker, "t", version)
    with fetch_server(broker) as (server, _), RawClient(server) as c:
        got = decode(
            version, c.call(fetch_request(version, [(key, [(0, 0, MB, -1)])], isolation=1))
        )
        want = partition_data(
            version,
            0,
            hw=hw,
            lso=lso,
            log_start=0,
            aborted=((txp.producer_id, aborted_at),),
            records=log[:below_lso],
        )
        assert got == expected(version, [(key, [want])])
        got = decode(version, c.call(fetch_request(version, [(key, [(0, 0, MB, -1)])])))
        want = partition_data(version, 0, hw=hw, lso=lso, log_start=0, records=log)
        assert got == expected(version, [(key, [want])])
    txp.abort()


def log_bytes_after(broker: Broker, offset: int) -> bytes:
    """The log's bytes from the batch holding ``offset`` on (one segment)."""
    from broker_embedded.storage.topic_partition import TopicPartition

    lg = broker.log_manager.get_log(TopicPartition("t", 0))
    assert lg is not None
    return lg.read(
        offset,
        1 << 30,
        __import__(
            "broker_embedded.storage.fetch_data_info", fromlist=["FetchIsolation"]
        ).FetchIsolation.LOG_END,
    ).records
