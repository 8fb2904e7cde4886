"""The compaction job's configuration (``conf/compaction.toml``), loaded from TOML.

File layout (one table; every key but ``log_dirs`` is optional)::

    [compaction]
    log_dirs = ["/data/kafkalog"]        the log dirs to look at (relative: to the working dir)
    topics = [".*"]                      regular expressions a topic must match in full
    map_memory_per_task = 134217728      bytes of one task's offset map (24-byte slots);
                                         Kafka's log.cleaner.dedupe.buffer.size per thread
    load_factor = 0.9                    share of the map's slots a round fills
    min_cleanable_dirty_ratio = 0.5      clean a partition above this dirty ratio (default:
                                         each topic's own min.cleanable.dirty.ratio)
    time_budget_seconds = 3600           no partition starts after it; a round in progress
                                         stops at it (what it swapped in stays)
    lock_wait_seconds = 60               how long a task waits for a write commit before it
                                         skips its partition
    progress_interval_seconds = 10       how often a long run reports progress
    broker_config = "conf/broker.toml"   the broker config whose [topic_defaults] apply
                                         (default: the built-in values)

An unknown key or a bad value is an :class:`InvalidConfigError` naming the key, value and file.
Immutable: thread-safe, and picklable (the job ships it to its Spark tasks).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from broker_embedded.broker_config import BrokerConfig, read_toml
from broker_embedded.storage.log_config import InvalidConfigError, LogConfig

DEFAULT_CONFIG_FILE = Path(__file__).resolve().parent.parent / "conf" / "compaction.toml"
MIN_MAP_MEMORY = 24 * 1024  # 1,024 slots: less is a typo, not a plan
MAX_MAP_MEMORY = 64 << 30


@dataclass(frozen=True)
class CompactionConfig:
    """What the compaction job cleans and with which bounds; see the module docstring."""

    log_dirs: tuple[Path, ...]
    topics: tuple[str, ...] = (".*",)
    map_memory_per_task: int = 128 << 20
    load_factor: float = 0.9
    min_cleanable_dirty_ratio: float | None = None
    time_budget_seconds: float = 3600.0
    lock_wait_seconds: float = 60.0
    progress_interval_seconds: float = 10.0
    topic_defaults: LogConfig = LogConfig()

    def matches(self, topic: str) -> bool:
        return any(re.fullmatch(p, topic) for p in self.topics)

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], source: str = "<config>", base: Path | None = None
    ) -> CompactionConfig:
        """From the ``[compaction]`` table of a parsed TOML file; relative paths are taken
        against ``base`` (default: the working directory) and made absolute."""
        unknown = set(data) - {"compaction"}
        if unknown:
            raise InvalidConfigError(f"{source}: unknown section(s) {sorted(unknown)}")
        table = data.get("compaction")
        if not isinstance(table, Mapping):
            raise InvalidConfigError(f"{source}: no [compaction] table")
        known = {f.name for f in fields(cls) if f.name != "topic_defaults"} | {"broker_config"}
        for key in table:
            if key not in known:
                raise InvalidConfigError(
                    f"{source}: unknown compaction config {key!r} (known: "
                    f"{', '.join(sorted(known))})"
                )
        base = (base or Path.cwd()).resolve()
        v = _Values(table, source)
        values: dict[str, Any] = {
            "log_dirs": tuple(base / p for p in v.strings("log_dirs", required=True)),
            "topics": v.patterns("topics"),
            "map_memory_per_task": v.integer("map_memory_per_task", MIN_MAP_MEMORY, MAX_MAP_MEMORY),
            "load_factor": v.number("load_factor", 0.0, 1.0, low_open=True),
            "min_cleanable_dirty_ratio": v.number("min_cleanable_dirty_ratio", 0.0, 1.0),
            "time_budget_seconds": v.number("time_budget_seconds", 0.0, None, low_open=True),
            "lock_wait_seconds": v.number("lock_wait_seconds", 0.0, None),
            "progress_interval_seconds": v.number(
                "progress_interval_seconds", 0.0, None, low_open=True
            ),
        }
        broker_config = v.string("broker_config")
        if broker_config is not None:
            values["topic_defaults"] = BrokerConfig.load(base / broker_config).topic_defaults
        return cls(**{k: x for k, x in values.items() if x is not None})

    @classmethod
    def load(cls, path: str | Path | None = None) -> CompactionConfig:
        """Read a TOML file (default: ``conf/compaction.toml``); relative paths in it are
        taken against the working directory."""
        p = Path(path) if path is not None else DEFAULT_CONFIG_FILE
        return cls.from_mapping(read_toml(p, "compaction config file"), str(p))


class _Values:
    """Typed access to the ``[compaction]`` table, each rejection naming key, value and file."""

    def __init__(self, table: Mapping[str, Any], source: str) -> None:
        self.table = table
        self.source = source

    def _bad(self, key: str, value: Any, expected: str) -> InvalidConfigError:
        return InvalidConfigError(
            f"{self.source}: invalid value {value!r} for compaction config {key}: {expected}"
        )

    def string(self, key: str) -> str | None:
        value = self.table.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise self._bad(key, value, "must be a non-empty string")
        return value

    def strings(self, key: str, *, required: bool = False) -> tuple[str, ...] | None:
        value = self.table.get(key)
        if value is None:
            if required:
                raise InvalidConfigError(f"{self.source}: compaction config {key} is required")
            return None
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(x, str) and x for x in value)
        ):
            raise self._bad(key, value, "must be a non-empty list of non-empty strings")
        return tuple(value)

    def patterns(self, key: str) -> tuple[str, ...] | None:
        found = self.strings(key)
        for p in found or ():
            try:
                re.compile(p)
            except re.error as e:
                raise self._bad(key, p, f"not a regular expression ({e})") from None
        return found

    def integer(self, key: str, low: int, high: int) -> int | None:
        value = self.table.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self._bad(key, value, f"must be an integer in [{low}, {high}]")
        return value

    def number(
        self, key: str, low: float, high: float | None, *, low_open: bool = False
    ) -> float | None:
        value = self.table.get(key)
        if value is None:
            return None
        ok = not isinstance(value, bool) and isinstance(value, (int, float))
        ok = ok and (value > low if low_open else value >= low)
        ok = ok and (high is None or value <= high)
        if not ok:
            bounds = (
                f"{'(' if low_open else '['}{low:g}, {'inf)' if high is None else f'{high:g}]'}"
            )
            raise self._bad(key, value, f"must be a number in {bounds}")
        return float(value)
