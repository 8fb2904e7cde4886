"""The kafkalog side of the differential tests: the wire-protocol server over a broker on a
temporary log dir, in this process, configured as Kafka 3.9's peer (tests/kafka39.py) is:
node id 1, 3 partitions for each internal topic with one replica, no initial rebalance delay,
topics auto-created with 1 partition. Kafka's settings not named here are both brokers'
defaults."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.server.handlers import broker_server

NODE_ID = 1  # Kafka 3.9's peer runs as node.id=1: node ids then need no normalizing
SHUTDOWN_TIMEOUT_S = 10.0


def peer_config() -> BrokerConfig:
    """The settings that differ from the defaults in the Kafka peer's server.properties."""
    return dataclasses.replace(
        BrokerConfig(),
        num_network_threads=2,
        num_io_threads=4,
        offsets_topic_num_partitions=3,
        offsets_topic_replication_factor=1,
        transaction_state_log_num_partitions=3,
        transaction_state_log_replication_factor=1,
        transaction_state_log_min_isr=1,
        group_initial_rebalance_delay_ms=0,
    )


@contextmanager
def kafkalog_server(log_dir: Path) -> Iterator[str]:
    """A started server on 127.0.0.1 (port 0); its bootstrap address. Shut down on exit."""
    broker = Broker(log_dir, create=True, broker_id=NODE_ID, config=peer_config())
    try:
        server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"]).start()
        try:
            endpoint = server.endpoints[0]
            yield f"{endpoint.host}:{endpoint.port}"
        finally:
            server.shutdown(SHUTDOWN_TIMEOUT_S)
    finally:
        broker.close()
