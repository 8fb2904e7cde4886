"""End-to-end consumption with real clients (kafka-python, confluent-kafka, aiokafka) through the
Fetch API: assign and seek, then read every record with the values produced.

These clients need Metadata (and ListOffsets for their position) before they fetch; those
handlers live in the same ``handlers`` package. The tests use the package's registration
function when it exists and skip, naming what is missing, when it does not register Metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import warnings
from collections.abc import Iterator

import pytest

from broker_embedded.broker import Broker
from broker_embedded.server import handlers
from broker_embedded.server.handlers import fetch
from broker_embedded.server.kafka_apis import KafkaApis
from tests.broker_embedded.server._net import config, port, serve

METADATA_KEY = 3
PRODUCE_KEY = 0
VALUES = [f"v{i}".encode() for i in range(50)]


def _register_all(apis: KafkaApis, broker: Broker) -> None:
    for name, fn in inspect.getmembers(handlers, inspect.isfunction):
        if name.startswith("register"):
            fn(apis, broker)
            break
    if apis.versions.range(fetch.FETCH_KEY) is None:
        fetch.register(apis, broker)


@contextlib.contextmanager
def full_server(broker: Broker, *needed: int) -> Iterator[int]:
    """The port of a server with every handler of the package; skips without Metadata or an
    API in ``needed``."""
    with serve(config(), lambda apis: _register_all(apis, broker)) as server:
        for key in (METADATA_KEY, *needed):
            if server.versions.range(key) is None:
                pytest.skip(f"API key {key} is not registered by broker_embedded.server.handlers")
        yield port(server)


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
            bootstrap_servers=f"127.0.0.1:{p}", enable_auto_commit=False, group_id=None,
            consumer_timeout_ms=10_000, request_timeout_ms=15_000,
        )  # fmt: skip
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
        consumer = confluent.Consumer({
            "bootstrap.servers": f"127.0.0.1:{p}", "group.id": "unused",
            "enable.auto.commit": False, "broker.address.family": "v4",
        })  # fmt: skip
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
