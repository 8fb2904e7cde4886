"""Where a query starts or ends in each partition, as the options say it (before resolving it
against a log dir): Spark's ``startingOffsets`` / ``endingOffsets`` (``earliest``, ``latest`` or
per-partition JSON), ``startingTimestamp`` / ``endingTimestamp`` (one timestamp for every
partition) and ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp`` (per-partition
JSON); kafkalog's own ``startingOffsets=group:<group id>`` (:class:`GroupOffsets`: a consumer
group's committed offsets, with a fallback for partitions without a commit).

JSON layouts (Spark's)::

    offsets:    {"topicA": {"0": 23, "1": -2}, "topicB": {"0": -1}}   -2 earliest, -1 latest
    timestamps: {"topicA": {"0": 1700000000000, "1": 1700000000000}}   ms since the epoch

The planner (kafka_offset_reader.py) resolves a spec to concrete offsets. Values are frozen and
picklable; parsing raises :class:`InvalidOptionError` naming the option and the value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from broker_embedded.errors import InvalidTopicError
from broker_embedded.storage.topic_partition import TopicPartition
from datasource.option_json import bad_option as _bad
from datasource.option_json import load_option_json

EARLIEST = -2
LATEST = -1
INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class EarliestOffsets:
    """Every partition's log start offset."""

    def __str__(self) -> str:
        return "earliest"


@dataclass(frozen=True)
class LatestOffsets:
    """Every partition's high watermark (last stable offset under read_committed)."""

    def __str__(self) -> str:
        return "latest"


@dataclass(frozen=True)
class SpecificOffsets:
    """One offset per partition; ``EARLIEST`` (-2) and ``LATEST`` (-1) allowed as values."""

    offsets: Mapping[TopicPartition, int]

    def __reduce__(self):
        return (SpecificOffsets, (dict(self.offsets),))

    def __post_init__(self) -> None:
        object.__setattr__(self, "offsets", MappingProxyType(dict(self.offsets)))

    def __str__(self) -> str:
        return _to_json(self.offsets)


@dataclass(frozen=True)
class GlobalTimestamp:
    """The first offset whose record timestamp is >= ``timestamp_ms``, in every partition."""

    timestamp_ms: int

    def __str__(self) -> str:
        return f"timestamp {self.timestamp_ms}"


@dataclass(frozen=True)
class SpecificTimestamps:
    """Per partition, the first offset whose record timestamp is >= its timestamp (ms)."""

    timestamps: Mapping[TopicPartition, int]

    def __reduce__(self):
        return (SpecificTimestamps, (dict(self.timestamps),))

    def __post_init__(self) -> None:
        object.__setattr__(self, "timestamps", MappingProxyType(dict(self.timestamps)))

    def __str__(self) -> str:
        return _to_json(self.timestamps)


GROUP_PREFIX = "group:"
GROUP_FALLBACKS = ("earliest", "latest", "none")
MAX_GROUP_ID_BYTES = (1 << 15) - 1  # a Kafka string: int16 length


@dataclass(frozen=True)
class GroupOffsets:
    """The committed offsets of consumer group ``group_id`` (``startingOffsets=group:<id>``);
    a partition without a commit starts as ``fallback`` says: ``earliest``, ``latest`` or
    ``none`` (an error naming the partitions), as a Kafka consumer's ``auto.offset.reset``."""

    group_id: str
    fallback: str = "latest"

    def __str__(self) -> str:
        return f"{GROUP_PREFIX}{self.group_id}"


OffsetSpec = (
    EarliestOffsets
    | LatestOffsets
    | SpecificOffsets
    | GlobalTimestamp
    | SpecificTimestamps
    | GroupOffsets
)


def parse_offsets(option: str, value: str) -> OffsetSpec:
    """``earliest``, ``latest`` (any case), ``group:<group id>`` (fallback ``latest``; the
    caller sets another) or per-partition offsets JSON (values >= -2)."""
    if value.strip()[: len(GROUP_PREFIX)].lower() == GROUP_PREFIX:
        return GroupOffsets(parse_group_id(option, value, value.strip()[len(GROUP_PREFIX) :]))
    word = value.strip().lower()
    if word == "earliest":
        return EarliestOffsets()
    if word == "latest":
        return LatestOffsets()
    table = _partition_table(option, value, 'earliest, latest or JSON like {"topicA": {"0": 23}}')
    for tp, offset in table.items():
        if offset < EARLIEST:
            raise _bad(
                option, value, f"offset {offset} of {tp} is below -2 (-2 earliest, -1 latest)"
            )
    return SpecificOffsets(table)


def parse_group_id(option: str, value: str, group_id: str) -> str:
    """A consumer group id as Kafka takes it: not empty, at most 32767 UTF-8 bytes (kept
    exactly as given: group ids are case-sensitive and may hold spaces)."""
    if not group_id:
        raise _bad(option, value, "the group id is empty (expected group:<group id>)")
    try:
        size = len(group_id.encode("utf-8"))
    except UnicodeEncodeError:
        raise _bad(option, value, "the group id is not valid Unicode") from None
    if size > MAX_GROUP_ID_BYTES:
        raise _bad(
            option,
            value,
            f"the group id has {size} UTF-8 bytes, above Kafka's {MAX_GROUP_ID_BYTES}",
        )
    return group_id


def parse_timestamps(option: str, value: str) -> SpecificTimestamps:
    """Per-partition timestamps JSON (ms since the epoch, >= 0)."""
    table = _partition_table(option, value, 'JSON like {"topicA": {"0": 1700000000000}}')
    for tp, ts in table.items():
        if ts < 0:
            raise _bad(option, value, f"timestamp {ts} of {tp} is negative")
    return SpecificTimestamps(table)


def parse_timestamp(option: str, value: str) -> GlobalTimestamp:
    """One timestamp (ms since the epoch, >= 0)."""
    try:
        ts = int(value.strip())
    except ValueError:
        raise _bad(option, value, "expected a timestamp in ms since the epoch") from None
    if ts < 0:
        raise _bad(option, value, "the timestamp is negative")
    return GlobalTimestamp(ts)


def _partition_table(option: str, value: str, expected: str) -> dict[TopicPartition, int]:
    data = load_option_json(option, value, expected)
    if not isinstance(data, dict) or not data:
        raise _bad(option, value, f"expected {expected}")
    table: dict[TopicPartition, int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise _bad(option, value, f"topic {topic!r}: expected an object of partition: number")
        for key, number in parts.items():
            try:
                tp = TopicPartition(topic, int(key))
            except (ValueError, InvalidTopicError) as e:
                raise _bad(option, value, f"topic {topic!r} partition {key!r}: {e}") from None
            if isinstance(number, bool) or not isinstance(number, int):
                raise _bad(option, value, f"{tp}: {number!r} is not an integer")
            if number > INT64_MAX:
                raise _bad(option, value, f"{tp}: {number} does not fit a long")
            table[tp] = number
    return table


def _to_json(table: Mapping[TopicPartition, int]) -> str:
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(table):
        out.setdefault(tp.topic, {})[str(tp.partition)] = table[tp]
    return json.dumps(out, separators=(",", ":"))
