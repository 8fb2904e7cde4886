"""The differential tests need kio (the server's schemas, Python 3.11+) and Kafka 3.9
(``kafka39``, which skips without ``KAFKALOG_PEERS``); one kafkalog server per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("kio", reason="kio (the server's protocol schemas) needs Python 3.11+")


@pytest.fixture(scope="session")
def kafkalog_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bootstrap address of one kafkalog server for the session (tests/differential/
    servers.py), configured as the Kafka 3.9 peer is."""
    from tests.differential.servers import kafkalog_server

    with kafkalog_server(tmp_path_factory.mktemp("kafkalog-diff")) as bootstrap:
        yield bootstrap


@pytest.fixture(scope="module")
def kafka39_secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bootstrap address of a Kafka 3.9 with SASL/SCRAM and an authorizer
    (tests/kafka39.py), for one module."""
    from tests.differential.secured_scenarios import ADMIN
    from tests.kafka39 import secured_kafka_broker

    with secured_kafka_broker(tmp_path_factory.mktemp("kafka-secured"), *ADMIN) as server:
        yield server.bootstrap


@pytest.fixture(scope="module")
def kafkalog_secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bootstrap address of a kafkalog server secured as ``kafka39_secured`` is."""
    from tests.differential.secured_scenarios import ADMIN
    from tests.differential.servers import kafkalog_server

    with kafkalog_server(tmp_path_factory.mktemp("kafkalog-secured"), ADMIN) as bootstrap:
        yield bootstrap
