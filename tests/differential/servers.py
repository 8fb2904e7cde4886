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
from broker_embedded.server.security.scram_credentials import CredentialStore, ScramCredential
from broker_embedded.server.security.security_config import SecurityConfig

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


def secured_config(user: str) -> SecurityConfig:
    """The security tests/kafka39.py's secured Kafka peer has: SCRAM-SHA-256, Kafka's
    StandardAuthorizer, ``user`` a super user, no access without an ACL."""
    return SecurityConfig.from_mapping(
        {
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{user}",
            "allow.everyone.if.no.acl.found": False,
        },
        "the differential tests",
    )


@contextmanager
def kafkalog_server(log_dir: Path, login: tuple[str, str] | None = None) -> Iterator[str]:
    """A started server on 127.0.0.1 (port 0); its bootstrap address. Shut down on exit.
    ``login``: a SASL_PLAINTEXT listener secured as :func:`secured_config` says, the user with
    a SCRAM-SHA-256 credential for the password."""
    broker = Broker(log_dir, create=True, broker_id=NODE_ID, config=peer_config())
    listener, security = "PLAINTEXT://127.0.0.1:0", None
    if login is not None:
        user, password = login
        credential = ScramCredential.from_password("SCRAM-SHA-256", password)
        CredentialStore(log_dir).upsert(user, "SCRAM-SHA-256", credential)
        listener, security = "SASL_PLAINTEXT://127.0.0.1:0", secured_config(user)
    try:
        server = broker_server(broker, [listener], security=security).start()
        try:
            endpoint = server.endpoints[0]
            yield f"{endpoint.host}:{endpoint.port}"
        finally:
            server.shutdown(SHUTDOWN_TIMEOUT_S)
    finally:
        broker.close()
