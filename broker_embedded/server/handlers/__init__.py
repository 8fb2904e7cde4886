"""The API handlers, one module per Kafka API (or a few small related ones), each with
``register(apis, ctx)`` that registers its handler and version range on :class:`KafkaApis`.

:func:`register_all` registers every module of :data:`HANDLERS` (the seam ``BrokerServer``'s
``register_apis`` takes); :func:`broker_server` builds a :class:`BrokerServer` for one
standalone :class:`Broker`, whose Metadata names it on the server's bound listener::

    with Broker(log_dir, create=True) as broker:
        server = broker_server(broker, ["PLAINTEXT://127.0.0.1:0"]).start()
        ...
        server.shutdown()

Thread safety: registration happens once, before the server starts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from broker_embedded.broker import Broker
from broker_embedded.broker_config import BrokerConfig
from broker_embedded.server.broker_server import BrokerServer
from broker_embedded.server.endpoint import Endpoint
from broker_embedded.server.handlers import (
    alter_configs,
    create_partitions,
    create_topics,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_log_dirs,
    fetch,
    find_coordinator,
    groups,
    init_producer_id,
    list_offsets,
    metadata,
    produce,
    transactions_admin,
    txn_requests,
    write_txn_markers,
)
from broker_embedded.server.handlers.api_context import ApiContext, Node
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.security.authorizer import authorizer_for
from broker_embedded.server.security.scram_credentials import CredentialStore
from broker_embedded.server.security.security_config import SecurityConfig

Register = Callable[[KafkaApis, ApiContext], None]

HANDLERS: tuple[Register, ...] = (
    metadata.register,
    produce.register,
    fetch.register,
    list_offsets.register,
    init_producer_id.register,
    create_topics.register,
    delete_topics.register,
    create_partitions.register,
    describe_configs.register,
    alter_configs.register,  # AlterConfigs, IncrementalAlterConfigs
    describe_log_dirs.register,
    delete_records.register,
    describe_cluster.register,
    find_coordinator.register,
    groups.register,  # the group APIs, OffsetCommit and OffsetFetch
    txn_requests.register,
    transactions_admin.register,  # DescribeProducers, DescribeTransactions, ListTransactions
    write_txn_markers.register,
)


def register_all(apis: KafkaApis, ctx: ApiContext) -> None:
    """Register every API handler of this package."""
    for register in HANDLERS:
        register(apis, ctx)


def broker_server(
    broker: Broker,
    listeners: Sequence[Endpoint | str],
    config: BrokerConfig | None = None,
    register: Callable[[KafkaApis, ApiContext], None] = register_all,
    security: SecurityConfig | None = None,
) -> BrokerServer:
    """A server for one standalone broker (not started): its nodes are this broker on the
    listener of the request (else the first), read at request time (so port 0 shows the bound
    port). SASL listeners authenticate against the broker log dir's credentials; with
    ``authorizer.class.name`` set, requests are authorized against its ACLs.
    ``register``: what registers the handlers (default every one of :data:`HANDLERS`)."""
    server: BrokerServer | None = None

    def nodes() -> tuple[Node, ...]:
        assert server is not None
        endpoint = server.advertised()
        return (Node(broker.broker_id, endpoint.host, endpoint.port, broker.rack),)

    authorizer = authorizer_for(security or SecurityConfig(), broker.log_dir)
    ctx = ApiContext.of(broker, nodes, authorizer)
    server = BrokerServer(
        config or broker.config,
        listeners,
        lambda apis: register(apis, ctx),
        security,
        CredentialStore(broker.log_dir),
        authorizer,
    )
    return server


__all__ = ["HANDLERS", "ApiContext", "Node", "broker_server", "register_all"]
