"""Fixtures every part of the suite may use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks._serve_peers import Server
from tests.kafka39 import kafka_broker


@pytest.fixture(scope="session")
def kafka39(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One Apache Kafka 3.9 broker for the session (skips without ``KAFKALOG_PEERS`` or Java):
    tests share it, each with its own topics and groups."""
    with kafka_broker(tmp_path_factory.mktemp("kafka39")) as server:
        yield server
