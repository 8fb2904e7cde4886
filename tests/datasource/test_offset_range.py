"""OffsetRange and the calculator that cuts planned ranges into Spark partitions (Spark's
KafkaOffsetRangeCalculator rules, worked out by hand here; byte cuts come from the planner and
are tested with real log dirs in test_kafka_offset_reader.py)."""

from __future__ import annotations

import pytest

from datasource.offset_range import OffsetRange, OffsetRangeCalculator


def r(topic: str, start: int, end: int, partition: int = 0) -> OffsetRange:
    return OffsetRange(topic, partition, start, end)


def test_range_basics() -> None:
    x = r("a", 5, 15)
    assert x.size == 10 and str(x) == "a-0 [5, 15)"
    assert x.topic_partition.dir_name == "a-0"
    assert x.split_at([7, 12]) == [r("a", 5, 7), r("a", 7, 12), r("a", 12, 15)]
    assert x.split_at([]) == [x]
    assert x.divided(3) == [r("a", 5, 8), r("a", 8, 11), r("a", 11, 15)]
    assert r("a", 0, 2).divided(5) == [r("a", 0, 1), r("a", 1, 2)]  # no empty pieces
    with pytest.raises(ValueError, match="not increasing"):
        x.split_at([12, 7])
    with pytest.raises(ValueError, match="not increasing"):
        x.split_at([5])
    with pytest.raises(ValueError, match="start <= end"):
        r("a", 3, 2)


def test_one_spark_partition_per_topic_partition_by_default() -> None:
    ranges = [r("a", 0, 100), r("b", 7, 7), r("c", 3, 4)]
    assert OffsetRangeCalculator().ranges(ranges) == [r("a", 0, 100), r("c", 3, 4)]


def test_min_partitions_not_larger_than_count_changes_nothing() -> None:
    ranges = [r("a", 0, 100), r("b", 0, 10)]
    assert OffsetRangeCalculator(min_partitions=2).ranges(ranges) == ranges


def test_min_partitions_cuts_large_ranges_proportionally() -> None:
    # total 110: a's share round(100/110*4) = 4, b's round(10/110*4) = 0 -> 1: b stays whole;
    # a gets the other 3 parts: 33, 33, 34
    got = OffsetRangeCalculator(min_partitions=4).ranges([r("a", 0, 100), r("b", 0, 10)])
    assert got == [r("a", 0, 33), r("a", 33, 66), r("a", 66, 100), r("b", 0, 10)]


def test_min_partitions_shares_between_large_ranges() -> None:
    # shares: a round(300/400*5)=4, b round(100/400*5)=1 (whole); a gets 5-1=4 parts
    got = OffsetRangeCalculator(min_partitions=5).ranges([r("a", 0, 300), r("b", 0, 100)])
    assert got == [
        r("a", 0, 75),
        r("a", 75, 150),
        r("a", 150, 225),
        r("a", 225, 300),
        r("b", 0, 100),
    ]
    # both large: shares round(3.5) = 4 and round(2.5) = 3 (half up, as Scala's math.round)
    got = OffsetRangeCalculator(min_partitions=6).ranges([r("a", 0, 7), r("b", 0, 5)])
    assert got == [
        r("a", 0, 1),
        r("a", 1, 3),
        r("a", 3, 5),
        r("a", 5, 7),
        r("b", 0, 1),
        r("b", 1, 3),
        r("b", 3, 5),
    ]


def test_max_records_per_partition_cuts_equal_pieces() -> None:
    got = OffsetRangeCalculator(max_records_per_partition=30).ranges([r("a", 0, 100)])
    assert got == [r("a", 0, 25), r("a", 25, 50), r("a", 50, 75), r("a", 75, 100)]
    got = OffsetRangeCalculator(max_records_per_partition=100).ranges([r("a", 0, 100)])
    assert got == [r("a", 0, 100)]


def test_max_records_then_min_partitions() -> None:
    calc = OffsetRangeCalculator(min_partitions=3, max_records_per_partition=60)
    # a -> 2 pieces of 50; b stays: 3 ranges already
    assert calc.ranges([r("a", 0, 100), r("b", 0, 10)]) == [
        r("a", 0, 50),
        r("a", 50, 100),
        r("b", 0, 10),
    ]
    calc = OffsetRangeCalculator(min_partitions=5, max_records_per_partition=60)
    # two pieces of 50 first; each one's share round(50/100*5) = round(2.5) = 3 (Spark's
    # rounding may give more partitions than asked, never fewer)
    got = calc.ranges([r("a", 0, 100)])
    assert [x.size for x in got] == [16, 17, 17, 16, 17, 17]


def test_bytes_first_then_records() -> None:
    calls = []

    def cuts(rng: OffsetRange, max_bytes: int) -> list[int]:
        calls.append((rng, max_bytes))
        return [40] if rng.topic == "a" else []

    calc = OffsetRangeCalculator(max_records_per_partition=25, max_bytes_per_partition=4096)
    got = calc.ranges([r("a", 0, 100), r("b", 0, 10)], cuts)
    assert calls == [(r("a", 0, 100), 4096), (r("b", 0, 10), 4096)]
    assert got == [
        r("a", 0, 20),
        r("a", 20, 40),
        r("a", 40, 60),
        r("a", 60, 80),
        r("a", 80, 100),
        r("b", 0, 10),
    ]
    with pytest.raises(ValueError, match="byte_cuts"):
        OffsetRangeCalculator(max_bytes_per_partition=1).ranges([r("a", 0, 1)])


def test_rejects_non_positive_limits() -> None:
    with pytest.raises(ValueError, match="min_partitions"):
        OffsetRangeCalculator(min_partitions=0)
