"""End-to-end consumption with real clients (kafka-python, confluent-kafka, aiokafka) through the
Fetch API: assign and seek, then read every record with the values produced.

The server is the package's ``broker_server`` (every handler: these clients need Metadata, and
librdkafka Produce advertised, before they fetch); a test skips, naming the API, if one is
missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import warnings
from collections.abc import Iterator

import pytest

from broker_embedded.broker import Broker
from broker_embedded.server.handlers import broker_server
from tests.broker_embedded.server._net import config, port

METADATA_KEY = 3
PRODUCE_KEY = 0
VALUES = [f"v{i}".encode() for i in range(50)]


@contextlib.contextmanager
def full_server(broker: Broker, *needed: int) -> Iterator[int]:
    """The port of a server with every handler of the package; skips without Metadata or an
    API in ``needed``."""
    server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"], config()).start()
    try:
        for key in (METADATA_KEY, *needed):
            if server.versions.range(key) is None:
                pytest.skip(f"API key {key} is not registered by broker_embedded.server.handlers")
        yield port(server)
    finally:
        server.shutdown(5.0)


@pytest.fixture
def filled(broker):
    broker.create_topic("t", 1)
    for i in range(0, len(VALUES), 10):
        broker.produce("t", 0, VALUES[i : i + 10])
    return broker


def test_kafka_python_consumer_assign_and_seek(filled):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaConsumer, TopicPartition
    with full_server(filled) as p:
        consumer = KafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{p}",
            enable_auto_commit=False,
            group_id=None,
            consumer_timeout_ms=10_000,
            request_timeout_ms=15_000,
        )
        try:
            tp = TopicPartition("t", 0)
            consumer.assign([tp])
            consumer.seek(tp, 5)
            got = [m.value for m in consumer][: len(VALUES) - 5]
        finally:
            consumer.close()
    assert got == VALUES[5:]


def test_confluent_kafka_consumer_assign(filled):
    confluent = pytest.importorskip("confluent_kafka")
    # librdkafka fetches with v4+ (MsgVer2) only when the broker also advertises Produce v3+
    with full_server(filled, PRODUCE_KEY) as p:
        consumer = confluent.Consumer(
            {
                "bootstrap.servers": f"127.0.0.1:{p}",
                "group.id": "unused",
                "enable.auto.commit": False,
                "broker.address.family": "v4",
            }
        )
        try:
            consumer.assign([confluent.TopicPartition("t", 0, 3)])
            got: list[bytes] = []
            for _ in range(200):
                if len(got) >= len(VALUES) - 3:
                    break
                msg = consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
        finally:
            consumer.close()
    assert got == VALUES[3:]


def test_aiokafka_consumer_assign_and_seek(filled):
    aiokafka = pytest.importorskip("aiokafka")

    async def consume(p: int) -> list[bytes]:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{p}", enable_auto_commit=False
        )
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition("t", 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            got: list[bytes] = []
            while len(got) < len(VALUES):
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 10)
                got += [m.value for ms in batch.values() for m in ms]
            return got
        finally:
            await consumer.stop()

    with full_server(filled) as p:
        assert asyncio.run(consume(p)) == VALUES
