"""DescribeConfigs (API key 32), versions 1-4: the configs of topics and of this broker, with
their sources, synonyms (``include_synonyms``, v1+), types and documentation
(``include_documentation``, v3+), as Kafka's ``ConfigHelper`` fills them.

Resources (Kafka's ``ConfigResource.Type``):
- TOPIC (2): every topic config by Kafka's name (or only ``configuration_keys``; unknown keys
  are left out, as Kafka does), with its effective value; not read-only, not sensitive. An
  unknown topic is UNKNOWN_TOPIC_OR_PARTITION (3), an illegal name INVALID_TOPIC_EXCEPTION (17).
- BROKER (4), named by this broker's id: the :class:`BrokerConfig` settings by Kafka's names,
  read-only (this broker has no dynamic configs), and the remote store's (``[rsm_config]``) as
  ``rsm.config.<key>`` (``rsm.config.location``: where tiered segments are; the store's
  secrets sensitive, without their values, as Kafka lists passwords). Another id or a name
  that is no id is INVALID_REQUEST (42), as Kafka answers; the empty name (cluster-wide
  dynamic defaults) has no configs here.
- anything else (e.g. BROKER_LOGGER, 8): INVALID_REQUEST.

Synonyms: the values a config could come from, highest priority first, each with its source
(Kafka's ``ConfigSource``: TOPIC_CONFIG 1, STATIC_BROKER_CONFIG 4, DEFAULT_CONFIG 5); the
config's ``config_source`` is the first synonym's (DEFAULT_CONFIG when there is none), and the
synonyms are listed only when the request asks (``include_synonyms``). For a topic config: the
topic's override (TOPIC_CONFIG), then Kafka's broker configs for it
(``ServerTopicConfigSynonyms``: retention.ms -> log.retention.ms, log.retention.minutes,
log.retention.hours; segment.bytes -> log.segment.bytes; ...): for each name in order the
value the broker config file sets (its ``[topic_defaults]`` entry under the topic config's name
for the primary name, a :class:`BrokerConfig` key otherwise; "set" means away from the
default, since a TOML file equal to the defaults cannot be told apart), then for each name its
default (Kafka's broker default; this broker's where the key is its own). As Kafka, the broker
part starts at the first entry for the primary name: a primary name without a value
(log.retention.ms has no default) drops the whole broker part, so a default retention.ms has
no synonyms and source DEFAULT_CONFIG. For a broker config: the file's value
(STATIC_BROKER_CONFIG) when set, then its default (DEFAULT_CONFIG).

``config_type`` (v3+): Kafka's ``ConfigDef.Type`` of the config (BOOLEAN 1, STRING 2, INT 3,
SHORT 4, LONG 5, DOUBLE 6, LIST 7); ``documentation`` (v3+, when ``include_documentation``): one
line on what the config does here.

Authorization (with an authorizer, as Kafka's ``ConfigHelper``): DescribeConfigs on the topic
for a TOPIC resource (refused: TOPIC_AUTHORIZATION_FAILED, 29), on the Cluster for BROKER,
BROKER_LOGGER and CLIENT_METRICS (CLUSTER_AUTHORIZATION_FAILED, 31), on the group for GROUP
(GROUP_AUTHORIZATION_FAILED, 30); a refused resource has no configs and reads nothing, and, as
Kafka orders them, the refused results follow the allowed ones. A topic's overrides are
changed by AlterConfigs and IncrementalAlterConfigs (alter_configs.py); broker configs are
read-only.

Immutable tables and pure functions; reads the controller's topic entry under its lock.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import timedelta
from types import MappingProxyType, ModuleType
from typing import Any

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.errors import InvalidRequestError, KafkaApiError
from broker_embedded.server.handlers.api_context import (
    ApiContext,
    error_code,
    error_message,
    make,
    response_types,
)
from broker_embedded.server.kafka_apis import KafkaApis
from broker_embedded.server.request_channel import Request
from broker_embedded.server.security.authorizer import AclOperation
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.object_store import SECRET_NAMES, without_userinfo
from broker_embedded.storage.topic_partition import validate_topic

API_KEY = 32
VERSIONS = (1, 4)
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, PASSWORD = 1, 2, 3, 4, 5, 6, 7, 9
RSM_PREFIX = "rsm.config."  # Kafka's remote.log.storage.manager.impl.prefix default
LONG_MAX = str(2**63 - 1)


@dataclass(frozen=True, slots=True)
class Synonym:
    """A value a config could take and where it comes from (``ConfigSource`` id)."""

    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One described config; ``source`` is its first synonym's (DEFAULT_CONFIG without one)."""

    name: str
    value: str | None
    read_only: bool
    config_type: int
    synonyms: tuple[Synonym, ...]
    documentation: str
    sensitive: bool = False  # a secret: its value is never returned (None)

    @property
    def source(self) -> int:
        return self.synonyms[0].source if self.synonyms else DEFAULT_CONFIG


@dataclass(frozen=True, slots=True)
class TopicConfigKey:
    """A topic config: its type, Kafka's broker configs for it (highest priority first), and
    what it does."""

    config_type: int
    broker_synonyms: tuple[str, ...]
    documentation: str


TOPIC_CONFIGS: Mapping[str, TopicConfigKey] = MappingProxyType(
    {
        "cleanup.policy": TopicConfigKey(
            LIST,
            ("log.cleanup.policy",),
            "delete (drop old segments by retention), compact (keep the last record per key) "
            "or both",
        ),
        "segment.bytes": TopicConfigKey(
            INT,
            ("log.segment.bytes",),
            "a segment file rolls when it would grow past this many bytes",
        ),
        "segment.ms": TopicConfigKey(
            LONG,
            ("log.roll.ms", "log.roll.hours"),
            "a segment rolls when its first record is this old (ms)",
        ),
        "segment.index.bytes": TopicConfigKey(
            INT,
            ("log.index.size.max.bytes",),
            "the size of a segment's offset and time index files",
        ),
        "index.interval.bytes": TopicConfigKey(
            INT, ("log.index.interval.bytes",), "bytes of records between two offset index entries"
        ),
        "retention.ms": TopicConfigKey(
            LONG,
            ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
            "segments whose newest record is older than this are deleted (ms; -1: no limit)",
        ),
        "retention.bytes": TopicConfigKey(
            LONG,
            ("log.retention.bytes",),
            "oldest segments are deleted while a partition is larger than this (-1: no limit)",
        ),
        "max.message.bytes": TopicConfigKey(
            INT, ("message.max.bytes",), "the largest record batch a partition accepts"
        ),
        "message.timestamp.type": TopicConfigKey(
            STRING,
            ("log.message.timestamp.type",),
            "CreateTime (the producer's) or LogAppendTime (the broker's) record timestamps",
        ),
        "min.insync.replicas": TopicConfigKey(
            INT,
            ("min.insync.replicas",),
            "replicas that must be in sync for an acks=all produce to succeed",
        ),
        "flush.messages": TopicConfigKey(
            LONG, ("log.flush.interval.messages",), "records appended between two fsyncs of the log"
        ),
        "flush.ms": TopicConfigKey(
            LONG,
            ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
            "the longest time (ms) appended records wait for an fsync",
        ),
        "delete.retention.ms": TopicConfigKey(
            LONG,
            ("log.cleaner.delete.retention.ms",),
            "how long (ms) a compacted topic keeps tombstones and transaction markers",
        ),
        "min.compaction.lag.ms": TopicConfigKey(
            LONG,
            ("log.cleaner.min.compaction.lag.ms",),
            "records younger than this (ms) are not compacted",
        ),
        "max.compaction.lag.ms": TopicConfigKey(
            LONG,
            ("log.cleaner.max.compaction.lag.ms",),
            "records older than this (ms) make a log eligible for compaction",
        ),
        "min.cleanable.dirty.ratio": TopicConfigKey(
            DOUBLE,
            ("log.cleaner.min.cleanable.ratio",),
            "share of uncleaned bytes above which a log is compacted",
        ),
        "compression.type": TopicConfigKey(
            STRING,
            ("compression.type",),
            "codec of stored batches: producer (keep theirs), uncompressed, gzip, snappy, lz4, "
            "zstd",
        ),
        "file.delete.delay.ms": TopicConfigKey(
            LONG,
            ("log.segment.delete.delay.ms",),
            "how long (ms) a deleted segment's files stay before removal",
        ),
        "unclean.leader.election.enable": TopicConfigKey(
            BOOLEAN,
            ("unclean.leader.election.enable",),
            "whether a replica outside the ISR may become leader (losing records)",
        ),
        "remote.storage.enable": TopicConfigKey(
            BOOLEAN,
            (),
            "tiered storage: closed segments are copied to the broker's remote store (KIP-405)",
        ),
        "local.retention.ms": TopicConfigKey(
            LONG,
            ("log.local.retention.ms",),
            "how long (ms) segments stay local once tiered (-2: retention.ms)",
        ),
        "local.retention.bytes": TopicConfigKey(
            LONG,
            ("log.local.retention.bytes",),
            "bytes a tiered partition keeps locally (-2: retention.bytes)",
        ),
        "remote.log.copy.disable": TopicConfigKey(
            BOOLEAN,
            (),
            "a tiered topic's store turns read only: nothing more is copied, local segments go by "
            "retention.*",
        ),
        "remote.log.delete.on.disable": TopicConfigKey(
            BOOLEAN,
            (),
            "needed to turn remote.storage.enable off: the store's segments are then deleted",
        ),
    }
)

# Kafka's defaults of the broker configs above (KafkaConfig); those without one are absent
KAFKA_BROKER_DEFAULTS: Mapping[str, str] = MappingProxyType(
    {
        "log.cleanup.policy": "delete",
        "log.segment.bytes": "1073741824",
        "log.roll.hours": "168",
        "log.index.size.max.bytes": "10485760",
        "log.index.interval.bytes": "4096",
        "log.retention.hours": "168",
        "log.retention.bytes": "-1",
        "message.max.bytes": "1048588",
        "log.message.timestamp.type": "CreateTime",
        "min.insync.replicas": "1",
        "log.flush.interval.messages": LONG_MAX,
        "log.flush.scheduler.interval.ms": LONG_MAX,
        "log.cleaner.delete.retention.ms": "86400000",
        "log.cleaner.min.compaction.lag.ms": "0",
        "log.cleaner.max.compaction.lag.ms": LONG_MAX,
        "log.cleaner.min.cleanable.ratio": "0.5",
        "compression.type": "producer",
        "log.segment.delete.delay.ms": "60000",
        "unclean.leader.election.enable": "false",
        "log.local.retention.ms": "-2",
        "log.local.retention.bytes": "-2",
    }
)

# this broker's settings: Kafka's type (this broker's keys: INT/LONG as their range) and use
BROKER_CONFIGS: Mapping[str, tuple[int, str]] = MappingProxyType(
    {
        "replica.lag.time.max.ms": (LONG, "a follower this long behind leaves the ISR (ms)"),
        "replica.fetch.wait.max.ms": (INT, "a follower fetch's longest wait for data (ms)"),
        "replica.fetch.max.bytes": (INT, "a follower fetch's bytes per partition"),
        "replica.fetch.response.max.bytes": (INT, "a follower fetch's bytes in all"),
        "replica.fetch.backoff.ms": (INT, "a follower's pause after a failed fetch (ms)"),
        "fetch.max.bytes": (INT, "the most bytes a Fetch response carries"),
        "log.retention.check.interval.ms": (LONG, "how often retention deletes segments (ms)"),
        "log.flush.scheduler.interval.ms": (LONG, "how often flush.ms is checked (ms)"),
        "checkpoint.interval.ms": (LONG, "coalescing of the published checkpoint files (ms)"),
        "purgatory.max.pending": (INT, "delayed fetches or produces held at once, per kind"),
        "num.network.threads": (INT, "network threads, each owning connections"),
        "num.io.threads": (INT, "request handler threads"),
        "queued.max.requests": (INT, "requests queued for the handlers before reading stops"),
        "socket.request.max.bytes": (INT, "a larger request closes its connection"),
        "socket.listen.backlog.size": (INT, "connections the listen socket queues before accept"),
        "socket.send.buffer.bytes": (INT, "SO_SNDBUF of a connection (-1: the OS's default)"),
        "socket.receive.buffer.bytes": (INT, "SO_RCVBUF of a connection (-1: the OS's default)"),
        "max.connections": (INT, "connections at once; the acceptor waits at the limit"),
        "max.connections.per.ip": (INT, "connections at once from one address"),
        "connections.max.idle.ms": (LONG, "an idle connection is closed after this (ms)"),
        "queued.max.request.bytes": (
            LONG,
            "request bytes read and handled at once before reading of large frames stops",
        ),
        "queued.max.response.bytes": (
            LONG,
            "Fetch bytes copied and not yet sent; beyond, records are sent from the files",
        ),
        "max.incremental.fetch.session.cache.slots": (INT, "fetch sessions cached at once"),
        "fetch.max.pinned.regions": (INT, "segment descriptors held for sendfile at once"),
        "auto.create.topics.enable": (BOOLEAN, "Metadata naming an unknown topic creates it"),
        "num.partitions": (INT, "partitions of an auto-created topic"),
        "default.replication.factor": (INT, "replication factor of an auto-created topic"),
        "group.initial.rebalance.delay.ms": (
            INT,
            "the first rebalance of an empty group waits (ms)",
        ),
        "group.min.session.timeout.ms": (INT, "the smallest session timeout a member may ask (ms)"),
        "group.max.session.timeout.ms": (INT, "the largest session timeout a member may ask (ms)"),
        "group.max.size": (INT, "members of one consumer group at most"),
        "offsets.topic.num.partitions": (INT, "partitions of __consumer_offsets"),
        "offsets.topic.replication.factor": (
            SHORT,
            "replicas of __consumer_offsets (at most the live brokers)",
        ),
        "offsets.topic.segment.bytes": (INT, "segment size of __consumer_offsets"),
        "offsets.retention.minutes": (
            INT,
            "committed offsets of an Empty group are removed this long after it became Empty",
        ),
        "offsets.retention.check.interval.ms": (LONG, "how often expired offsets are removed"),
        "transaction.state.log.num.partitions": (INT, "partitions of __transaction_state"),
        "transaction.state.log.replication.factor": (
            SHORT,
            "replicas of __transaction_state (at most the live brokers)",
        ),
        "transaction.state.log.min.isr": (INT, "min.insync.replicas of __transaction_state"),
        "transaction.state.log.segment.bytes": (INT, "segment size of __transaction_state"),
        "log.cleaner.threads": (INT, "log cleaner threads (0: no compaction)"),
        "log.cleaner.dedupe.buffer.size": (LONG, "offset map memory over all cleaner threads"),
        "log.cleaner.io.buffer.load.factor": (DOUBLE, "share of the offset map a cleaning fills"),
        "log.cleaner.backoff.ms": (LONG, "a cleaner thread's sleep when nothing is dirty (ms)"),
        "remote.log.storage.system.enable": (BOOLEAN, "tiered storage on this broker (KIP-405)"),
        "remote.log.manager.task.interval.ms": (LONG, "how often closed segments are tiered (ms)"),
        "remote.fetch.max.wait.ms": (INT, "the longest a Fetch waits for its remote read (ms)"),
        "remote.log.reader.threads": (INT, "threads reading remote segments for Fetch"),
        "remote.log.reader.max.pending.tasks": (INT, "remote reads queued at most"),
        "remote.log.manager.copy.max.bytes.per.second": (LONG, "copies to the store, at most"),
        "remote.log.manager.copy.quota.window.num": (INT, "samples of the copy rate"),
        "remote.log.manager.copy.quota.window.size.seconds": (INT, "a copy rate sample's length"),
        "remote.log.manager.fetch.max.bytes.per.second": (LONG, "reads from the store, at most"),
        "remote.log.manager.fetch.quota.window.num": (INT, "samples of the remote fetch rate"),
        "remote.log.manager.fetch.quota.window.size.seconds": (INT, "a fetch rate sample's length"),
    }
)


def register(apis: KafkaApis, ctx: ApiContext) -> None:
    apis.register_responder(API_KEY, *VERSIONS, functools.partial(describe_configs_response, ctx))


def describe_configs_response(ctx: ApiContext, request: Request) -> Any:
    types, body = response_types(request), request.body
    options = (body.include_synonyms, getattr(body, "include_documentation", False))
    refusals = [_refusal(ctx, request, r) for r in body.resources]
    allowed = tuple(
        _result(ctx, types, r, *options)
        for r, refused in zip(body.resources, refusals, strict=True)
        if not refused
    )
    refused = tuple(
        _refused(types, r, e) for r, e in zip(body.resources, refusals, strict=True) if e
    )
    return make(
        types.DescribeConfigsResponse, throttle_time=timedelta(0), results=allowed + refused
    )


def _refusal(ctx: ApiContext, request: Request, resource: Any) -> KafkaApiError | None:
    """The authorization error of describing ``resource`` (module docstring), or None."""
    rtype, name, op = resource.resource_type, resource.resource_name, AclOperation.DESCRIBE_CONFIGS
    if rtype == TOPIC:
        return ctx.topic_refusal(request, op, name)
    if rtype in (BROKER, BROKER_LOGGER, CLIENT_METRICS):
        return ctx.cluster_refusal(request, op)
    if rtype == GROUP:
        return ctx.group_refusal(request, op, name)
    return None


def _refused(types: ModuleType, resource: Any, error: KafkaApiError) -> Any:
    return make(
        types.DescribeConfigsResult,
        error_code=error_code(error),
        error_message=error_message(error),
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        configs=(),
    )


def _result(
    ctx: ApiContext, types: ModuleType, resource: Any, synonyms: bool, documentation: bool
) -> Any:
    try:
        entries = resource_configs(ctx, resource.resource_type, resource.resource_name)
        error = None
    except KafkaApiError as e:
        entries, error = [], e
    keys = resource.configuration_keys
    if keys:  # null or empty: every config, as Kafka
        entries = [e for e in entries if e.name in keys]
    return make(
        types.DescribeConfigsResult,
        error_code=error_code(error),
        error_message=error_message(error),
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        configs=tuple(_config(types, e, synonyms, documentation) for e in entries),
    )


def _config(types: ModuleType, e: ConfigEntry, synonyms: bool, documentation: bool) -> Any:
    listed = tuple(
        make(types.DescribeConfigsSynonym, name=s.name, value=s.value, source=s.source)
        for s in (e.synonyms if synonyms else ())
    )
    return make(
        types.DescribeConfigsResourceResult,
        name=e.name,
        value=e.value,
        read_only=e.read_only,
        config_source=e.source,
        is_sensitive=e.sensitive,
        synonyms=listed,
        config_type=e.config_type,
        documentation=e.documentation if documentation else None,
    )


def resource_configs(ctx: ApiContext, resource_type: int, name: str) -> list[ConfigEntry]:
    if resource_type == TOPIC:
        return topic_configs(ctx, name)
    if resource_type == BROKER:
        return broker_configs(ctx, name)
    raise InvalidRequestError(f"DescribeConfigs: unsupported resource type {resource_type}")


def topic_configs(ctx: ApiContext, topic: str) -> list[ConfigEntry]:
    """Every config of ``topic`` with its synonym chain (module docstring)."""
    validate_topic(topic)
    return configs_of(ctx, ctx.broker.describe_topic(topic).config, ctx.broker.topic_config(topic))


def would_be_configs(
    ctx: ApiContext, topic: str, overrides: Mapping[str, str]
) -> list[ConfigEntry]:
    """Every config a topic created with ``overrides`` would have (CreateTopics'
    ``validate_only`` answer, as Kafka lists them without creating the topic)."""
    effective = ctx.broker.config.topic_defaults.with_overrides(overrides, topic).to_properties()
    return configs_of(ctx, overrides, effective)


def configs_of(
    ctx: ApiContext, overrides: Mapping[str, str], effective: Mapping[str, str]
) -> list[ConfigEntry]:
    """The entries of a topic's ``effective`` config, each with its synonym chain."""
    file_values = _set_in_file(
        ctx.broker.config.topic_defaults.to_properties(), LogConfig().to_properties()
    )
    entries = []
    for name, value in effective.items():
        key = TOPIC_CONFIGS[name]
        chain = [Synonym(name, value, TOPIC_CONFIG)] if name in overrides else []
        chain += _broker_chain(ctx.broker.config, key.broker_synonyms, file_values.get(name))
        entries.append(
            ConfigEntry(name, value, False, key.config_type, tuple(chain), key.documentation)
        )
    return entries


def _broker_chain(
    config: BrokerConfig, names: tuple[str, ...], primary_in_file: str | None
) -> list[Synonym]:
    """Kafka's broker synonyms of a topic config: the values the file sets, then the defaults,
    from the first entry for the primary name ``names[0]`` on (module docstring)."""
    set_here = _broker_values(config)
    defaults = _broker_values(BrokerConfig())
    chain = []
    for n in names:
        value = primary_in_file if n == names[0] else _changed(set_here, defaults, n)
        if value is not None:
            chain.append(Synonym(n, value, STATIC_BROKER_CONFIG))
    for n in names:
        default = defaults.get(n, KAFKA_BROKER_DEFAULTS.get(n))
        if default is not None:
            chain.append(Synonym(n, default, DEFAULT_CONFIG))
    first = next((i for i, s in enumerate(chain) if s.name == names[0]), len(chain))
    return chain[first:]


def _changed(values: Mapping[str, str], defaults: Mapping[str, str], name: str) -> str | None:
    value = values.get(name)
    return value if value is not None and value != defaults.get(name) else None


def _set_in_file(values: Mapping[str, str], defaults: Mapping[str, str]) -> dict[str, str]:
    """The values that differ from their defaults (what a config file visibly sets)."""
    return {k: v for k, v in values.items() if v != defaults.get(k)}


def _broker_values(config: BrokerConfig) -> dict[str, str]:
    """A broker config's settings by Kafka's names, as Kafka prints them."""
    return {
        f.name.replace("_", "."): _text(getattr(config, f.name))
        for f in fields(BrokerConfig)
        if f.name not in ("topic_defaults", "rsm_config")  # rsm_config: the store's secrets
    }


def _text(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def broker_configs(ctx: ApiContext, name: str) -> list[ConfigEntry]:
    """This broker's settings by Kafka's names (module docstring)."""
    if name == "":
        return []
    if not name.isdigit() or int(name) != ctx.broker_id:
        raise InvalidRequestError(
            f"DescribeConfigs: unexpected broker id {name!r}, this is broker {ctx.broker_id}"
        )
    values, defaults = _broker_values(ctx.broker.config), _broker_values(BrokerConfig())
    entries = []
    for key, value in values.items():
        chain = [Synonym(key, defaults[key], DEFAULT_CONFIG)]
        if value != defaults[key]:
            chain.insert(0, Synonym(key, value, STATIC_BROKER_CONFIG))
        config_type, documentation = BROKER_CONFIGS[key]
        entries.append(ConfigEntry(key, value, True, config_type, tuple(chain), documentation))
    return entries + rsm_configs(ctx.broker.config)


def rsm_configs(config: BrokerConfig) -> list[ConfigEntry]:
    """The remote storage manager's settings (``[rsm_config]``) by Kafka's prefix for them,
    ``rsm.config.`` (``remote.log.storage.manager.impl.prefix``): ``rsm.config.location`` tells
    a reader where the store is (without credentials a URI may carry); a secret (the access
    key, secret key, session token) is listed as sensitive without its value, as Kafka lists a
    password."""
    entries = []
    for key, value in config.rsm_config:
        name, secret = RSM_PREFIX + key, key in SECRET_NAMES
        shown = None if secret else without_userinfo(value) if key == "location" else value
        chain = (Synonym(name, shown, STATIC_BROKER_CONFIG),)
        entries.append(
            ConfigEntry(
                name,
                shown,
                True,
                PASSWORD if secret else STRING,
                chain,
                f"the remote store's {key} ([rsm_config])",
                secret,
            )
        )
    return entries
