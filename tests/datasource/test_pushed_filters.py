"""PushedFilters: which of Spark's filters narrow the plan and how the ranges shrink (the time
index lookup is given as a function here; the real one is exercised in test_kafkalog_read.py)."""

from __future__ import annotations

import datetime as dt
import pickle

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from broker_embedded.storage.topic_partition import TopicPartition
from datasource.offset_range import OffsetRange
from datasource.pushed_filters import PushedFilters

UTC = dt.timezone.utc
RANGES = [OffsetRange("ab", 0, 0, 100), OffsetRange("ab", 1, 10, 50), OffsetRange("cd", 0, 0, 9)]


def narrowed(filters, first_at=lambda tp, ms: None):
    return PushedFilters.of(filters).narrow(RANGES, first_at)


def test_nothing_pushed_changes_nothing() -> None:
    pushed = PushedFilters.of([])
    assert pushed.is_empty
    assert pushed.narrow(RANGES, lambda tp, ms: 0) == RANGES


def test_topic_and_partition_filters() -> None:
    cases = [
        ([EqualTo(("topic",), "cd")], [RANGES[2]]),
        ([EqualNullSafe(("topic",), "ab")], RANGES[:2]),
        ([In(("topic",), ("cd", "zz"))], [RANGES[2]]),
        ([Not(EqualTo(("topic",), "ab"))], [RANGES[2]]),
        ([Not(In(("topic",), ("ab",)))], [RANGES[2]]),
        ([StringStartsWith(("topic",), "a")], RANGES[:2]),
        ([StringEndsWith(("topic",), "d")], [RANGES[2]]),
        ([StringContains(("topic",), "b")], RANGES[:2]),
        ([EqualTo(("partition",), 1)], [RANGES[1]]),
        ([In(("partition",), (0,))], [RANGES[0], RANGES[2]]),
        ([GreaterThan(("partition",), 0)], [RANGES[1]]),
        ([GreaterThanOrEqual(("partition",), 1)], [RANGES[1]]),
        ([LessThan(("partition",), 1)], [RANGES[0], RANGES[2]]),
        ([LessThanOrEqual(("partition",), 0)], [RANGES[0], RANGES[2]]),
        ([Not(EqualTo(("partition",), 0))], [RANGES[1]]),
        ([EqualTo(("topic",), "ab"), EqualTo(("partition",), 0)], [RANGES[0]]),
        ([EqualNullSafe(("partition",), None)], []),  # never null
    ]
    for filters, expected in cases:
        assert narrowed(filters) == expected, filters


def test_offset_filters() -> None:
    got = narrowed([GreaterThanOrEqual(("offset",), 20), LessThan(("offset",), 40)])
    assert got == [OffsetRange("ab", 0, 20, 40), OffsetRange("ab", 1, 20, 40)]
    got = narrowed([GreaterThan(("offset",), 5), LessThanOrEqual(("offset",), 8)])
    assert got == [OffsetRange("ab", 0, 6, 9), OffsetRange("cd", 0, 6, 9)]
    got = narrowed([EqualTo(("offset",), 10)])
    assert got == [OffsetRange("ab", 0, 10, 11), OffsetRange("ab", 1, 10, 11)]
    got = narrowed([In(("offset",), (3, 60, 12))])
    assert got == [
        OffsetRange("ab", 0, 3, 61),
        OffsetRange("ab", 1, 10, 50),
        OffsetRange("cd", 0, 3, 9),
    ]
    assert narrowed([LessThan(("offset",), -5)]) == []
    assert narrowed([In(("offset",), ())]) == []


def test_timestamp_lower_bounds_use_the_lookup() -> None:
    asked = []

    def first_at(tp: TopicPartition, ms: int) -> int | None:
        asked.append((tp.dir_name, ms))
        return {"ab-0": 30, "ab-1": 5}.get(tp.dir_name)

    t = dt.datetime(2023, 11, 14, 22, 13, 20, 123_456, tzinfo=UTC)  # 1700000000123.456 ms
    got = narrowed([GreaterThan(("timestamp",), t), LessThan(("timestamp",), t)], first_at)
    assert got == [OffsetRange("ab", 0, 30, 100), OffsetRange("ab", 1, 10, 50)]  # cd: no match
    assert asked == [("ab-0", 1700000000123), ("ab-1", 1700000000123), ("cd-0", 1700000000123)]
    later = t + dt.timedelta(seconds=1)
    pushed = PushedFilters.of([In(("timestamp",), (later, t)), EqualTo(("timestamp",), later)])
    assert pushed.min_timestamp_ms == 1700000001123
    other_zone = dt.datetime(2023, 11, 15, 0, 13, 20, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    pushed = PushedFilters.of([GreaterThanOrEqual(("timestamp",), other_zone)])
    assert pushed.min_timestamp_ms == 1700000000000


def test_limiting_nothing() -> None:
    naive = dt.datetime(2023, 1, 1)
    filters = [
        EqualTo(("key",), b"k"),
        IsNotNull(("offset",)),
        EqualTo(("topic",), 3),
        EqualTo(("partition",), True),
        EqualTo(("partition",), "1"),
        Not(GreaterThan(("offset",), 3)),
        GreaterThan(("timestamp",), naive),
        EqualTo(("headers", "key"), "x"),
        Not(EqualTo(("offset",), 3)),
        StringStartsWith(("partition",), "1"),
    ]
    assert PushedFilters.of(filters).is_empty


def test_pickles() -> None:
    pushed = PushedFilters.of([In(("topic",), ("a",)), GreaterThan(("offset",), 3)])
    assert pickle.loads(pickle.dumps(pushed)) == pushed
