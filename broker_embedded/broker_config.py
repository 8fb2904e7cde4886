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
    [topic_defaults]
    "cleanup.policy" = "delete" ...           Kafka's topic config names (log_config.py)

An unknown key or a bad value is an :class:`InvalidConfigError` naming the key, value and file.
Immutable: thread-safe.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from broker_embedded.storage.log_config import InvalidConfigError, LogConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_CONFIG_FILE = Path(__file__).resolve().parent.parent / "conf" / "broker.toml"


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
    topic_defaults: LogConfig = field(default_factory=LogConfig)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "<config>") -> BrokerConfig:
        unknown = set(data) - {"broker", "topic_defaults"}
        if unknown:
            raise InvalidConfigError(f"{source}: unknown section(s) {sorted(unknown)}")
        for section in ("broker", "topic_defaults"):
            if not isinstance(data.get(section, {}), Mapping):
                raise InvalidConfigError(f"{source}: [{section}] must be a table")
        values: dict[str, Any] = {}
        names = {
            f.name.replace("_", "."): f.name for f in fields(cls) if f.name != "topic_defaults"
        }
        for key, value in data.get("broker", {}).items():
            if key not in names:
                raise InvalidConfigError(
                    f"{source}: unknown broker config {key!r} (known: {', '.join(sorted(names))})"
                )
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidConfigError(
                    f"{source}: invalid value {value!r} for broker config {key}: must be a "
                    "non-negative integer"
                )
            values[names[key]] = value
        try:
            defaults = LogConfig().with_overrides(data.get("topic_defaults", {}), None)
        except InvalidConfigError as e:
            raise InvalidConfigError(f"{source}: [topic_defaults]: {e}") from None
        return cls(**values, topic_defaults=defaults)

    @classmethod
    def load(cls, path: str | Path | None = None) -> BrokerConfig:
        """Read a TOML file (default: the built-in values, which ``conf/broker.toml`` holds)."""
        if path is None:
            return cls()
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text("utf-8"))
        except FileNotFoundError:
            raise InvalidConfigError(f"broker config file {p} does not exist") from None
        except tomllib.TOMLDecodeError as e:
            raise InvalidConfigError(f"broker config file {p} is not valid TOML: {e}") from None
        return cls.from_mapping(data, str(p))
