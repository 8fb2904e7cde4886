"""What every API handler shares: the broker it serves, the cluster's nodes as clients reach
them, and small helpers to build kio responses of any version.

- :class:`Node`: a broker's id, its advertised host and (bound) port, its rack.
- :class:`ApiContext`: the :class:`Broker` the handlers call and ``nodes()``, the live brokers
  of the cluster as clients should reach them (read at request time, so a listener on port 0
  shows the port the OS bound). ``cluster_id`` is the log dir's ``meta.properties`` value.
  ``authorizer`` (None: authorization off) answers :meth:`ApiContext.allowed`, the check every
  handler makes (``security/authorizer.py``).
- :func:`response_types` is the module of kio's response classes for a request's version (its
  nested classes differ per version); :func:`make` builds one of them from keyword values,
  dropping those the version does not have (e.g. ``topic_id`` before Metadata v10), so a
  handler writes one construction for every version it serves.
  The ``*_refusal`` helpers answer the refusal error a handler puts in its response (None:
  allowed), with Kafka's message for its code ("Topic authorization failed.": a client sees
  the text Kafka sends, which names neither the principal nor the operation);
  :meth:`ApiContext.authorized_operations` is the bit field of Kafka's ``authorizedOperations``
  (Metadata, DescribeCluster, DescribeGroups: bit ``1 << op`` per operation of the resource
  type the principal may do).
- :class:`TopicNames`: topic names by id, one O(1) lookup per id asked for.
- :func:`partitions_per_request` refuses a CreateTopics or CreatePartitions request that adds
  more than :data:`MAX_PARTITIONS_PER_REQUEST` partitions in all (Kafka's controller has the
  same cap, ``MAX_PARTITIONS_PER_BATCH``): without it one request asking for 2^31 - 1
  partitions kept a handler thread creating directories until the disk or descriptors ran out.
- :func:`error_code` maps a domain exception to Kafka's code (kio's ``ErrorCode``): a
  :class:`KafkaApiError` carries it, a bad topic config is INVALID_CONFIG (40), anything else
  UNKNOWN_SERVER_ERROR (-1), as Kafka answers an unexpected exception.

Immutable values and pure functions: thread-safe.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, ItemsView, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType

from broker_embedded.broker import Broker
from broker_embedded.error_code import ErrorCode
from broker_embedded.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    KafkaApiError,
    PolicyViolationError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    kafka_message,
)
from broker_embedded.protocol.schemas import make  # noqa: F401 (the handlers import it here)
from broker_embedded.server.protocol import response_schema
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.acl_apis import allowed
from broker_embedded.server.security.authorizer import (
    CLUSTER_NAME,
    VALID_OPERATIONS,
    AclOperation,
    Authorizer,
    ResourceType,
)
from broker_embedded.storage.log_config import InvalidConfigError
from broker_embedded.storage.log_dir import LogDir


@dataclass(frozen=True, slots=True)
class Node:
    """A broker as clients reach it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class ApiContext:
    """The broker behind the handlers and the cluster's nodes (module docstring)."""

    broker: Broker
    nodes: Callable[[], Sequence[Node]]
    cluster_id: str
    authorizer: Authorizer | None = None  # None: authorization off

    @classmethod
    def of(
        cls,
        broker: Broker,
        nodes: Callable[[], Sequence[Node]],
        authorizer: Authorizer | None = None,
    ) -> ApiContext:
        cluster_id = LogDir(broker.log_dir).meta_properties().get("cluster.id", "")
        return cls(broker, nodes, cluster_id, authorizer)

    def allowed(
        self,
        request: Request,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str = CLUSTER_NAME,
    ) -> bool:
        """May the request's principal do ``operation`` on the resource (always, with
        authorization off)?"""
        return self.authorizer is None or allowed(
            self.authorizer, request, operation, resource_type, name
        )

    def topic_refusal(
        self, request: Request, operation: AclOperation, topic: str
    ) -> TopicAuthorizationFailedError | None:
        """TOPIC_AUTHORIZATION_FAILED when the principal may not do ``operation`` on ``topic``."""
        if self.allowed(request, operation, ResourceType.TOPIC, topic):
            return None
        return TopicAuthorizationFailedError()

    def txn_refusal(
        self, request: Request, txn_id: str, operation: AclOperation = AclOperation.WRITE
    ) -> TransactionalIdAuthorizationFailedError | None:
        """TRANSACTIONAL_ID_AUTHORIZATION_FAILED without ``operation`` (Write by default) on
        the transactional id."""
        if self.allowed(request, operation, ResourceType.TRANSACTIONAL_ID, txn_id):
            return None
        return TransactionalIdAuthorizationFailedError()

    def cluster_refusal(
        self, request: Request, operation: AclOperation
    ) -> ClusterAuthorizationFailedError | None:
        """CLUSTER_AUTHORIZATION_FAILED when the principal may not do ``operation`` on the
        Cluster."""
        if self.allowed(request, operation, ResourceType.CLUSTER):
            return None
        return ClusterAuthorizationFailedError()

    def authorized_operations(
        self, request: Request, resource_type: ResourceType, name: str = CLUSTER_NAME
    ) -> int:
        """Kafka's ``authorizedOperations`` bit field: ``1 << op`` for each operation of the
        resource type (not All) the principal may do on the resource (every one, with
        authorization off)."""
        ops = VALID_OPERATIONS[resource_type] - {AclOperation.ALL}
        return sum(1 << op for op in ops if self.allowed(request, op, resource_type, name))

    def cluster_operations(self, request: Request) -> int:
        """The Cluster's ``authorized_operations`` as Kafka answers them (DescribeCluster,
        Metadata v8-10): 0 without Describe on the Cluster."""
        if not self.allowed(request, AclOperation.DESCRIBE, ResourceType.CLUSTER):
            return 0
        return self.authorized_operations(request, ResourceType.CLUSTER)

    def group_refusal(
        self, request: Request, operation: AclOperation, group: str
    ) -> GroupAuthorizationFailedError | None:
        """GROUP_AUTHORIZATION_FAILED when the principal may not do ``operation`` on ``group``."""
        if self.allowed(request, operation, ResourceType.GROUP, group):
            return None
        return GroupAuthorizationFailedError()

    @property
    def broker_id(self) -> int:
        return self.broker.broker_id

    def node(self, node_id: int) -> Node | None:
        return next((n for n in self.nodes() if n.node_id == node_id), None)

    def topic_names_by_id(self) -> TopicNames:
        """Every topic's name by its id (for the versions that name topics by id)."""
        return TopicNames(self.broker)


class TopicNames(Mapping[uuid.UUID, str]):
    """The broker's topic names by topic id, each looked up when asked (O(1): the controller's
    map, kept on topic creation and deletion), so a request naming a few topics by id costs a
    few lookups, not a scan of every topic. Iterating lists every topic (a scan)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def __getitem__(self, topic_id: uuid.UUID) -> str:
        name = self._broker.topic_name(topic_id)
        if name is None:
            raise KeyError(topic_id)
        return name

    def __iter__(self) -> Iterator[uuid.UUID]:
        return iter([t.topic_id for t in self._broker.metadata()])

    def __len__(self) -> int:
        return len(self._broker.list_topics())

    def items(self) -> ItemsView[uuid.UUID, str]:
        """A snapshot of every (id, name): one scan, safe against a topic deleted meanwhile."""
        return {t.topic_id: t.name for t in self._broker.metadata()}.items()


def response_types(request: Request) -> ModuleType:
    """The kio module of the response classes of ``request``'s API and version."""
    schema = response_schema(request.header.api_key, request.header.api_version)
    assert schema is not None  # registration checked every served version
    return sys.modules[schema.__module__]


NONE = ErrorCode.none
OMITTED_OPERATIONS = -(2**31)  # authorized operations not asked for (Kafka's schema default)
MAX_PARTITIONS_PER_REQUEST = 10_000


def partitions_per_request(total: int) -> PolicyViolationError | None:
    """The error of a request adding ``total`` partitions in all, if it adds too many."""
    if total <= MAX_PARTITIONS_PER_REQUEST:
        return None
    return PolicyViolationError(
        f"Excessively large number of partitions per request: {total} requested, at most "
        f"{MAX_PARTITIONS_PER_REQUEST}"
    )


def error_code(error: BaseException | None) -> ErrorCode:
    """Kafka's error code of an exception (0 for None, -1 for an unexpected one)."""
    if error is None:
        return NONE
    if isinstance(error, KafkaApiError):
        return ErrorCode(error.code)
    if isinstance(error, InvalidConfigError):
        return ErrorCode.invalid_config
    return ErrorCode.unknown_server_error


def error_message(error: BaseException | None) -> str | None:
    """The ``error_message`` of an error's answer: None for no error, else the exception's text,
    or Kafka's default message for its code when it has none (a null message with an error
    code aborts some clients: librdkafka 2.16's DescribeUserScramCredentials parser)."""
    if error is None:
        return None
    return str(error) or kafka_message(error_code(error))
