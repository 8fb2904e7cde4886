"""Produce over the wire: real clients (confluent-kafka, kafka-python, aiokafka) and raw kio
requests against a real Broker behind a real BrokerServer on 127.0.0.1; what reached the log
is read back from the log dir with kafka-python after the server is shut down."""

from __future__ import annotations

import asyncio
import datetime
import struct

import confluent_kafka
import pytest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v6 import request as req6
from kio.schema.produce.v9 import request as req9
from kio.schema.produce.v9 import response as resp9

from broker_embedded.common.producer_record import ProducerRecord, build_batch
from broker_embedded.record.compression import CompressionType
from tests.broker_embedded.server._net import RawClient, request_frame
from tests.broker_embedded.server._serve import decode_response, log_batches, log_records, served

TIMEOUT_S = 10
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
NOW_MS = 1_700_000_000_000


def confluent_produce(bootstrap: str, topic: str, records, **conf) -> list:
    """Produce (partition, key, value, headers) tuples; the delivery reports, in order."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    reports: list = []
    for partition, key, value, headers in records:
        producer.produce(
            topic,
            value,
            key,
            partition=partition,
            headers=list(headers),
            on_delivery=lambda e, m: reports.append((e, m.partition(), m.offset())),
        )
    assert producer.flush(TIMEOUT_S) == 0
    return reports


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_confluent_idempotent_producer_every_codec(tmp_path, codec):
    sent = [
        (
            i % 2,
            b"key-%d" % i,
            b"%s value %d " % (codec.encode(), i) * (i + 1),
            (("h", b"v%d" % i), ("n", b"")),
        )
        for i in range(40)
    ]
    with served(tmp_path) as s:
        s.broker.create_topic("t", 2)
        reports = confluent_produce(
            s.bootstrap,
            "t",
            sent,
            **{
                "compression.type": codec,
                "enable.idempotence": True,
                "acks": "all",
            },
        )
    assert all(e is None for e, _, _ in reports)
    for partition in (0, 1):
        expected = [(k, v, h) for p, k, v, h in sent if p == partition]
        offsets = sorted(o for _, p, o in reports if p == partition)
        assert offsets == list(range(len(expected)))
        on_disk = log_records(tmp_path, "t", partition)
        assert [(k, v, tuple(h)) for _, k, v, h in on_disk] == expected
        assert [o for o, *_ in on_disk] == offsets
        batches = log_batches(tmp_path, "t", partition)
        assert {b.compression for b in batches} == {CODECS[codec]}
        assert {b.producer_id for b in batches} == {0}  # the first id the broker handed out
        assert batches[0].base_sequence == 0


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_acks(tmp_path, acks):
    sent = [(0, None, b"v%d" % i, ()) for i in range(10)]
    with served(tmp_path) as s:
        s.broker.create_topic("a")
        reports = confluent_produce(s.bootstrap, "a", sent, acks=acks)
    assert [e for e, _, _ in reports] == [None] * 10
    expected_offsets = [None] * 10 if acks == "0" else list(range(10))  # acks=0: no offsets
    assert [o for _, _, o in reports] == expected_offsets
    assert [(k, v) for _, k, v, _ in log_records(tmp_path, "a", 0)] == [
        (None, b"v%d" % i) for i in range(10)
    ]


def test_kafka_python_producer(tmp_path):
    from kafka import KafkaProducer

    with served(tmp_path) as s:
        s.broker.create_topic("kp")
        producer = KafkaProducer(
            bootstrap_servers=s.bootstrap,
            acks="all",
            compression_type="gzip",
            request_timeout_ms=TIMEOUT_S * 1000,
        )
        futures = [
            producer.send(
                "kp", key=b"k%d" % i, value=b"v%d" % i, partition=0, headers=[("h", b"%d" % i)]
            )
            for i in range(20)
        ]
        offsets = [f.get(timeout=TIMEOUT_S).offset for f in futures]
        producer.close(timeout=TIMEOUT_S)
    assert offsets == list(range(20))
    assert log_records(tmp_path, "kp", 0) == [
        (i, b"k%d" % i, b"v%d" % i, (("h", b"%d" % i),)) for i in range(20)
    ]


def test_aiokafka_producer(tmp_path):
    from aiokafka import AIOKafkaProducer

    async def produce(bootstrap: str) -> list[int]:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            compression_type="lz4",
            request_timeout_ms=TIMEOUT_S * 1000,
        )
        await producer.start()
        try:
            metas = [
                await producer.send_and_wait("ak", b"v%d" % i, key=b"k%d" % i, partition=0)
                for i in range(15)
            ]
        finally:
            await producer.stop()
        return [m.offset for m in metas]

    with served(tmp_path) as s:
        s.broker.create_topic("ak")
        offsets = asyncio.run(asyncio.wait_for(produce(s.bootstrap), TIMEOUT_S * 3))
    assert offsets == list(range(15))
    assert log_records(tmp_path, "ak", 0) == [(i, b"k%d" % i, b"v%d" % i, ()) for i in range(15)]


# -- errors, with raw requests ---------------------------------------------------------------


def batch(n: int = 3, **kw) -> bytes:
    return build_batch([ProducerRecord(value=b"x%d" % i) for i in range(n)], now_ms=NOW_MS, **kw)


def produce9(client: RawClient, topic: str, records: bytes, acks: int = -1, partition: int = 0):
    message = req9.ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=5),
        topic_data=(
            req9.TopicProduceData(
                name=topic,
                partition_data=(req9.PartitionProduceData(index=partition, records=records),),
            ),
        ),
    )
    response = decode_response(resp9.ProduceResponse, client.call(message), True)
    (topic_response,) = response.responses
    (p,) = topic_response.partition_responses
    return p


def test_produce_errors(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("e", config={"max.message.bytes": "200"})
        s.broker.create_topic("isr", config={"min.insync.replicas": "2"})
        corrupt = bytearray(batch())
        corrupt[-1] ^= 0xFF  # a record byte: the CRC no longer matches
        two = batch() + batch()
        with RawClient(s.server) as c:
            ok = produce9(c, "e", batch())
            assert (ok.error_code, ok.base_offset, ok.log_start_offset) == (ErrorCode.none, 0, 0)
            assert ok.log_append_time is None  # CreateTime topic
            cases = {
                "unknown topic": (
                    produce9(c, "nope", batch()),
                    ErrorCode.unknown_topic_or_partition,
                ),
                "partition 5": (
                    produce9(c, "e", batch(), partition=5),
                    ErrorCode.unknown_topic_or_partition,
                ),
                "bad acks": (produce9(c, "e", batch(), acks=2), ErrorCode.invalid_required_acks),
                "too large": (
                    produce9(c, "e", build_batch([b"y" * 300], now_ms=NOW_MS)),
                    ErrorCode.message_too_large,
                ),
                "corrupt": (produce9(c, "e", bytes(corrupt)), ErrorCode.corrupt_message),
                "two batches": (produce9(c, "e", two), ErrorCode.invalid_record),
                "truncated": (produce9(c, "e", batch()[:-4]), ErrorCode.invalid_record),
                "min isr": (produce9(c, "isr", batch()), ErrorCode.not_enough_replicas),
            }
            for name, (p, code) in cases.items():
                assert p.error_code == code, name
                assert p.base_offset == -1, name
                assert p.error_message, name
            assert produce9(c, "isr", batch(), acks=1).error_code == ErrorCode.none
    assert [o for o, *_ in log_records(tmp_path, "e", 0)] == [0, 1, 2]  # only the good batch


def test_sequence_errors(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("seq")
        pid, epoch = s.broker.init_producer_id()
        ids = {"producer_id": pid, "producer_epoch": epoch}
        with RawClient(s.server) as c:
            first = produce9(c, "seq", batch(3, base_sequence=0, **ids))
            dup = produce9(c, "seq", batch(3, base_sequence=0, **ids))
            gap = produce9(c, "seq", batch(3, base_sequence=7, **ids))
            after = produce9(c, "seq", batch(2, base_sequence=3, **ids))
    assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
    assert (dup.error_code, dup.base_offset) == (ErrorCode.none, 0)  # Kafka: the original offsets
    assert gap.error_code == ErrorCode.out_of_order_sequence_number
    assert (after.error_code, after.base_offset) == (ErrorCode.none, 3)
    assert [o for o, *_ in log_records(tmp_path, "seq", 0)] == [0, 1, 2, 3, 4]


def test_zstd_needs_produce_v7(tmp_path):
    from kio.schema.produce.v6 import response as resp6

    with served(tmp_path) as s:
        s.broker.create_topic("z")
        message = req6.ProduceRequest(
            transactional_id=None,
            acks=1,
            timeout=datetime.timedelta(seconds=5),
            topic_data=(
                req6.TopicProduceData(
                    name="z",
                    partition_data=(
                        req6.PartitionProduceData(
                            index=0, records=batch(compression=CompressionType.ZSTD)
                        ),
                    ),
                ),
            ),
        )
        with RawClient(s.server) as c:
            response = decode_response(resp6.ProduceResponse, c.call(message), False)
    (p,) = response.responses[0].partition_responses
    assert p.error_code == ErrorCode.unsupported_compression_type


def test_acks_zero_error_closes_the_connection(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("z0")
        with RawClient(s.server) as c:
            message = req9.ProduceRequest(
                transactional_id=None,
                acks=0,
                timeout=datetime.timedelta(seconds=5),
                topic_data=(
                    req9.TopicProduceData(
                        name="z0",
                        partition_data=(req9.PartitionProduceData(index=0, records=batch()),),
                    ),
                ),
            )
            c.send(request_frame(message, 1))  # no answer; the next request is served
            from kio.schema.api_versions.v3.request import ApiVersionsRequest

            c.send(
                request_frame(
                    ApiVersionsRequest(client_software_name="t", client_software_version="1"), 2
                )
            )
            assert struct.unpack(">i", c.recv_frame()[:4])[0] == 2
            bad = req9.ProduceRequest(
                transactional_id=None,
                acks=0,
                timeout=datetime.timedelta(seconds=5),
                topic_data=(
                    req9.TopicProduceData(
                        name="missing",
                        partition_data=(req9.PartitionProduceData(index=0, records=batch()),),
                    ),
                ),
            )
            c.send(request_frame(bad, 3))
            assert c.closed_by_server()
    assert [o for o, *_ in log_records(tmp_path, "z0", 0)] == [0, 1, 2]


def test_log_append_time_is_answered(tmp_path):
    with served(tmp_path) as s:
        s.broker.create_topic("lat", config={"message.timestamp.type": "LogAppendTime"})
        before = s.broker.clock_ms()
        with RawClient(s.server) as c:
            p = produce9(c, "lat", batch())
        after = s.broker.clock_ms()
    assert p.error_code == ErrorCode.none
    ms = int(p.log_append_time.timestamp() * 1000)
    assert before <= ms <= after


@pytest.mark.parametrize("version", range(3, 14))
def test_the_all_success_template_equals_kios_encoding(version):
    """The fast path of the common response (every partition appended, no log append time):
    a cached kio encoding with the offsets written in, byte for byte kio's encoding of the
    same response built whole, for several topics and partitions."""
    import uuid
    from datetime import timedelta

    from kio.schema.errors import ErrorCode

    from broker_embedded.common.produce_response import ProduceResult
    from broker_embedded.protocol.schemas import encode_body, make, types_of
    from broker_embedded.server.handlers import produce
    from broker_embedded.server.protocol import response_schema
    from broker_embedded.storage.topic_partition import TopicPartition

    ids = {"a.b": uuid.UUID(int=7), "z_9-x": uuid.UUID(int=2**128 - 1)}
    layout, results = [], {}
    for name, parts in (("a.b", [0, 3]), ("z_9-x", [5])):
        slots = []
        for p in parts:
            tp = TopicPartition(name, p)
            results[tp] = ProduceResult(tp, None, 10**12 + p, 10**12 + p, -1, 2**62 + p)
            slots.append((p, tp))
        layout.append((name if version < 13 else None, ids[name], slots))
    types = types_of(response_schema(0, version))
    whole = make(
        types.ProduceResponse,
        throttle_time=timedelta(0),
        node_endpoints=(),
        responses=tuple(
            make(
                types.TopicProduceResponse,
                name=n,
                topic_id=i,
                partition_responses=tuple(
                    make(
                        types.PartitionProduceResponse,
                        index=p,
                        error_code=ErrorCode.none,
                        base_offset=10**12 + p,
                        log_append_time=None,
                        log_start_offset=2**62 + p,
                        record_errors=(),
                        error_message=None,
                    )
                    for p, _ in slots
                ),
            )
            for n, i, slots in layout
        ),
    )
    assert produce._success_body(version, layout, results) == encode_body(whole)
    failed = dict(results)
    tp = TopicPartition("a.b", 3)
    failed[tp] = ProduceResult(tp, produce.InvalidRecordError("x"))
    assert produce._success_body(version, layout, failed) is None  # built whole by kio instead
