"""A blocking wire-protocol client (Kafka's ``NetworkClient`` / ``KafkaAdminClient`` reduced to
what the ``kafkalog`` commands need): one socket per broker, requests one at a time.

Frames, security (TLS, SASL) and version negotiation, per connection: broker_connection.py.

Limits (and what happens at them): connecting takes at most ``connect_timeout_s`` and each
request at most ``request_timeout_s`` (socket timeouts: :class:`BrokerConnectionError` naming
the broker, the connection closed); a response frame larger than ``max_response_bytes`` is
refused unread (same error). Requests to a partition's leader that fail with an error of
``error_code.LEADER_MOVED`` (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, FENCED_LEADER_EPOCH),
or whose leader is unreachable, refresh the metadata and are retried at most ``retries``
times, ``retry_backoff_s`` apart, and not once ``retry_timeout_s`` have passed since the first
attempt; after that the last error is raised. A coordinator that is loading, unavailable or
moved (``error_code.COORDINATOR_MOVED``: a fresh Kafka answers so until its internal topics and
producer ids are ready) is asked again, ``retry_backoff_s`` doubling up to
:data:`MAX_RETRY_BACKOFF_S`, until ``retry_timeout_s`` have passed.
A Produce retried after its connection broke may have been appended before it broke: then the
batch is in the log twice (at least once, as Kafka's producer without idempotence), unless the
batch carries a producer id and sequence (idempotent_producer.py): the broker then recognises
the retry as the batch it has and answers with its offset, appending nothing. An error
code in a response raises the domain exception of that code
(``broker_embedded.errors``; :class:`KafkaApiError` with the code for the others) naming the
broker, topic and partition.

Record bytes are passed through untouched: Produce sends the batch the caller built
(``producer_record.build_batch``), Fetch returns the partition's records bytes (one copy) for the
columnar decoder. Not thread-safe: one client per thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from broker_embedded import errors
from broker_embedded.client.broker_connection import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    DESCRIBE_GROUPS,
    FETCH,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    LIST_GROUPS,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    PRODUCE,
    BrokerAddress,
    BrokerConnection,
    BrokerConnectionError,
    ClientConfig,
)
from broker_embedded.error_code import COORDINATOR_MOVED, LEADER_MOVED, ErrorCode
from broker_embedded.errors import (
    KafkaApiError,
    KafkaLogError,
    LeaderNotAvailableError,
    api_error,
)
from broker_embedded.protocol.schemas import (
    make,
)

FETCH_MAX_WAIT_MS = 500  # Kafka consumer's fetch.max.wait.ms default
FETCH_MAX_WAIT = timedelta(milliseconds=FETCH_MAX_WAIT_MS)
EARLIEST, LATEST = -2, -1  # ListOffsets timestamps
DEBUGGING_REPLICA_ID = -2  # ListOffsets up to the log end offset (Kafka's debugging id)
MAX_RETRY_BACKOFF_S = 1.0  # coordinator retries: retry_backoff_s doubling up to this


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: Any  # uuid.UUID or None
    partitions: tuple[PartitionInfo, ...]


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition of a Fetch response: its records bytes and offsets."""

    records: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[tuple[int, int], ...] | None  # (producer id, first offset)


@dataclass(frozen=True, slots=True)
class ListedGroup:
    """A group as ListGroups lists it."""

    group_id: str
    protocol_type: str
    state: str  # "" before ListGroups v4


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    client_id: str
    client_host: str
    assignment: bytes  # the protocol's bytes (consumer: ConsumerProtocolAssignment)


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    """A group as DescribeGroups shows it (state "Dead" for an unknown group)."""

    group_id: str
    state: str
    protocol_type: str
    members: tuple[DescribedMember, ...]
    protocol: str = ""  # the protocol chosen (consumer: the assignor), "" when none


@dataclass(frozen=True, slots=True)
class ConfigValue:
    name: str
    value: str | None
    is_override: bool  # config_source DYNAMIC_TOPIC_CONFIG (1)


class KafkaClient:
    """Connections to the brokers of one cluster, found from the bootstrap addresses."""

    # ClientConfig is a frozen dataclass: one shared default is safe
    def __init__(self, bootstrap: str, config: ClientConfig = ClientConfig()) -> None:  # noqa: B008
        try:
            self.bootstrap = BrokerAddress.parse_list(bootstrap)
        except ValueError as e:
            raise BrokerConnectionError(f"--bootstrap-server {bootstrap!r}: {e}") from None
        self.config = config
        self._connections: dict[BrokerAddress, BrokerConnection] = {}
        self._brokers: dict[int, BrokerAddress] = {}
        self._topics: dict[str, TopicInfo] = {}

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def connection(self, address: BrokerAddress) -> BrokerConnection:
        connection = self._connections.get(address)
        if connection is None:
            connection = self._connections[address] = BrokerConnection(address, self.config)
        return connection

    def _drop(self, address: BrokerAddress) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.close()

    def any_broker(self, api_key: int, build: Callable[[Any], dict[str, Any]]) -> Any:
        """A request to the first reachable broker (known ones, then the bootstrap list)."""
        last: BrokerConnectionError | None = None
        for address in (*self._connections, *self.bootstrap, *self._brokers.values()):
            try:
                return self.connection(address).request(api_key, build)
            except BrokerConnectionError as e:
                self._drop(address)
                last = e
        assert last is not None
        raise last

    # -- metadata ----------------------------------------------------------------------------------

    def metadata(
        self, topics: Iterable[str] | None = None, *, auto_create: bool = False
    ) -> list[TopicInfo]:
        """Metadata of ``topics`` (every topic when None); an unknown topic raises.
        ``auto_create``: ask a broker that auto-creates topics to create them (Kafka's
        producer does; see :meth:`producer_topic`)."""
        names = None if topics is None else list(topics)

        def build(types: Any) -> dict[str, Any]:
            wanted = (
                None
                if names is None
                else tuple(make(types.MetadataRequestTopic, name=n, topic_id=None) for n in names)
            )
            return {
                "topics": wanted,
                "allow_auto_topic_creation": auto_create,
                "include_topic_authorized_operations": False,
                "include_cluster_authorized_operations": False,
            }

        response = self.any_broker(METADATA, build)
        self._brokers = {b.node_id: BrokerAddress(b.host, b.port) for b in response.brokers}
        out = []
        for t in response.topics:
            if t.error_code != ErrorCode.none:
                raise api_error(int(t.error_code), f"Metadata of topic {t.name!r} failed")
            info = TopicInfo(
                t.name,
                getattr(t, "topic_id", None),
                tuple(
                    sorted(
                        (
                            PartitionInfo(
                                p.partition_index,
                                p.leader_id,
                                p.leader_epoch,
                                tuple(p.replica_nodes),
                                tuple(p.isr_nodes),
                            )
                            for p in t.partitions
                        ),
                        key=lambda p: p.partition,
                    )
                ),
            )
            self._topics[t.name] = info
            out.append(info)
        return out

    def topic(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        return info if info is not None else self.metadata([name])[0]

    def producer_topic(self, name: str) -> TopicInfo:
        """The metadata of topic ``name`` as Kafka's producer asks for it: Metadata allowing
        auto-creation, repeated while the broker answers LEADER_NOT_AVAILABLE (a topic being
        created) or UNKNOWN_TOPIC_OR_PARTITION (not yet visible), or a partition has no
        leader yet, at most ``retries`` times within ``retry_timeout_s``; then the last error
        (UNKNOWN_TOPIC_OR_PARTITION from a broker that does not auto-create topics)."""
        deadline = time.monotonic() + self.config.retry_timeout_s
        for attempt in range(self.config.retries + 1):
            try:
                info = self.metadata([name], auto_create=True)[0]
                if all(p.leader >= 0 for p in info.partitions):
                    return info
                error: KafkaApiError = LeaderNotAvailableError(
                    f"topic {name!r}: partitions without a leader"
                )
            except KafkaApiError as e:
                if e.code not in (
                    ErrorCode.leader_not_available,
                    ErrorCode.unknown_topic_or_partition,
                ):
                    raise
                error = e
            self._topics.pop(name, None)
            late = time.monotonic() + self.config.retry_backoff_s > deadline
            if attempt == self.config.retries or late:
                raise error
            time.sleep(self.config.retry_backoff_s)
        raise AssertionError("unreachable")

    def _leader(self, topic: str, partition: int) -> BrokerAddress:
        info = self.topic(topic)
        found = [p for p in info.partitions if p.partition == partition]
        if not found:
            raise errors.UnknownTopicOrPartitionError(
                f"topic {topic!r} has no partition {partition} (partitions 0.."
                f"{len(info.partitions) - 1})"
            )
        address = self._brokers.get(found[0].leader)
        if address is None:
            raise LeaderNotAvailableError(
                f"topic {topic!r} partition {partition}: leader {found[0].leader} is unknown"
            )
        return address

    def to_leader(self, topic: str, partition: int, call: Callable[[BrokerConnection], Any]) -> Any:
        """``call`` on the partition leader's connection, retried on a moved or unreachable
        leader after a metadata refresh (at most ``retries`` times, within ``retry_timeout_s``),
        and on a leader that answers UNKNOWN_TOPIC_OR_PARTITION for a partition the metadata
        named (a topic just created: the leader has not applied it yet; Kafka's producer and
        consumer retry it too). A partition the metadata does not name fails at once."""
        deadline = time.monotonic() + self.config.retry_timeout_s
        for attempt in range(self.config.retries + 1):
            address = None
            try:
                address = self._leader(topic, partition)
                return call(self.connection(address))
            except (BrokerConnectionError, KafkaApiError) as e:
                retriable = (
                    isinstance(e, BrokerConnectionError)
                    or e.code in LEADER_MOVED
                    or (address is not None and e.code == ErrorCode.unknown_topic_or_partition)
                )
                late = time.monotonic() + self.config.retry_backoff_s > deadline
                if not retriable or attempt == self.config.retries or late:
                    raise
                if address is not None and isinstance(e, BrokerConnectionError):
                    self._drop(address)
                time.sleep(self.config.retry_backoff_s)
                self._topics.pop(topic, None)
        raise AssertionError("unreachable")

    # -- producers ---------------------------------------------------------------------------------

    def init_producer_id(self) -> tuple[int, int]:
        """A new idempotent producer's (producer id, epoch): InitProducerId without a
        transactional id, asked of any broker."""

        def build(_: Any) -> dict[str, Any]:
            return {
                "transactional_id": None,
                "transaction_timeout": timedelta(minutes=1),
                "producer_id": -1,
                "producer_epoch": -1,
            }

        deadline = time.monotonic() + self.config.retry_timeout_s
        attempt = 0
        while True:  # a fresh Kafka answers COORDINATOR_LOAD_IN_PROGRESS until it has ids
            response = self.any_broker(INIT_PRODUCER_ID, build)
            code = int(response.error_code)
            if code == ErrorCode.none:
                return int(response.producer_id), int(response.producer_epoch)
            if code not in COORDINATOR_MOVED or not self._wait_to_retry(attempt, deadline):
                raise api_error(code, "InitProducerId (idempotent producer)")
            attempt += 1

    def _wait_to_retry(self, attempt: int, deadline: float) -> bool:
        """Sleep before retry ``attempt`` + 1 (``retry_backoff_s`` doubling up to
        :data:`MAX_RETRY_BACKOFF_S`); False, without sleeping, when it would end past
        ``deadline``."""
        pause = min(self.config.retry_backoff_s * 2**attempt, MAX_RETRY_BACKOFF_S)
        if time.monotonic() + pause > deadline:
            return False
        time.sleep(pause)
        return True

    # -- partition requests ------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        partition: int,
        batch: bytes,
        *,
        acks: int,
        timeout_ms: int = 30_000,
        transactional_id: str | None = None,
    ) -> int:
        """Produce one record batch (of ``transactional_id``'s transaction when given); the base
        offset the leader assigned (-1 with acks=0, which has no response)."""

        def build(types: Any) -> dict[str, Any]:
            data = make(types.PartitionProduceData, index=partition, records=batch)
            return {
                "transactional_id": transactional_id,
                "acks": acks,
                "timeout": timedelta(milliseconds=timeout_ms),
                "topic_data": (make(types.TopicProduceData, name=topic, partition_data=(data,)),),
            }

        def call(c: BrokerConnection) -> int:
            response = c.request(PRODUCE, build, expect_response=acks != 0)
            if response is None:
                return -1
            p = response.responses[0].partition_responses[0]
            _check(p.error_code, c, topic, partition, "Produce", getattr(p, "error_message", None))
            return p.base_offset

        return self.to_leader(topic, partition, call)

    def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, isolation_level: int
    ) -> FetchedPartition:
        """Records from ``offset`` (at most ``max_bytes``, or one whole larger batch), outside any
        fetch session: min bytes 1 and max wait :data:`FETCH_MAX_WAIT_MS` (the consumer's
        default), so the answer comes at once when the partition has records from ``offset``
        and within the max wait when it has none (a max wait of 0 gets no partition at all from
        Tansu). A response without the partition is a :class:`BrokerConnectionError`."""

        def build(types: Any) -> dict[str, Any]:
            p = make(
                types.FetchPartition,
                partition=partition,
                current_leader_epoch=-1,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=max_bytes,
            )
            return {
                "cluster_id": None,
                "replica_id": -1,
                "max_wait": FETCH_MAX_WAIT,
                "min_bytes": 1,
                "max_bytes": max_bytes,
                "isolation_level": isolation_level,
                "session_id": 0,
                "session_epoch": -1,
                "topics": (make(types.FetchTopic, topic=topic, partitions=(p,)),),
                "forgotten_topics_data": (),
                "rack_id": "",
            }

        def call(c: BrokerConnection) -> FetchedPartition:
            response = c.request(FETCH, build)
            _check(response.error_code, c, topic, partition, "Fetch")
            if not response.responses or not response.responses[0].partitions:
                raise BrokerConnectionError(
                    f"Fetch at offset {offset} of topic {topic!r} "
                    f"partition {partition}: broker {c.address} answered "
                    f"without the partition"
                )
            p = response.responses[0].partitions[0]
            _check(p.error_code, c, topic, partition, f"Fetch at offset {offset}")
            aborted = None
            if p.aborted_transactions is not None:
                aborted = tuple((a.producer_id, a.first_offset) for a in p.aborted_transactions)
            return FetchedPartition(
                p.records or b"",
                p.high_watermark,
                p.last_stable_offset,
                p.log_start_offset,
                aborted,
            )

        return self.to_leader(topic, partition, call)

    def list_offset(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        *,
        isolation_level: int = 0,
        replica_id: int = -1,
    ) -> int:
        """The offset ListOffsets answers for ``timestamp`` (EARLIEST, LATEST or ms; -1 when no
        record has a timestamp at or after it)."""

        def build(types: Any) -> dict[str, Any]:
            p = make(
                types.ListOffsetsPartition,
                partition_index=partition,
                current_leader_epoch=-1,
                timestamp=timestamp,
            )
            topics = (make(types.ListOffsetsTopic, name=topic, partitions=(p,)),)
            return {"replica_id": replica_id, "isolation_level": isolation_level, "topics": topics}

        def call(c: BrokerConnection) -> int:
            p = c.request(LIST_OFFSETS, build).topics[0].partitions[0]
            _check(p.error_code, c, topic, partition, f"ListOffsets at timestamp {timestamp}")
            return p.offset

        return self.to_leader(topic, partition, call)

    # -- admin -------------------------------------------------------------------------------------

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        def build(types: Any) -> dict[str, Any]:
            entries = tuple(
                make(types.CreatableTopicConfig, name=k, value=v) for k, v in configs.items()
            )
            topic = make(
                types.CreatableTopic,
                name=name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                assignments=(),
                configs=entries,
            )
            return {
                "topics": (topic,),
                "validate_only": False,
                "timeout": timedelta(seconds=self.config.request_timeout_s),
            }

        result = self.any_broker(CREATE_TOPICS, build).topics[0]
        _check_admin(result, f"CreateTopics {name!r}")

    def delete_topic(self, name: str) -> None:
        def build(types: Any) -> dict[str, Any]:
            return {
                "topic_names": (name,),
                "timeout": timedelta(seconds=self.config.request_timeout_s),
            }

        _check_admin(self.any_broker(DELETE_TOPICS, build).responses[0], f"DeleteTopics {name!r}")
        self._topics.pop(name, None)

    def create_partitions(self, name: str, count: int) -> None:
        def build(types: Any) -> dict[str, Any]:
            topic = make(types.CreatePartitionsTopic, name=name, count=count, assignments=None)
            return {
                "topics": (topic,),
                "validate_only": False,
                "timeout": timedelta(seconds=self.config.request_timeout_s),
            }

        _check_admin(
            self.any_broker(CREATE_PARTITIONS, build).results[0], f"CreatePartitions {name!r}"
        )
        self._topics.pop(name, None)

    def topic_configs(self, name: str) -> list[ConfigValue]:
        """Every config of topic ``name`` with its effective value, in the broker's order."""

        def build(types: Any) -> dict[str, Any]:
            resource = make(
                types.DescribeConfigsResource,
                resource_type=2,
                resource_name=name,
                configuration_keys=None,
            )
            return {
                "resources": (resource,),
                "include_synonyms": False,
                "include_documentation": False,
            }

        result = self.any_broker(DESCRIBE_CONFIGS, build).results[0]
        _check_admin(result, f"DescribeConfigs of topic {name!r}")
        return [ConfigValue(c.name, c.value, c.config_source == 1) for c in result.configs]

    def broker_configs(self, broker_id: int) -> list[ConfigValue]:
        """Every config of broker ``broker_id`` (DescribeConfigs of the BROKER resource, sent
        to that broker, as Kafka's admin client sends it); a sensitive one's value is None."""
        self.metadata([])
        address = self._brokers.get(broker_id)
        if address is None:
            raise KafkaLogError(
                f"no broker {broker_id} in the cluster's metadata "
                f"(brokers: {sorted(self._brokers)})"
            )

        def build(types: Any) -> dict[str, Any]:
            resource = make(
                types.DescribeConfigsResource,
                resource_type=4,
                resource_name=str(broker_id),
                configuration_keys=None,
            )
            return {
                "resources": (resource,),
                "include_synonyms": False,
                "include_documentation": False,
            }

        result = self.connection(address).request(DESCRIBE_CONFIGS, build).results[0]
        _check_admin(result, f"DescribeConfigs of broker {broker_id}")
        return [ConfigValue(c.name, c.value, False) for c in result.configs]

    def broker_ids(self) -> list[int]:
        """The ids of the cluster's brokers (Metadata), sorted."""
        self.metadata([])
        return sorted(self._brokers)

    # -- groups ------------------------------------------------------------------------------------

    def list_groups(self) -> list[ListedGroup]:
        """Every group of the cluster, sorted by id: ListGroups asked of every broker (each
        lists the groups it coordinates), as Kafka's admin client does."""
        self.metadata([])
        found: dict[str, ListedGroup] = {}
        for broker_id, address in sorted(self._brokers.items()):
            response = self.connection(address).request(
                LIST_GROUPS, lambda _: {"states_filter": ()}
            )
            if response.error_code != ErrorCode.none:
                raise api_error(int(response.error_code), f"ListGroups on broker {broker_id}")
            for g in response.groups:
                found[g.group_id] = ListedGroup(
                    g.group_id, g.protocol_type, getattr(g, "group_state", "")
                )
        return [found[g] for g in sorted(found)]

    def to_coordinator(
        self, group_id: str, call: Callable[[BrokerConnection], Any], *, key_type: int = 0
    ) -> Any:
        """``call`` on the connection to ``group_id``'s coordinator (FindCoordinator; key type 1:
        the coordinator of transactional id ``group_id``), retried when the coordinator moved or
        is loading (at most ``retries`` times)."""

        def build(_: Any) -> dict[str, Any]:
            return {"key": group_id, "key_type": key_type}

        deadline = time.monotonic() + self.config.retry_timeout_s
        attempt = 0
        while True:  # a coordinator that moved, or is loading (a fresh Kafka creates its topic)
            try:
                found = self.any_broker(FIND_COORDINATOR, build)
                if found.error_code != ErrorCode.none:
                    of = "group" if key_type == 0 else "transactional id"
                    raise api_error(int(found.error_code), f"FindCoordinator of {of} {group_id!r}")
                return call(self.connection(BrokerAddress(found.host, found.port)))
            except KafkaApiError as e:
                if e.code not in COORDINATOR_MOVED or not self._wait_to_retry(attempt, deadline):
                    raise
                attempt += 1

    def describe_group(self, group_id: str) -> DescribedGroup:
        def call(c: BrokerConnection) -> DescribedGroup:
            response = c.request(
                DESCRIBE_GROUPS,
                lambda _: {"groups": (group_id,), "include_authorized_operations": False},
            )
            g = response.groups[0]
            if g.error_code != ErrorCode.none:
                raise api_error(int(g.error_code), f"DescribeGroups of {group_id!r} on {c.address}")
            members = tuple(
                DescribedMember(m.member_id, m.client_id, m.client_host, bytes(m.member_assignment))
                for m in g.members
            )
            return DescribedGroup(
                group_id, g.group_state, g.protocol_type, members, g.protocol_data
            )

        return self.to_coordinator(group_id, call)

    def committed_offsets(
        self,
        group_id: str,
        partitions: Sequence[tuple[str, int]] | None = None,
        *,
        require_stable: bool = False,
    ) -> dict[tuple[str, int], int]:
        """``group_id``'s committed offsets (OffsetFetch) of ``partitions``, or of every partition
        it has when None; -1 for a requested partition without one. ``require_stable`` (v7+)
        makes the coordinator answer UNSTABLE_OFFSET_COMMIT, raised, while a transaction holding
        offsets of the group is undecided."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions or ():
            by_topic.setdefault(topic, []).append(partition)

        def build(types: Any) -> dict[str, Any]:
            topics = (
                None
                if partitions is None
                else tuple(
                    types.OffsetFetchRequestTopic(name=t, partition_indexes=tuple(ps))
                    for t, ps in by_topic.items()
                )
            )
            return {"group_id": group_id, "topics": topics, "require_stable": require_stable}

        def call(c: BrokerConnection) -> dict[tuple[str, int], int]:
            response = c.request(OFFSET_FETCH, build)
            if response.error_code != ErrorCode.none:
                raise api_error(
                    int(response.error_code), f"OffsetFetch of group {group_id!r} on {c.address}"
                )
            out = {}
            for t in response.topics:
                for p in t.partitions:
                    _check(
                        p.error_code,
                        c,
                        t.name,
                        p.partition_index,
                        f"OffsetFetch of group {group_id!r}",
                    )
                    out[(t.name, p.partition_index)] = int(p.committed_offset)
            return out

        return self.to_coordinator(group_id, call)

    def commit_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """Commit ``offsets`` (the next offset to read, by (topic, partition)) as ``group_id``'s,
        as a consumer that assigns its partitions itself commits (OffsetCommit with generation
        -1 and no member id: a group with offsets and no members). A partition's error is
        raised naming it."""
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append((partition, offset))

        def build(types: Any) -> dict[str, Any]:
            topics = tuple(
                make(
                    types.OffsetCommitRequestTopic,
                    name=topic,
                    partitions=tuple(
                        make(
                            types.OffsetCommitRequestPartition,
                            partition_index=p,
                            committed_offset=o,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        )
                        for p, o in parts
                    ),
                )
                for topic, parts in by_topic.items()
            )
            return {
                "group_id": group_id,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": topics,
            }

        def call(c: BrokerConnection) -> None:
            response = c.request(OFFSET_COMMIT, build)
            for t in response.topics:
                for p in t.partitions:
                    _check(
                        p.error_code,
                        c,
                        t.name,
                        p.partition_index,
                        f"OffsetCommit of group {group_id!r}",
                    )

        if by_topic:
            self.to_coordinator(group_id, call)


def _check(
    code: Any,
    c: BrokerConnection,
    topic: str,
    partition: int,
    what: str,
    message: str | None = None,
) -> None:
    if code != ErrorCode.none:
        detail = f": {message}" if message else ""
        raise api_error(
            int(code),
            f"{what} of topic {topic!r} partition {partition} on broker {c.address} failed{detail}",
        )


def _check_admin(result: Any, what: str) -> None:
    if result.error_code != ErrorCode.none:
        message = getattr(result, "error_message", None)
        detail = f": {message}" if message else ""
        raise api_error(int(result.error_code), f"{what} failed{detail}")
