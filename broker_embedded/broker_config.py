"""The embedded broker's configuration (a subset of Kafka's ``KafkaConfig``), loaded from TOML.

File layout (``conf/broker.toml`` holds the defaults; every key is optional)::

    [broker]
    "replica.lag.time.max.ms" = 30000         follower out of the ISR after this long behind
    "replica.fetch.wait.max.ms" = 500         a follower's fetch max wait
    "replica.fetch.max.bytes" = 1048576       a follower's per-partition fetch size
    "replica.fetch.response.max.bytes" = 10485760
    "replica.fetch.backoff.ms" = 1000         a follower's pause after a failed fetch
    "fetch.max.bytes" = 57671680              cap on any fetch response (55 MiB)
    "log.retention.check.interval.ms" = 300000
    "log.flush.scheduler.interval.ms" = 1000  how often flush.ms is checked
    "checkpoint.interval.ms" = 100            coalescing of the published checkpoint files
    "purgatory.max.pending" = 10000           delayed fetches/produces held at once per kind
                                              (at least max.connections: one per connection)
    "num.network.threads" = 3                 server processor threads (>= 1), each owns connections
    "num.io.threads" = 8                      server request handler threads (>= 1)
    "queued.max.requests" = 500               request queue bound (>= 1); full: processors stop
                                              reading frames until a handler takes one
    "socket.request.max.bytes" = 104857600    a larger request frame closes its connection (>= 1)
    "socket.listen.backlog.size" = 50         connections the OS queues before accept (>= 1)
    "socket.send.buffer.bytes" = 102400       SO_SNDBUF of each accepted connection, as Kafka
    "socket.receive.buffer.bytes" = 102400    SO_RCVBUF of each (set on the listen socket, so
                                              the TCP window is sized from the handshake);
                                              -1: the OS's default and autotuning
    "max.connections" = (3/4 of RLIMIT_NOFILE) at the limit the acceptor waits for a free slot;
                                              default: the process's descriptor limit (soft
                                              RLIMIT_NOFILE, read at start) less a quarter of
                                              it (at least 64) for segments, pinned regions
                                              and the metrics endpoint: `ulimit -n` 1024 -> 768
    "max.connections.per.ip" = 2147483647     a connection beyond it is closed at accept
    "connections.max.idle.ms" = 600000        a connection idle this long is closed
    "queued.max.request.bytes" = 104857600    request frames over 64 KiB being read or handled
                                              (their declared sizes); when spent, no more large
                                              frames are read until one is answered (>= 1)
    "queued.max.response.bytes" = 67108864    kafkalog's own: Fetch record bytes copied into
                                              memory and not yet sent (beyond the pinned
                                              regions); when spent, records are sent from the
                                              segment files (>= 1)
    "max.incremental.fetch.session.cache.slots" = 1000   fetch sessions (KIP-227) cached at
                                              once (0: none; a full fetch then gets session 0)
    "fetch.max.pinned.regions" = 1024         segment descriptors held by Fetch responses in
                                              flight for ``sendfile``; beyond, a region's bytes
                                              are copied within queued.max.response.bytes, else
                                              sent from the file opened again per write
    "auto.create.topics.enable" = true        a Metadata request naming an unknown topic (with
                                              allow_auto_topic_creation) creates it
    "num.partitions" = 1                      an auto-created topic's partitions (>= 1)
    "default.replication.factor" = 1          an auto-created topic's replication factor (>= 1)
    "group.initial.rebalance.delay.ms" = 3000 the first rebalance of an empty group waits this
                                              long (and again while members keep joining, up
                                              to the rebalance timeout)
    "group.min.session.timeout.ms" = 6000     JoinGroup session timeouts outside min..max are
    "group.max.session.timeout.ms" = 1800000  INVALID_SESSION_TIMEOUT
    "group.max.size" = 2147483647             members per group; one more is
                                              GROUP_MAX_SIZE_REACHED
    "offsets.topic.num.partitions" = 50       __consumer_offsets, created on first use
    "offsets.topic.replication.factor" = 3    (replicas: at most the live brokers)
    "offsets.topic.segment.bytes" = 104857600
    "transaction.state.log.num.partitions" = 50      __transaction_state, created on first use
    "transaction.state.log.replication.factor" = 3   (replicas: at most the live brokers;
    "transaction.state.log.min.isr" = 2               min.insync.replicas at most the replicas)
    "transaction.state.log.segment.bytes" = 104857600
    [log_cleaner]                             (these keys are also accepted under [broker])
    "log.cleaner.threads" = 1                 cleaner threads (0: no cleaner)
    "log.cleaner.dedupe.buffer.size" = 134217728   offset map memory over all cleaner threads
    "log.cleaner.io.buffer.load.factor" = 0.9      share of the map's slots a round fills
    "log.cleaner.backoff.ms" = 15000          a cleaner thread's sleep when nothing is dirty
    "remote.log.storage.system.enable" = false   tiered storage (KIP-405) on this broker: topics
                                              may set remote.storage.enable (Kafka's name)
    "remote.log.manager.task.interval.ms" = 30000  how often the remote log manager looks for
                                              closed segments to copy (Kafka's name and default)
    "remote.fetch.max.wait.ms" = 500          the longest a Fetch waits for its remote read
    "remote.log.reader.threads" = 10          the remote reads' thread pool
    "remote.log.reader.max.pending.tasks" = 100   remote reads queued at most (then an error)
    "remote.log.manager.copy.max.bytes.per.second" = 9223372036854775807   copies to the store
                                              at most this fast (the copier waits)
    "remote.log.manager.copy.quota.window.num" = 11    the samples the copy rate is measured over
    "remote.log.manager.copy.quota.window.size.seconds" = 1   and each sample's length
    "remote.log.manager.fetch.max.bytes.per.second" = 9223372036854775807   consumers' reads
                                              from the store at most this fast (no records
                                              meanwhile)
    "remote.log.manager.fetch.quota.window.num" = 11
    "remote.log.manager.fetch.quota.window.size.seconds" = 1
    [rsm_config]                              the remote storage's settings (Kafka passes its
                                              plugin the rsm.config.* prefix; here the store is
                                              built in, object_store.py):
    "location" = "s3://bucket/prefix"         where tiered segments go (any object_store.py URI)
    "fs.s3a.endpoint" = "http://host:9000"    and the other fs.s3a.* settings of object_store.py;
                                              credentials unset here come from the AWS
                                              environment (never logged)
    [topic_defaults]
    "cleanup.policy" = "delete" ...           Kafka's topic config names (log_config.py)

An unknown key or a bad value is an :class:`InvalidConfigError` naming the key, value and file.
Immutable: thread-safe.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from broker_embedded.storage.log_config import LONG_MAX, InvalidConfigError, LogConfig
from broker_embedded.storage.object_store import SCHEMES, SETTING_NAMES, is_store_uri
from broker_embedded.storage.rlm_quota_manager import RLMQuotaManagerConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_CONFIG_FILE = Path(__file__).resolve().parent.parent / "conf" / "broker.toml"


def default_max_connections() -> int:
    """``max.connections`` by default: the soft RLIMIT_NOFILE less a quarter of it (at least
    64), left for segment files, pinned Fetch regions, the metrics endpoint and the server's
    own sockets (Kafka's operations guide sizes the descriptor limit the same way: connections
    plus log segments). Read when a config is made, i.e. at start."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= 2**31:
        return 2**31 - 1
    return max(1, soft - max(64, soft // 4))


@dataclass(frozen=True)
class BrokerConfig:
    """Broker settings (attribute names mirror Kafka's dotted names) and topic defaults."""

    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1 << 20
    replica_fetch_response_max_bytes: int = 10 << 20
    replica_fetch_backoff_ms: int = 1_000
    fetch_max_bytes: int = 55 << 20
    log_retention_check_interval_ms: int = 300_000
    log_flush_scheduler_interval_ms: int = 1_000
    checkpoint_interval_ms: int = 100
    purgatory_max_pending: int = 10_000
    num_network_threads: int = 3
    num_io_threads: int = 8
    queued_max_requests: int = 500
    socket_request_max_bytes: int = 100 << 20
    socket_listen_backlog_size: int = 50
    socket_send_buffer_bytes: int = 102_400
    socket_receive_buffer_bytes: int = 102_400
    max_connections: int = field(default_factory=default_max_connections)
    max_connections_per_ip: int = 2**31 - 1
    connections_max_idle_ms: int = 600_000
    queued_max_request_bytes: int = 100 << 20
    queued_max_response_bytes: int = 64 << 20
    max_incremental_fetch_session_cache_slots: int = 1_000
    fetch_max_pinned_regions: int = 1_024
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    default_replication_factor: int = 1
    # consumer groups (the group coordinator): Kafka's names and defaults
    group_initial_rebalance_delay_ms: int = 3_000
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = 2**31 - 1
    # Kafka's internal topics (coordinator/internal_topics.py)
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 100 << 20
    offsets_retention_minutes: int = 10_080
    offsets_retention_check_interval_ms: int = 600_000
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 100 << 20
    log_cleaner_threads: int = 1
    log_cleaner_dedupe_buffer_size: int = 128 << 20
    log_cleaner_io_buffer_load_factor: float = 0.9
    log_cleaner_backoff_ms: int = 15_000
    remote_log_storage_system_enable: bool = False
    remote_log_manager_task_interval_ms: int = 30_000
    remote_fetch_max_wait_ms: int = 500
    remote_log_reader_threads: int = 10
    remote_log_reader_max_pending_tasks: int = 100
    remote_log_manager_copy_max_bytes_per_second: int = LONG_MAX
    remote_log_manager_copy_quota_window_num: int = 11
    remote_log_manager_copy_quota_window_size_seconds: int = 1
    remote_log_manager_fetch_max_bytes_per_second: int = LONG_MAX
    remote_log_manager_fetch_quota_window_num: int = 11
    remote_log_manager_fetch_quota_window_size_seconds: int = 1
    # [rsm_config] as (key, value) pairs: the store's location and S3A settings (secrets: no repr)
    rsm_config: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    topic_defaults: LogConfig = field(default_factory=LogConfig)

    @property
    def remote_copy_quota(self) -> RLMQuotaManagerConfig:
        """``remote.log.manager.copy.*``: the tiered storage copier's byte-rate quota."""
        return RLMQuotaManagerConfig(
            self.remote_log_manager_copy_max_bytes_per_second,
            self.remote_log_manager_copy_quota_window_num,
            self.remote_log_manager_copy_quota_window_size_seconds,
        )

    @property
    def remote_fetch_quota(self) -> RLMQuotaManagerConfig:
        """``remote.log.manager.fetch.*``: the byte-rate quota of consumers' remote reads."""
        return RLMQuotaManagerConfig(
            self.remote_log_manager_fetch_max_bytes_per_second,
            self.remote_log_manager_fetch_quota_window_num,
            self.remote_log_manager_fetch_quota_window_size_seconds,
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "<config>") -> BrokerConfig:
        # [security] is the server's (server/security/security_config.py), [log] the command
        # line's (spark_kafkalog/cli_logging.py), read beside this
        unknown = set(data) - {
            "broker",
            "log_cleaner",
            "topic_defaults",
            "security",
            "log",
            "rsm_config",
        }
        if unknown:
            raise InvalidConfigError(f"{source}: unknown section(s) {sorted(unknown)}")
        for section in ("broker", "log_cleaner", "topic_defaults", "rsm_config"):
            if not isinstance(data.get(section, {}), Mapping):
                raise InvalidConfigError(f"{source}: [{section}] must be a table")
        values: dict[str, Any] = {}
        names = {
            f.name.replace("_", "."): f.name
            for f in fields(cls)
            if f.name not in ("topic_defaults", "rsm_config")
        }
        cleaner_names = {k: v for k, v in names.items() if k.startswith("log.cleaner.")}
        for section, known in (("broker", names), ("log_cleaner", cleaner_names)):
            for key, value in data.get(section, {}).items():
                if key not in known:
                    raise InvalidConfigError(
                        f"{source}: unknown {section.replace('_', ' ')} config {key!r} (known: "
                        f"{', '.join(sorted(known))})"
                    )
                if known[key] in values:
                    raise InvalidConfigError(f"{source}: {key} is set twice")
                values[known[key]] = _broker_value(key, value, source)
        try:
            defaults = LogConfig().with_overrides(data.get("topic_defaults", {}), None)
        except InvalidConfigError as e:
            raise InvalidConfigError(f"{source}: [topic_defaults]: {e}") from None
        rsm = _rsm_config(data.get("rsm_config", {}), source)
        if values.get("remote_log_storage_system_enable") and not dict(rsm).get("location"):
            raise InvalidConfigError(
                f"{source}: remote.log.storage.system.enable is true but [rsm_config] has no "
                "location (the object store URI tiered segments go to, e.g. s3://bucket/prefix)"
            )
        return cls(**values, rsm_config=rsm, topic_defaults=defaults)

    @classmethod
    def load(cls, path: str | Path | None = None) -> BrokerConfig:
        """Read a TOML file (default: the built-in values, which ``conf/broker.toml`` holds)."""
        if path is None:
            return cls()
        p = Path(path)
        return cls.from_mapping(read_toml(p, "broker config file"), str(p))


def _rsm_config(table: Mapping[str, Any], source: str) -> tuple[tuple[str, str], ...]:
    """``[rsm_config]``: ``location`` (an object store URI) and object_store.py's settings; an
    unknown key or a value that is not a string is an :class:`InvalidConfigError` naming the
    key (never the value: it may be a secret)."""
    known = ("location", *SETTING_NAMES)
    for key, value in table.items():
        if key not in known:
            raise InvalidConfigError(
                f"{source}: unknown [rsm_config] key {key!r} (known: {', '.join(known)})"
            )
        if not isinstance(value, str):
            raise InvalidConfigError(f"{source}: [rsm_config] {key} must be a string")
    location = table.get("location")
    if location is not None and not is_store_uri(location):
        raise InvalidConfigError(
            f"{source}: [rsm_config] location {location!r} is not an object store URI "
            f"({', '.join(s + '://' for s in SCHEMES)})"
        )
    return tuple(table.items())


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """A TOML file's tables; :class:`InvalidConfigError` naming ``what`` and the file when it
    is missing or not valid TOML."""
    try:
        return tomllib.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise InvalidConfigError(f"{what} {path} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise InvalidConfigError(f"{what} {path} is not valid TOML: {e}") from None


def _broker_value(key: str, value: Any, source: str) -> int | float | bool:
    """A broker config value: a non-negative integer (positive for ``_AT_LEAST_ONE``), for
    the load factor a number in (0, 1], for ``_BOOLEANS`` true or false."""
    if key in _BOOLEANS:
        if not isinstance(value, bool):
            raise InvalidConfigError(
                f"{source}: invalid value {value!r} for broker config {key}: must be true or false"
            )
        return value
    if key == "log.cleaner.io.buffer.load.factor":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise InvalidConfigError(
                f"{source}: invalid value {value!r} for broker config {key}: must be a number in "
                "(0, 1]"
            )
        return float(value)
    if key in _OS_DEFAULT_OR_SIZE:
        if isinstance(value, bool) or not isinstance(value, int) or not (value == -1 or value > 0):
            raise InvalidConfigError(
                f"{source}: invalid value {value!r} for broker config {key}: must be -1 (the "
                "OS's default) or an integer >= 1"
            )
        return value
    least = 1 if key in _AT_LEAST_ONE else 0
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InvalidConfigError(
            f"{source}: invalid value {value!r} for broker config {key}: must be an "
            f"integer >= {least}"
        )
    return value


# keys whose value must be positive (Kafka's atLeast(1) validators)
_AT_LEAST_ONE = frozenset(
    (
        "remote.fetch.max.wait.ms",
        "remote.log.reader.threads",
        "remote.log.reader.max.pending.tasks",
        "num.network.threads",
        "num.io.threads",
        "queued.max.requests",
        "socket.request.max.bytes",
        "socket.listen.backlog.size",
        "queued.max.request.bytes",
        "queued.max.response.bytes",
        "num.partitions",
        "default.replication.factor",
        "group.max.size",
        "offsets.topic.num.partitions",
        "offsets.topic.replication.factor",
        "offsets.topic.segment.bytes",
        "offsets.retention.minutes",
        "offsets.retention.check.interval.ms",
        "transaction.state.log.num.partitions",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "transaction.state.log.segment.bytes",
        "remote.log.manager.task.interval.ms",
        "remote.log.manager.copy.max.bytes.per.second",
        "remote.log.manager.copy.quota.window.num",
        "remote.log.manager.copy.quota.window.size.seconds",
        "remote.log.manager.fetch.max.bytes.per.second",
        "remote.log.manager.fetch.quota.window.num",
        "remote.log.manager.fetch.quota.window.size.seconds",
    )
)
# socket buffer sizes: -1 leaves the OS's default (Kafka's USE_DEFAULT_BUFFER_SIZE)
_OS_DEFAULT_OR_SIZE = frozenset(("socket.send.buffer.bytes", "socket.receive.buffer.bytes"))
# keys whose value is a TOML boolean
_BOOLEANS = frozenset(("auto.create.topics.enable", "remote.log.storage.system.enable"))
