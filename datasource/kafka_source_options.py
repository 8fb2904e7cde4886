"""The options of the ``kafkalog`` source, parsed once into a frozen :class:`KafkaSourceOptions`.

Spark hands a data source its options as strings under lower-cased keys; :meth:`parse` takes
them (any case) and checks everything it can without the log dir: unknown options, malformed
values and JSON, contradictions. Every error is an :class:`InvalidOptionError` whose message names
the option and the value. The names are Spark's Kafka source names where Spark has the option
(Spark's Kafka connector); the names, defaults and meanings are the one option table,
option_table.py, from which the lists of names below come.

Query kinds: ``parse(options, streaming=False)`` for a batch query (``spark.read``),
``streaming=True`` for a streaming one (``spark.readStream``), ``streaming=None`` when the kind is
not known yet (``DataSource.schema()`` runs for both): then only the checks common to both run,
and :meth:`parse` runs again with the kind once it is known. Batch queries ignore the streaming
limits (``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``, ``maxTriggerDelay``,
``maxBytesPerTrigger``) with a warning, logged once per process and option, as Spark's Kafka source
does (``minOffsetsPerTrigger`` above ``maxOffsetsPerTrigger`` is still an error, as in Spark), and
reject ``commitOffsetsToGroup`` and a start at ``latest``; streaming queries reject the ending
options and ``narrowByFilters``.

Precedence, as in Spark (the lower ones are then ignored): ``startingTimestamp`` >
``startingOffsetsByTimestamp`` > ``startingOffsets``, and the same for the ending options.
Except for kafkalog's ``startingOffsets=group:<group id>`` (a consumer group's committed
offsets, :class:`~datasource.offset_spec.GroupOffsets`): given with ``startingTimestamp`` or
``startingOffsetsByTimestamp`` it is an error, not silently ignored, and so is
``endingOffsets=group:...``. ``startingOffsetsByGroupFallback`` (``earliest``, ``latest``,
``none``; default ``latest``, as a Kafka consumer's ``auto.offset.reset``) goes with it only.
``commitOffsetsToGroup=<group id>`` (streaming only): the group the stream reader commits its
progress to (kafka_stream_reader.py). ``view`` (``records`` or ``latest``), ``view.keepTombstones``
and ``view.mapSize`` (batch only; a streaming query refuses them naming the option): the latest
view (latest_view.py), under which the splitting options are ignored with a warning.

Where the data comes from: ``path`` (a log dir) or ``kafka.bootstrap.servers`` (a cluster, over
the wire protocol), exactly one; ``remoteLogStorage``: the store the brokers tier to
(tiered_fetch_source.py), a URI, or with ``kafka.bootstrap.servers`` ``broker`` (DescribeConfigs'
``rsm.config.location``).

``kafka.*`` options, as Spark's Kafka source takes them
(``KafkaSourceProvider.validateGeneralOptions``): ``kafka.auto.offset.reset``, the key and value
deserializers, ``kafka.enable.auto.commit`` and ``kafka.interceptor.classes`` are rejected with
Spark's messages; ``kafka.group.id`` is accepted with Spark's warning; the client settings of
:data:`CLIENT_SETTINGS` go to the wire client (``client_settings``), and so do the security
options as Spark's connector passes them to its consumer: ``kafka.security.protocol``,
``kafka.ssl.*`` and ``kafka.sasl.*`` (``sasl.jaas.config`` with Kafka's Plain/Scram login
modules; broker_embedded/client/client_security.py), checked here so that a bad one fails the
query naming the option; every other ``kafka.*``
option, and Spark's own consumer options (:data:`SPARK_CONSUMER_OPTIONS`), are accepted with a
warning, logged once per process and option, that they have no effect here.

Immutable and picklable: it travels inside the reader to Spark's planner and executors.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from broker_embedded.client.client_security import ClientSecurity
from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.log_config import parse_boolean
from broker_embedded.storage.object_store import StoreSettings, is_store_uri
from datasource import option_table
from datasource.errors import InvalidOptionError
from datasource.offset_spec import (
    EARLIEST,
    GROUP_FALLBACKS,
    LATEST,
    EarliestOffsets,
    GlobalTimestamp,
    GroupOffsets,
    LatestOffsets,
    OffsetSpec,
    SpecificOffsets,
    SpecificTimestamps,
    parse_group_id,
    parse_offsets,
    parse_timestamp,
    parse_timestamps,
)
from datasource.range_packing import DEFAULT_OPEN_COST, DEFAULT_PACK_BYTES, RangePacker
from datasource.subscription import Assign, Subscribe, SubscribePattern, Subscription

log = logging.getLogger(__name__)

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
DEFAULT_MAX_PARTITION_FETCH_BYTES = 1 << 20  # Kafka consumer's max.partition.fetch.bytes
LOG_DIR_FETCH_BYTES = 8 << 20  # what a task fetches at least from a log dir (task_fetch_bytes)
WIRE_FETCH_BYTES = 4 << 20  # what a task fetches over the wire unless the fetch sizes are set
DEFAULT_FETCH_MAX_BYTES = 50 * (1 << 20)  # Kafka consumer's fetch.max.bytes
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000

# Spark's spelling of every option, by kind: the one option table (option_table.py).
BATCH_AND_STREAMING = option_table.names("read")
BATCH_ONLY = option_table.names("batch")
# The latest view (datasource/latest_view.py): batch queries only, refused by streaming ones.
VIEW_OPTIONS = option_table.names("view")
VIEWS = ("records", "latest")
# The streaming limits: in a batch query Spark's Kafka source logs "<name> option ignored in
# batch queries" and goes on (KafkaSourceProvider.validateBatchOptions); so does this source.
STREAMING_LIMITS = option_table.names("streaming-limit")
STREAMING_ONLY = (*STREAMING_LIMITS, *option_table.names("streaming"))
# Options of Spark's Kafka consumer that mean nothing here: accepted, with a warning.
SPARK_CONSUMER_OPTIONS = option_table.names("spark-consumer")
OPTION_NAMES = {
    name.lower(): name
    for name in BATCH_AND_STREAMING
    + BATCH_ONLY
    + STREAMING_ONLY
    + SPARK_CONSUMER_OPTIONS
    + VIEW_OPTIONS
    + option_table.names("spark-client")
    + ("kafka.bootstrap.servers",)
}
FROM_BROKER = "broker"  # remoteLogStorage with kafka.bootstrap.servers: the brokers say where
# kafka.* settings the wire client takes, by the WireSource field they set (all in ms but one).
CLIENT_SETTINGS = {
    "kafka.client.id": "client_id",
    "kafka.request.timeout.ms": "request_timeout_ms",
    "kafka.socket.connection.setup.timeout.ms": "connect_timeout_ms",
    "kafka.retry.backoff.ms": "retry_backoff_ms",
    "kafka.default.api.timeout.ms": "retry_timeout_ms",
    "kafkaconsumer.polltimeoutms": "poll_timeout_ms",
}
# Spark's own messages (KafkaSourceProvider.validateGeneralOptions) for the kafka.* it rejects.
_STARTING_HINT = (
    "Instead set the source option 'startingOffsets' to 'earliest' or 'latest' to specify where "
    "to start. Structured Streaming manages which offsets are consumed internally, rather than "
    "relying on the kafkaConsumer to do it. This will ensure that no data is missed when new "
    "topics/partitions are dynamically subscribed. Note that 'startingOffsets' only applies when "
    "a new Streaming query is started, and that resuming will always pick up from where the "
    "query left off. See the docs for more details."
)
_DESERIALIZED = (
    "are deserialized as byte arrays with ByteArrayDeserializer. Use DataFrame operations to "
    "explicitly deserialize the"
)
REJECTED_KAFKA = {
    "kafka.auto.offset.reset": "Kafka option 'auto.offset.reset' is not supported. "
    + _STARTING_HINT,
    "kafka.key.deserializer": f"Kafka option 'key.deserializer' is not supported as keys "
    f"{_DESERIALIZED} keys.",
    "kafka.value.deserializer": f"Kafka option 'value.deserializer' is not supported as values "
    f"{_DESERIALIZED} values.",
    "kafka.enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported",
    "kafka.interceptor.classes": "Kafka option 'interceptor.classes' is not supported",
}
GROUP_ID_WARNING = (
    "Kafka option 'kafka.group.id' has been set on this query, it is not recommended to set this "
    "option. This option is unsafe to use since multiple concurrent queries or sources using the "
    "same group id will interfere with each other as they are part of the same consumer group. "
    "Restarted queries may also suffer interference from the previous run having the same group "
    "id. The user should have only one query per group id, and/or set the option "
    "'kafka.session.timeout.ms' to be very small so that the Kafka consumers from the previous "
    "query are marked dead by the Kafka group coordinator before the restarted query starts "
    "running."
)
MIN_VIEW_MAP_BYTES = 1024
_SPLIT_FIELDS = {
    "minPartitions": "min_partitions",
    "maxRecordsPerPartition": "max_records_per_partition",
    "maxBytesPerPartition": "max_bytes_per_partition",
}
_WARNED: set[str] = set()  # options warned about in this process
SUBSCRIPTION_OPTIONS = ("assign", "subscribe", "subscribePattern")
START_STRATEGIES = ("error", "latest")

_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "mib": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
    "tib": 1 << 40,
}
_TIME_UNITS_MS = {
    "": 1,
    "ms": 1,
    "s": 1000,
    "sec": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
}
_SIZE = re.compile(r"\s*([0-9]+)\s*([a-zA-Z]*)\s*")


@dataclass(frozen=True)
class KafkaSourceOptions:
    """Every option of one query, parsed and checked; see the module docstring.

    ``starting`` / ``ending``: where to start and end, by the precedence rules (``ending`` is
    ``None`` for a streaming query). ``narrow_by_filters``: let pushed filters narrow the plan
    (kafka_batch_reader.py says why this is off by default). ``streaming``: the query kind the
    options were checked for (``None``: not known yet). ``commit_to_group``: the consumer
    group a streaming query commits its progress to (``None``: none).
    """

    path: str  # "" when reading a cluster
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None
    starting_strategy: str = "error"
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_bytes_per_partition: int | None = None
    pack_bytes: int = DEFAULT_PACK_BYTES
    pack_open_cost: int = DEFAULT_OPEN_COST
    isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    max_partition_fetch_bytes: int = DEFAULT_MAX_PARTITION_FETCH_BYTES
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    fetch_bytes_set: bool = False  # either fetch size given as an option
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    max_bytes_per_trigger: int | None = None
    narrow_by_filters: bool = False
    streaming: bool | None = False
    bootstrap_servers: str | None = None
    client_settings: tuple[tuple[str, int | str], ...] = ()  # (WireSource field, value)
    commit_to_group: str | None = None
    view: str = "records"
    view_keep_tombstones: bool = False
    view_map_bytes: int | None = None
    store_settings: StoreSettings = StoreSettings()  # fs.s3a.*: a path on object storage
    remote_log_storage: str | None = None  # the store a log dir's broker tiers to

    @property
    def latest_view(self) -> bool:
        """``view=latest``: each partition's latest record per key (latest_view.py)."""
        return self.view == "latest"

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == IsolationLevel.READ_COMMITTED

    @property
    def packer(self) -> RangePacker:
        """How planned ranges are packed into tasks (range_packing.py); under the latest view,
        whose splitting options are ignored, by bytes only."""
        if self.latest_view:
            return RangePacker(self.pack_bytes, self.pack_open_cost)
        return RangePacker(
            self.pack_bytes,
            self.pack_open_cost,
            self.min_partitions,
            self.max_records_per_partition,
        )

    @property
    def fetch_bytes(self) -> int:
        """Bytes one fetch of one partition may return (a batch larger than it still comes
        whole, as in Kafka): ``min(kafka.max.partition.fetch.bytes, kafka.fetch.max.bytes)``."""
        return min(self.max_partition_fetch_bytes, self.fetch_max_bytes)

    @property
    def task_fetch_bytes(self) -> int:
        """Bytes a task asks for per fetch: from a log dir, read in place without a copy, at
        least ``LOG_DIR_FETCH_BYTES``: Spark pays per Arrow batch and the decoder per call, so
        one fetch of a log dir is read ahead to fill one Arrow batch (a 1 MiB fetch of producer
        batches of 1 MB holds one batch, a few thousand rows). Over the wire :attr:`fetch_bytes`
        when either fetch size is set, else ``WIRE_FETCH_BYTES``: one 4 MiB fetch decodes to one
        Arrow batch of about 30,000 rows of 100-byte values, where 1 MiB fetches were joined by
        a copy, and a quarter of the round trips (Spark's read of 2 M records, 4 rounds
        alternating: 8 to 15% fewer CPU-seconds, docs/performance.md); with the one fetch a
        task keeps in flight (wire_fetch_source.py) a task holds at most 8 MiB of responses."""
        if self.bootstrap_servers is not None:
            return self.fetch_bytes if self.fetch_bytes_set else WIRE_FETCH_BYTES
        return max(self.fetch_bytes, LOG_DIR_FETCH_BYTES)

    @classmethod
    def parse(
        cls, options: Mapping[str, str], *, streaming: bool | None = False
    ) -> KafkaSourceOptions:
        """Parse Spark's options (keys in any case); see the module docstring."""
        raw = _normalise(options)
        _check_known(raw, streaming)
        path, bootstrap = _location(raw)
        return cls(
            path=path,
            store_settings=_store_settings(raw),
            remote_log_storage=_remote_log_storage(raw, path),
            bootstrap_servers=bootstrap,
            client_settings=_kafka_params(raw, bootstrap),
            subscription=_subscription(raw),
            starting=_bound(
                raw,
                _STARTING,
                LatestOffsets() if streaming else EarliestOffsets(),
                check=streaming is False,
            ),
            ending=None if streaming else _bound(raw, _ENDING, LatestOffsets(), check=True),
            starting_strategy=_choice(
                raw, "startingOffsetsByTimestampStrategy", START_STRATEGIES, "error"
            ),
            fail_on_data_loss=_bool(raw, "failOnDataLoss", True),
            include_headers=_bool(raw, "includeHeaders", False),
            min_partitions=_positive(raw, "minPartitions", INT32_MAX),
            max_records_per_partition=_positive(raw, "maxRecordsPerPartition", INT64_MAX),
            max_bytes_per_partition=_bytes(raw, "maxBytesPerPartition"),
            pack_bytes=_bytes(raw, "packBytesPerPartition", DEFAULT_PACK_BYTES, minimum=0),
            pack_open_cost=_bytes(raw, "packOpenCostInBytes", DEFAULT_OPEN_COST, minimum=0),
            isolation_level=_isolation(raw),
            max_partition_fetch_bytes=_positive(
                raw, "kafka.max.partition.fetch.bytes", INT32_MAX, DEFAULT_MAX_PARTITION_FETCH_BYTES
            ),
            fetch_max_bytes=_positive(
                raw, "kafka.fetch.max.bytes", INT32_MAX, DEFAULT_FETCH_MAX_BYTES
            ),
            fetch_bytes_set=bool(
                {"kafka.max.partition.fetch.bytes", "kafka.fetch.max.bytes"} & raw.keys()
            ),
            **_streaming_limits(raw, streaming),
            narrow_by_filters=_bool(raw, "narrowByFilters", False),
            streaming=streaming,
            commit_to_group=_group_id(raw, "commitOffsetsToGroup"),
            view=_choice(raw, "view", VIEWS, "records"),
            view_keep_tombstones=_bool(raw, "view.keepTombstones", False),
            view_map_bytes=_bytes(raw, "view.mapSize"),
        )._checked()

    def _checked(self) -> KafkaSourceOptions:
        """Contradictions between options that parse alone."""
        if self.ending is not None:
            _check_order(self.starting, self.ending)
        _check_trigger_order(self.min_offsets_per_trigger, self.max_offsets_per_trigger)
        self._check_view()
        return self

    def _check_view(self) -> None:
        if self.view_map_bytes is not None and self.view_map_bytes < MIN_VIEW_MAP_BYTES:
            raise InvalidOptionError(
                f"option view.mapSize={self.view_map_bytes} is invalid: the offset map needs at "
                f"least {MIN_VIEW_MAP_BYTES} bytes"
            )
        if self.latest_view:
            for name, field in _SPLIT_FIELDS.items():
                if getattr(self, field) is not None:
                    _warn_once(
                        f"view:{name}",
                        f"{name} option ignored with view=latest: a "
                        "partition is one task: a key's versions stay together",
                    )


def _check_trigger_order(lo: int | None, hi: int | None) -> None:
    if lo is not None and hi is not None and lo > hi:
        raise InvalidOptionError(
            f"option minOffsetsPerTrigger={lo} is larger than maxOffsetsPerTrigger={hi}"
        )


# -- parsing helpers -----------------------------------------------------------------------------


def _normalise(options: Mapping[str, str]) -> dict[str, str]:
    raw: dict[str, str] = {}
    for key, value in options.items():
        lower = str(key).strip().lower()
        if lower in raw:
            raise InvalidOptionError(f"option {key} is given twice (option names ignore case)")
        if value is None:
            raise InvalidOptionError(f"option {key} has no value")
        raw[lower] = str(value)
    return raw


def _check_known(raw: dict[str, str], streaming: bool | None) -> None:
    for key, value in raw.items():
        name = OPTION_NAMES.get(key)
        if name is None and key.startswith("kafka."):
            continue  # _kafka_params
        if name is None:
            raise InvalidOptionError(_unknown(key, value))
        if streaming is False and name in STREAMING_LIMITS:
            _warn_once(f"batch:{key}", f"{name} option ignored in batch queries")
        elif streaming is False and name in STREAMING_ONLY:
            raise InvalidOptionError(
                f"option {name}={value!r} applies to streaming queries (spark.readStream) only; "
                "remove it from this batch query"
            )
        if streaming is True and name in VIEW_OPTIONS:
            raise InvalidOptionError(
                f"option {name}={value!r} applies to batch queries (spark.read) only: the latest "
                "view reads each partition's planned range twice, and a stream's micro-batches "
                "would each see only their own records; read the topic with spark.read instead"
            )
        if streaming is True and name in BATCH_ONLY:
            raise InvalidOptionError(
                f"option {name}={value!r} applies to batch queries (spark.read) only: a "
                "streaming query has no end"
            )


def _unknown(key: str, value: str) -> str:
    known = ", ".join(sorted(OPTION_NAMES.values(), key=str.lower))
    return f"unknown option {key}={value!r} for the kafkalog source; the options are: {known}"


def _store_settings(raw: dict[str, str]) -> StoreSettings:
    """The ``fs.s3a.*`` settings of a path on object storage (object_store.py)."""
    try:
        return StoreSettings.parse(raw)
    except ValueError as e:
        raise InvalidOptionError(str(e)) from None


def _remote_log_storage(raw: dict[str, str], path: str) -> str | None:
    """``remoteLogStorage``: the URI of the store the brokers tier to, with a log dir ``path``
    on this file system, or with ``kafka.bootstrap.servers`` (there also :data:`FROM_BROKER`:
    the brokers' ``rsm.config.location``)."""
    value = _get(raw, "remoteLogStorage")
    if value is None:
        return None
    uri = value.strip()
    if path and is_store_uri(path):
        raise InvalidOptionError(
            f"option remoteLogStorage={value!r} goes with a log dir on this file system as path "
            f"(the broker's tiered log dir) or with kafka.bootstrap.servers, not with "
            f"path={path!r}, which is already on object storage"
        )
    if uri.lower() == FROM_BROKER and not path:
        return FROM_BROKER
    if not is_store_uri(uri):
        also = f", or {FROM_BROKER} to ask the brokers" if not path else ""
        raise InvalidOptionError(
            f"option remoteLogStorage={value!r} is invalid: expected the URI of the store the "
            f"broker tiers to (its rsm.config.location), such as s3://bucket/prefix{also}"
        )
    return uri


def _location(raw: dict[str, str]) -> tuple[str, str | None]:
    """``(path, None)`` for a log dir, ``("", bootstrap)`` for a cluster: exactly one."""
    path = raw.get("path", "").strip()
    bootstrap = raw.get("kafka.bootstrap.servers")
    if bootstrap is None:
        if not path:
            raise InvalidOptionError(
                "option path is missing: give the Kafka log dir to read, as "
                'spark.read.format("kafkalog").load("/path/to/log-dir") or .option("path", ...), '
                'or a cluster to read over the Kafka protocol, as .option("kafka.bootstrap.servers"'
                ', "host1:9092,host2:9092")'
            )
        return path, None
    if path:
        raise InvalidOptionError(
            f"options path={path!r} and kafka.bootstrap.servers={bootstrap!r} are both given: "
            "pick one, the log dir to read in place (path) or the cluster to read over the Kafka "
            "protocol (kafka.bootstrap.servers)"
        )
    from broker_embedded.client.wire_fetch_source import parse_bootstrap  # kio: cluster reads

    try:
        parse_bootstrap(bootstrap)
    except ValueError as e:
        raise InvalidOptionError(
            f"option kafka.bootstrap.servers={bootstrap!r} is invalid: {e} (expected "
            "host1:port1,host2:port2)"
        ) from None
    return "", bootstrap.strip()


def _kafka_params(raw: dict[str, str], bootstrap: str | None) -> tuple[tuple[str, int | str], ...]:
    """The wire client's settings among the ``kafka.*`` options; the others rejected or
    warned about as the module docstring says."""
    settings: list[tuple[str, int | str]] = []
    for key, value in sorted(raw.items()):
        if key in REJECTED_KAFKA:
            raise InvalidOptionError(REJECTED_KAFKA[key])
        if is_security_option(key) and bootstrap:
            continue  # security_properties
        if key == "kafka.group.id":
            _warn_once(key, GROUP_ID_WARNING)
        elif key in CLIENT_SETTINGS and bootstrap:
            name = OPTION_NAMES.get(key, key)
            given = value if key == "kafka.client.id" else _positive(raw, name, INT32_MAX)
            settings.append((CLIENT_SETTINGS[key], given))  # type: ignore[arg-type]
        elif (
            (key.startswith("kafka.") and key not in OPTION_NAMES)
            or key in _SPARK_CONSUMER
            or key in CLIENT_SETTINGS
        ):
            where = "kafkalog's Kafka client does not use it" if bootstrap else "reading a log dir"
            name = OPTION_NAMES.get(key, key)
            _warn_once(key, f"option {name}={value!r} has no effect ({where})")
    security = security_properties(raw) if bootstrap else ()
    if security:
        settings.append(("security", security))  # type: ignore[arg-type]
    return tuple(settings)


def is_security_option(key: str) -> bool:
    return key == "kafka.security.protocol" or key.startswith(("kafka.ssl.", "kafka.sasl."))


def security_properties(raw: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The client's security properties among the ``kafka.*`` options (without the prefix),
    checked by the client's parser; InvalidOptionError naming the option otherwise."""
    found = tuple(
        (k[len("kafka.") :], str(v)) for k, v in sorted(raw.items()) if is_security_option(k)
    )
    try:
        ClientSecurity.from_properties(dict(found))
    except ValueError as e:
        raise InvalidOptionError(f"option kafka.*: {e}") from None
    return found


_SPARK_CONSUMER = frozenset(name.lower() for name in SPARK_CONSUMER_OPTIONS)


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning("%s", message)


def _get(raw: dict[str, str], name: str) -> str | None:
    return raw.get(name.lower())


def _subscription(raw: dict[str, str]) -> Subscription:
    given = [name for name in SUBSCRIPTION_OPTIONS if _get(raw, name) is not None]
    if len(given) != 1:
        values = ", ".join(f"{name}={_get(raw, name)!r}" for name in given)
        if given:
            reason = f"got {len(given)}: {values}"
        else:
            reason = "got none"
        raise InvalidOptionError(
            "exactly one of the options assign, subscribe and subscribePattern must be given; "
            + reason
        )
    name = given[0]
    parser = {"assign": Assign, "subscribe": Subscribe, "subscribePattern": SubscribePattern}
    return parser[name].parse(_get(raw, name))  # type: ignore[attr-defined, arg-type]


@dataclass(frozen=True)
class _Bound:
    """What tells the starting options from the ending ones: the option names' prefix, and the
    bound at which a batch read would read nothing (``latest`` for a start, ``earliest`` for an
    end), with its offset in ``<prefix>Offsets`` JSON and what to use instead."""

    prefix: str
    verb: str  # what a partition does at the bound: "starts", "ends"
    empty: type[LatestOffsets | EarliestOffsets]
    empty_offset: int
    empty_word: str
    instead: str
    query: str  # which queries the check applies to, as the message says it


_STARTING = _Bound(
    "starting", "starts", LatestOffsets, LATEST, "latest", "earliest", " for a batch query"
)
_ENDING = _Bound("ending", "ends", EarliestOffsets, EARLIEST, "earliest", "latest", "")


def _bound(raw: dict[str, str], bound: _Bound, default: OffsetSpec, check: bool) -> OffsetSpec:
    """``<prefix>Timestamp`` > ``<prefix>OffsetsByTimestamp`` > ``<prefix>Offsets``: the first
    one given wins (Spark's rule); every one given must parse all the same. ``default`` when none
    is given. With ``check``, rejects a bound that would read nothing, as a whole or for one
    partition of ``<prefix>Offsets``."""
    prefix = bound.prefix
    given: list[OffsetSpec] = []
    if (value := _get(raw, f"{prefix}Timestamp")) is not None:
        given.append(parse_timestamp(f"{prefix}Timestamp", value))
    if (value := _get(raw, f"{prefix}OffsetsByTimestamp")) is not None:
        given.append(parse_timestamps(f"{prefix}OffsetsByTimestamp", value))
    if (value := _get(raw, f"{prefix}Offsets")) is not None:
        given.append(parse_offsets(f"{prefix}Offsets", value))
    groups = [g for g in given if isinstance(g, GroupOffsets)]
    if groups or _get(raw, GROUP_FALLBACK) is not None and bound is _STARTING:
        return _group_bound(raw, bound, groups[0] if groups else None, len(given))
    if not given:
        return default
    spec = given[0]
    if not check:
        return spec
    if isinstance(spec, bound.empty):
        raise InvalidOptionError(
            f"option {prefix}Offsets='{bound.empty_word}' is invalid{bound.query}: it would read "
            f"nothing; use {bound.instead} or specific offsets"
        )
    if isinstance(spec, SpecificOffsets):
        for tp, offset in sorted(spec.offsets.items()):
            if offset == bound.empty_offset:
                raise InvalidOptionError(
                    f"option {prefix}Offsets={spec} is invalid{bound.query}: {tp} {bound.verb} "
                    f"at {offset} ({bound.empty_word})"
                )
    return spec


GROUP_FALLBACK = "startingOffsetsByGroupFallback"


def _group_bound(
    raw: dict[str, str], bound: _Bound, group: GroupOffsets | None, given: int
) -> GroupOffsets:
    """``<prefix>Offsets=group:<id>`` with its fallback; the contradictions are errors (module
    docstring): an ending bound, a starting timestamp option beside it, a fallback without it."""
    prefix = bound.prefix
    if group is None:
        value = _get(raw, "startingOffsets")
        shown = "not set" if value is None else repr(value)
        raise InvalidOptionError(
            f"option {GROUP_FALLBACK}={_get(raw, GROUP_FALLBACK)!r} applies only with "
            f"startingOffsets=group:<group id>; startingOffsets is {shown}"
        )
    if bound is _ENDING:
        raise InvalidOptionError(
            f"option endingOffsets='{group}' is invalid: a consumer group's committed offsets "
            "can only be where a query starts (startingOffsets=group:<group id>)"
        )
    if given > 1:
        others = [
            n
            for n in (f"{prefix}Timestamp", f"{prefix}OffsetsByTimestamp")
            if _get(raw, n) is not None
        ]
        raise InvalidOptionError(
            f"option startingOffsets='{group}' cannot be combined with {' and '.join(others)}: "
            "a query starts at a consumer group's committed offsets or at a timestamp, not both; "
            "remove one of them"
        )
    fallback = _choice(raw, GROUP_FALLBACK, GROUP_FALLBACKS, "latest")
    return GroupOffsets(group.group_id, fallback)


def _group_id(raw: dict[str, str], name: str) -> str | None:
    value = _get(raw, name)
    return None if value is None else parse_group_id(name, value, value)


def _check_order(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Reject an ending before the start where both are known without the log dir."""
    if isinstance(starting, GlobalTimestamp) and isinstance(ending, GlobalTimestamp):
        if ending.timestamp_ms < starting.timestamp_ms:
            raise InvalidOptionError(
                f"option endingTimestamp={ending.timestamp_ms} is before "
                f"startingTimestamp={starting.timestamp_ms}"
            )
    pairs = [
        (SpecificOffsets, "offsets", "startingOffsets", "endingOffsets"),
        (
            SpecificTimestamps,
            "timestamps",
            "startingOffsetsByTimestamp",
            "endingOffsetsByTimestamp",
        ),
    ]
    for kind, attr, start_name, end_name in pairs:
        if isinstance(starting, kind) and isinstance(ending, kind):
            starts, ends = getattr(starting, attr), getattr(ending, attr)
            for tp in sorted(set(starts) & set(ends)):
                lo, hi = starts[tp], ends[tp]
                if lo >= 0 and hi >= 0 and hi < lo:
                    raise InvalidOptionError(
                        f"option {end_name}={ending} ends {tp} at {hi}, before where "
                        f"{start_name}={starting} starts it ({lo})"
                    )


def _bool(raw: dict[str, str], name: str, default: bool) -> bool:
    value = _get(raw, name)
    if value is None:
        return default
    parsed = parse_boolean(value)
    if parsed is None:
        raise InvalidOptionError(f"option {name}={value!r} is invalid: expected true or false")
    return parsed


def _choice(raw: dict[str, str], name: str, allowed: tuple[str, ...], default: str) -> str:
    value = _get(raw, name)
    if value is None:
        return default
    word = value.strip().lower()
    if word not in allowed:
        raise InvalidOptionError(
            f"option {name}={value!r} is invalid: expected one of {', '.join(allowed)}"
        )
    return word


def _positive(
    raw: dict[str, str], name: str, maximum: int, default: int | None = None
) -> int | None:
    value = _get(raw, name)
    if value is None:
        return default
    try:
        n = int(value.strip())
    except ValueError:
        raise InvalidOptionError(
            f"option {name}={value!r} is invalid: expected a positive integer"
        ) from None
    if not 1 <= n <= maximum:
        raise InvalidOptionError(f"option {name}={value!r} is invalid: must be in [1, {maximum}]")
    return n


def _bytes(
    raw: dict[str, str], name: str, default: int | None = None, *, minimum: int = 1
) -> int | None:
    """A byte count of at least ``minimum`` (1: positive): ``1048576``, or with a unit
    (``512k``, ``64m``, ``1g``, ``64MiB``)."""
    value = _get(raw, name)
    if value is None:
        return default
    m = _SIZE.fullmatch(value)
    unit = _BYTE_UNITS.get(m.group(2).lower()) if m else None
    if m is None or unit is None:
        raise InvalidOptionError(
            f"option {name}={value!r} is invalid: expected a byte size such as 1048576, 512k, "
            "64m or 1g"
        )
    n = int(m.group(1)) * unit
    if not minimum <= n <= INT64_MAX:
        what = "positive" if minimum == 1 else f"at least {minimum}"
        raise InvalidOptionError(f"option {name}={value!r} is invalid: must be {what}")
    return n


def _duration_ms(raw: dict[str, str], name: str, default: int) -> int:
    """A duration: ``900000`` (ms), or with a unit (``500ms``, ``30s``, ``15m``, ``1h``, ``1d``)."""
    value = _get(raw, name)
    if value is None:
        return default
    m = _SIZE.fullmatch(value)
    unit = _TIME_UNITS_MS.get(m.group(2).lower()) if m else None
    if m is None or unit is None:
        raise InvalidOptionError(
            f"option {name}={value!r} is invalid: expected a duration such as 500ms, 30s, 15m, "
            "1h or 1d"
        )
    return int(m.group(1)) * unit


def _isolation(raw: dict[str, str]) -> IsolationLevel:
    value = _get(raw, "kafka.isolation.level")
    if value is None:
        return IsolationLevel.READ_UNCOMMITTED
    try:
        return IsolationLevel.parse(value)
    except ValueError:
        raise InvalidOptionError(
            f"option kafka.isolation.level={value!r} is invalid: expected read_uncommitted or "
            "read_committed"
        ) from None


def _streaming_limits(raw: dict[str, str], streaming: bool | None) -> dict[str, int | None]:
    """The streaming limits; none in a batch query (ignored there, with a warning), where, as
    in Spark, only ``minOffsetsPerTrigger`` and ``maxOffsetsPerTrigger`` given together are
    checked (each a number, the minimum not above the maximum)."""
    if streaming is False:
        lo, hi = _get(raw, "minOffsetsPerTrigger"), _get(raw, "maxOffsetsPerTrigger")
        if lo is not None and hi is not None:
            _check_trigger_order(
                _positive(raw, "minOffsetsPerTrigger", INT64_MAX),
                _positive(raw, "maxOffsetsPerTrigger", INT64_MAX),
            )
        return {}
    return {
        "max_offsets_per_trigger": _positive(raw, "maxOffsetsPerTrigger", INT64_MAX),
        "min_offsets_per_trigger": _positive(raw, "minOffsetsPerTrigger", INT64_MAX),
        "max_trigger_delay_ms": _duration_ms(raw, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY_MS),
        "max_bytes_per_trigger": _bytes(raw, "maxBytesPerTrigger"),
    }
