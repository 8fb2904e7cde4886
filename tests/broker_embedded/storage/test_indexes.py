"""OffsetIndex and TimeIndex: file format, zero-filled tails, lookups, Kafka's append rules."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_embedded.errors import (
    IndexCorruptError,
    IndexFullError,
    InvalidOffsetError,
    SegmentOffsetOverflowError,
)
from broker_embedded.storage.offset_index import OffsetIndex, OffsetPosition
from broker_embedded.storage.time_index import TimeIndex, TimestampOffset

from .conftest import KAFKA_37

BASE = 1000


def offset_index_bytes(entries: list[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack(">ii", rel, pos) for rel, pos in entries)


def time_index_bytes(entries: list[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack(">qi", ts, rel) for ts, rel in entries)


def test_offset_index_reads_kafka_file() -> None:
    path = KAFKA_37 / "__consumer_offsets-6" / "00000000000000000000.index"
    index = OffsetIndex.load(path, 0)
    assert [index.entry(i) for i in range(len(index))] == [
        OffsetPosition(3, 4730),
        OffsetPosition(7, 9571),
    ]
    assert index.to_bytes() == path.read_bytes()
    assert index.lookup(0) == OffsetPosition(0, 0)
    assert index.lookup(2) == OffsetPosition(0, 0)
    assert index.lookup(3) == OffsetPosition(3, 4730)
    assert index.lookup(6) == OffsetPosition(3, 4730)
    assert index.lookup(7) == OffsetPosition(7, 9571)
    assert index.lookup(10**12) == OffsetPosition(7, 9571)


def test_time_index_reads_kafka_file() -> None:
    path = KAFKA_37 / "__consumer_offsets-6" / "00000000000000000000.timeindex"
    index = TimeIndex.load(path, 0)
    assert [index.entry(i) for i in range(len(index))] == [
        TimestampOffset(1769791783399, 3),
        TimestampOffset(1769792518093, 7),
        TimestampOffset(1769793578176, 12),
    ]
    assert index.to_bytes() == path.read_bytes()
    assert index.lookup(0) == TimestampOffset(-1, 0)
    assert index.lookup(1769791783398) == TimestampOffset(-1, 0)
    assert index.lookup(1769791783399) == TimestampOffset(1769791783399, 3)
    assert index.lookup(1769793578175) == TimestampOffset(1769792518093, 7)
    assert index.lookup(1769793578176) == TimestampOffset(1769793578176, 12)


@pytest.mark.parametrize("entries", [[], [(5, 100)], [(5, 100), (9, 4300), (12, 9000)]])
def test_offset_index_preallocated_zero_tail_is_not_entries(entries: list) -> None:
    data = offset_index_bytes(entries) + bytes(10 * 1024 * 1024 - 8 * len(entries))
    index = OffsetIndex.from_bytes(data, BASE, source="x.index")
    assert [(o - BASE, p) for o, p in zip(index.offsets(), index.positions(), strict=True)] == (
        entries
    )
    assert index.to_bytes() == offset_index_bytes(entries)


def test_time_index_preallocated_zero_tail_is_not_entries() -> None:
    entries = [(1700000000000, 3), (1700000000500, 3), (1700000001000, 9)]
    data = time_index_bytes(entries) + bytes(12 * 1000)
    index = TimeIndex.from_bytes(data, BASE)
    assert len(index) == 3
    assert index.last_entry == TimestampOffset(1700000001000, BASE + 9)
    assert index.to_bytes() == time_index_bytes(entries)


def test_zero_filled_index_files_are_empty() -> None:
    assert len(OffsetIndex.from_bytes(bytes(8 * 100), BASE)) == 0
    assert len(TimeIndex.from_bytes(bytes(12 * 100), BASE)) == 0
    assert OffsetIndex.from_bytes(b"", BASE).last_entry == OffsetPosition(BASE, 0)
    assert TimeIndex.from_bytes(b"", BASE).last_entry == TimestampOffset(-1, BASE)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (offset_index_bytes([(5, 100)]) + b"\x00" * 4, "not a multiple of the 8-byte"),
        (offset_index_bytes([(5, 100), (4, 200)]), "entry 1 .key 4, value 200."),
        (offset_index_bytes([(5, 100), (6, 100)]), "entry 1"),
        (offset_index_bytes([(5, 100), (0, 0), (9, 300)]), "entry 1"),
        (offset_index_bytes([(-1, 100)]), "entry 0"),
        (offset_index_bytes([(0, 0), (3, 100)]), "entry 0"),
    ],
)
def test_corrupt_offset_index(data: bytes, message: str) -> None:
    with pytest.raises(IndexCorruptError, match=message) as e:
        OffsetIndex.from_bytes(data, BASE, source="/logs/t-0/00000000000000001000.index")
    assert "/logs/t-0/00000000000000001000.index" in str(e.value)


@pytest.mark.parametrize(
    "data",
    [
        time_index_bytes([(10, 1)]) + b"\x00" * 5,
        time_index_bytes([(10, 5), (10, 6)]),
        time_index_bytes([(10, 5), (11, 4)]),
        time_index_bytes([(10, 5), (0, 0), (12, 6)]),
    ],
)
def test_corrupt_time_index(data: bytes) -> None:
    with pytest.raises(IndexCorruptError, match="t.timeindex"):
        TimeIndex.from_bytes(data, BASE, source="t.timeindex")


def test_offset_index_append_rules() -> None:
    index = OffsetIndex(BASE, source="a.index", max_entries=3)
    index.append(BASE + 5, 100)
    with pytest.raises(InvalidOffsetError, match="not above the last entry"):
        index.append(BASE + 5, 200)
    with pytest.raises(InvalidOffsetError, match="not above the last entry"):
        index.append(BASE + 6, 100)
    with pytest.raises(SegmentOffsetOverflowError, match="offset 999"):
        index.append(BASE - 1, 300)
    with pytest.raises(SegmentOffsetOverflowError):
        index.append(BASE + (1 << 31), 300)
    index.append(BASE + (1 << 31) - 1, 300)
    assert not index.is_full()
    with pytest.raises(InvalidOffsetError):
        index.append(BASE + 7, 400)
    assert len(index) == 2


def test_offset_index_full() -> None:
    index = OffsetIndex(0, source="full.index", max_entries=2)
    index.append(1, 10)
    index.append(2, 20)
    assert index.is_full()
    with pytest.raises(IndexFullError, match="full.index"):
        index.append(3, 30)


def test_time_index_maybe_append_rules() -> None:
    index = TimeIndex(BASE, source="a.timeindex", max_entries=2)
    assert index.maybe_append(-1, BASE) is False  # never above the empty index's -1
    assert index.maybe_append(100, BASE + 3) is True
    assert index.maybe_append(100, BASE + 4) is False  # timestamp did not grow
    with pytest.raises(InvalidOffsetError, match="goes below"):
        index.maybe_append(101, BASE + 2)
    with pytest.raises(InvalidOffsetError, match="goes below"):
        index.maybe_append(99, BASE + 5)
    assert index.maybe_append(150, BASE + 3) is True  # same offset, larger timestamp
    with pytest.raises(IndexFullError):
        index.maybe_append(200, BASE + 9)
    assert index.maybe_append(200, BASE + 9, skip_full_check=True) is True
    assert index.to_bytes() == time_index_bytes([(100, 3), (150, 3), (200, 9)])


def test_appends_grow_past_initial_capacity_and_snapshots_stay_valid() -> None:
    index = OffsetIndex(0)
    for i in range(1, 1000):
        index.append(i * 2, i * 100)
    assert len(index) == 999
    assert index.lookup(1001) == OffsetPosition(1000, 50000)
    assert np.array_equal(index.offsets(), np.arange(1, 1000) * 2)
    data = index.to_bytes()
    assert OffsetIndex.from_bytes(data, 0).to_bytes() == data
    assert index.to_bytes(997) == offset_index_bytes([(1996, 99800), (1998, 99900)])


@given(
    st.lists(st.integers(1, 10_000), min_size=0, max_size=60, unique=True),
    st.lists(st.integers(-5, 10_100), min_size=1, max_size=20),
)
def test_offset_lookup_is_largest_entry_at_or_below(rels: list[int], targets: list[int]) -> None:
    rels.sort()
    entries = [(r, 7 * r) for r in rels]
    index = OffsetIndex.from_bytes(offset_index_bytes(entries) + bytes(80), BASE)
    for t in targets:
        below = [e for e in entries if e[0] <= t]
        expected = OffsetPosition(BASE + below[-1][0], below[-1][1]) if below else None
        assert index.lookup(BASE + t) == (expected or OffsetPosition(BASE, 0))


@given(
    st.lists(st.integers(0, 10**13), min_size=0, max_size=60, unique=True),
    st.lists(st.integers(-2, 10**13 + 5), min_size=1, max_size=20),
)
def test_time_lookup_is_largest_entry_at_or_below(stamps: list[int], targets: list[int]) -> None:
    stamps = sorted(s for s in stamps if s > 0)
    entries = [(s, i * 3) for i, s in enumerate(stamps)]
    index = TimeIndex.from_bytes(time_index_bytes(entries) + bytes(120), BASE)
    assert len(index) == len(entries)
    for t in targets:
        below = [e for e in entries if e[0] <= t]
        expected = TimestampOffset(below[-1][0], BASE + below[-1][1]) if below else None
        assert index.lookup(t) == (expected or TimestampOffset(-1, BASE))


def test_entry_ending_in_zero_bytes_is_kept() -> None:
    data = time_index_bytes([(100, 0), (1 << 32, 0)]) + bytes(12 * 5)
    index = TimeIndex.from_bytes(data, BASE)
    assert [index.entry(i) for i in range(len(index))] == [
        TimestampOffset(100, BASE),
        TimestampOffset(1 << 32, BASE),
    ]
    index = OffsetIndex.from_bytes(offset_index_bytes([(1 << 24, 1 << 24)]) + bytes(8), BASE)
    assert index.last_entry == OffsetPosition(BASE + (1 << 24), 1 << 24)
