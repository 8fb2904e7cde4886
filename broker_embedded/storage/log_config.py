"""Topic configuration with Kafka's names, defaults and validation (Kafka's ``LogConfig``).

A topic's effective configuration is the broker defaults (``conf/broker.toml``, which uses the
same names as Kafka's topic-level configs) overlaid with the topic's own overrides. Values arrive
as strings or numbers and are parsed once into a frozen :class:`LogConfig`; an unknown name or a
bad value is an :class:`InvalidConfigError` naming the config, the value and the topic.

Immutable values: thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

from broker_embedded.errors import KafkaLogError
from broker_embedded.record.compression import CompressionType

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1


class InvalidConfigError(KafkaLogError):
    """A topic or broker config with an unknown name or a bad value (INVALID_CONFIG)."""


def _long(lo: int, hi: int = LONG_MAX) -> Callable[[Any], int]:
    def parse(v: Any) -> int:
        if isinstance(v, bool):
            raise ValueError("a boolean is not a number")
        n = int(v)
        if not lo <= n <= hi:
            raise ValueError(f"must be in [{lo}, {hi}]")
        return n

    return parse


def _ratio(v: Any) -> float:
    r = float(v)
    if not 0.0 <= r <= 1.0:
        raise ValueError("must be in [0, 1]")
    return r


def _choice(*allowed: str) -> Callable[[Any], str]:
    def parse(v: Any) -> str:
        s = str(v).strip()
        if s not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return s

    return parse


def _cleanup_policy(v: Any) -> str:
    """delete, compact, both, or (as Kafka allows) neither: the empty list."""
    parts = [p.strip() for p in (v if isinstance(v, list) else str(v).split(",")) if p.strip()]
    if any(p not in ("delete", "compact") for p in parts):
        raise ValueError("must be delete, compact, compact,delete or empty")
    return ",".join(sorted(set(parts)))


def parse_boolean(text: str) -> bool | None:
    """A BOOLEAN config value as Kafka's ``ConfigDef`` reads one: ``true`` or ``false`` in any
    case, trimmed; None for anything else (each caller names the option in its own error)."""
    word = text.strip().lower()
    return True if word == "true" else False if word == "false" else None


def _bool(v: Any) -> bool:
    parsed = v if isinstance(v, bool) else parse_boolean(str(v))
    if parsed is None:
        raise ValueError("must be true or false")
    return parsed


# Kafka name -> (LogConfig attribute, parser); the defaults are LogConfig's field defaults.
_SPEC: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "cleanup.policy": ("cleanup_policy", _cleanup_policy),
    "segment.bytes": ("segment_bytes", _long(14, INT_MAX)),
    "segment.ms": ("segment_ms", _long(1)),
    "segment.index.bytes": ("segment_index_bytes", _long(8, INT_MAX)),
    "index.interval.bytes": ("index_interval_bytes", _long(0, INT_MAX)),
    "retention.ms": ("retention_ms", _long(-1)),
    "retention.bytes": ("retention_bytes", _long(-LONG_MAX - 1)),  # < 0: no limit (Kafka)
    "max.message.bytes": ("max_message_bytes", _long(0, INT_MAX)),
    "message.timestamp.type": ("message_timestamp_type", _choice("CreateTime", "LogAppendTime")),
    "min.insync.replicas": ("min_insync_replicas", _long(1, INT_MAX)),
    "flush.messages": ("flush_messages", _long(1)),
    "flush.ms": ("flush_ms", _long(0)),
    "delete.retention.ms": ("delete_retention_ms", _long(0)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _long(0)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _long(1)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
    "compression.type": (
        "compression_type",
        _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
    ),
    "file.delete.delay.ms": ("file_delete_delay_ms", _long(0)),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _bool),
    "remote.storage.enable": ("remote_storage_enable", _bool),
    # -2: the same as retention.* (Kafka's DEFAULT_LOCAL_RETENTION_*); -1: no limit
    "local.retention.ms": ("local_retention_ms", _long(-2)),
    "local.retention.bytes": ("local_retention_bytes", _long(-2)),
    # KIP-950: a tiered topic whose store is read only / turning tiering off deletes the store's
    "remote.log.copy.disable": ("remote_log_copy_disable", _bool),
    "remote.log.delete.on.disable": ("remote_log_delete_on_disable", _bool),
}
CONFIG_NAMES = tuple(_SPEC)


@dataclass(frozen=True)
class LogConfig:
    """The effective configuration of one topic; attribute names mirror Kafka's dotted names."""

    cleanup_policy: str = "delete"
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    retention_ms: int = 604800000
    retention_bytes: int = -1
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    min_insync_replicas: int = 1
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    compression_type: str = "producer"
    file_delete_delay_ms: int = 60000
    unclean_leader_election_enable: bool = False
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False

    # Derived once per config (read on every append): cached in the instance's __dict__,
    # which the frozen dataclass's fields, equality and replace() do not see.
    @cached_property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")

    @cached_property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy.split(",")

    @cached_property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @cached_property
    def target_codec(self) -> CompressionType | None:
        """``compression.type`` as the codec a leader rewrites batches into; ``None`` for
        ``producer`` (keep the producer's)."""
        name = self.compression_type
        if name == "producer":
            return None
        return CompressionType.NONE if name == "uncompressed" else CompressionType[name.upper()]

    @property
    def effective_local_retention_ms(self) -> int:
        """``local.retention.ms``, or ``retention.ms`` for -2 (Kafka's ``localRetentionMs``)."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        """``local.retention.bytes``, or ``retention.bytes`` for -2 (Kafka's
        ``localRetentionBytes``)."""
        return (
            self.retention_bytes if self.local_retention_bytes == -2 else self.local_retention_bytes
        )

    def with_overrides(self, overrides: Mapping[str, Any], topic: str | None = None) -> LogConfig:
        """A new config with Kafka-named ``overrides`` applied (validated)."""
        current = {f.name: getattr(self, f.name) for f in fields(self)}
        return LogConfig(**{**current, **parse_overrides(overrides, topic)})

    def to_properties(self) -> dict[str, str]:
        """Every config by its Kafka name, as strings (what ``describe`` shows)."""
        out = {}
        for name, (attr, _) in _SPEC.items():
            v = getattr(self, attr)
            out[name] = str(v).lower() if isinstance(v, bool) else str(v)
        return out


def parse_overrides(overrides: Mapping[str, Any], topic: str | None = None) -> dict[str, Any]:
    """Kafka-named configs to LogConfig attribute values; rejects unknown names and bad values."""
    where = f" for topic {topic!r}" if topic else ""
    parsed = {}
    for name, value in overrides.items():
        if name not in _SPEC:
            raise InvalidConfigError(
                f"unknown config {name!r}{where} (known: {', '.join(CONFIG_NAMES)})"
            )
        attr, parse = _SPEC[name]
        try:
            parsed[attr] = parse(value)
        except (TypeError, ValueError) as e:
            raise InvalidConfigError(f"invalid value {value!r} for {name}{where}: {e}") from None
    return parsed


def validate_topic_config(
    defaults: LogConfig,
    overrides: Mapping[str, Any],
    topic: str,
    *,
    remote_storage_system_enable: bool,
    existing: Mapping[str, Any] | None = None,
) -> LogConfig:
    """A topic's effective config from a create or alter (``overrides`` over ``defaults``;
    ``existing``: the overrides an alter replaces), checked as Kafka's
    ``LogConfig.validateTopicLogConfigValues`` checks it: with ``remote.storage.enable=true``,
    the broker's ``remote.log.storage.system.enable`` must be on, the topic must not be
    compacted, ``local.retention.bytes`` / ``local.retention.ms`` (unless -2) must be neither
    -1 nor above ``retention.bytes`` / ``retention.ms`` when those are limited, and with
    ``remote.log.copy.disable=true`` (unless -2) equal to them; an alter turning
    ``remote.storage.enable`` off needs ``remote.log.delete.on.disable=true``. Errors are
    :class:`InvalidConfigError` (INVALID_CONFIG) with Kafka's messages, naming the topic."""
    config = defaults.with_overrides(overrides, topic)
    where = f" (topic {topic!r})"
    if not config.remote_storage_enable:
        was = existing is not None and defaults.with_overrides(existing, topic)
        if was and was.remote_storage_enable and not config.remote_log_delete_on_disable:
            raise InvalidConfigError(
                "It is invalid to disable remote storage without deleting remote data. If you "
                "want to keep the remote data and turn to read only, please set "
                "`remote.storage.enable=true,remote.log.copy.disable=true`. If you want to "
                "disable remote storage and delete all remote data, please set "
                f"`remote.storage.enable=false,remote.log.delete.on.disable=true`.{where}"
            )
        return config
    if not remote_storage_system_enable:
        raise InvalidConfigError(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
            f"with remote log storage.{where}"
        )
    if config.compact:
        raise InvalidConfigError(
            f"Remote log storage is unsupported for the compacted topics{where}"
        )
    for local_name, name, local, limit, unlimited in (
        (
            "local.retention.bytes",
            "retention.bytes",
            config.local_retention_bytes,
            config.retention_bytes,
            config.retention_bytes <= -1,
        ),
        (
            "local.retention.ms",
            "retention.ms",
            config.local_retention_ms,
            config.retention_ms,
            config.retention_ms == -1,
        ),
    ):
        if unlimited or local == -2:
            continue
        if local == -1:
            reason = f"Value must not be -1 as {name} value is set as {limit}."
        elif local > limit:
            reason = f"Value must not be more than {name} property value: {limit}"
        else:
            continue
        raise InvalidConfigError(
            f"Invalid value {local} for configuration {local_name}: {reason}{where}"
        )
    _check_copy_disabled(config, where)
    return config


def _check_copy_disabled(config: LogConfig, where: str) -> None:
    """Kafka's ``validateRetentionConfigsWhenRemoteCopyDisabled``: a tiered topic that copies
    no more keeps its local segments by ``retention.*``, so ``local.retention.*`` (unless -2)
    must equal them."""
    if not config.remote_log_copy_disable:
        return
    for local_name, name, local, limit in (
        (
            "local.retention.bytes",
            "retention.bytes",
            config.local_retention_bytes,
            config.retention_bytes,
        ),
        ("local.retention.ms", "retention.ms", config.local_retention_ms, config.retention_ms),
    ):
        if local not in (-2, limit):
            raise InvalidConfigError(
                f"When `remote.log.copy.disable` is set to true, the `{local_name}` and "
                f"`{name}` must be set to the identical value because there will be no more "
                f"logs copied to the remote storage.{where}"
            )


if [f.name for f in fields(LogConfig)] != [attr for attr, _ in _SPEC.values()]:
    raise AssertionError("LogConfig fields and _SPEC disagree")
