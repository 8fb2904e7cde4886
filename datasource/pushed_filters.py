"""Spark's pushed filters turned into limits on the planned offset ranges: :class:`PushedFilters`.

With ``spark.sql.python.filterPushdown.enabled=true`` Spark hands the reader the conjuncts of a
query's filter that compare one column with literals (``pyspark.sql.datasource.Filter``). Those on
``topic``, ``partition``, ``offset`` and ``timestamp`` can narrow the plan, so that fewer bytes
are read:

- ``topic``: ``=``, ``<=>``, ``IN``, ``NOT =``, ``NOT IN``, ``LIKE 'a%'`` / ``'%a'`` /
  ``'%a%'`` choose the partitions read;
- ``partition``: ``=``, ``<=>``, ``IN``, ``NOT =``, ``NOT IN``, ``<``, ``<=``, ``>``, ``>=``;
- ``offset``: ``=``, ``<=>``, ``<``, ``<=``, ``>``, ``>=`` cut every range to the offsets they
  allow; ``IN`` cuts it to ``[min, max]``;
- ``timestamp`` ``>``, ``>=``, ``=``, ``<=>``, ``IN``: the range starts at the first offset whose
  record timestamp is at or after the smallest allowed timestamp (Kafka's ListOffsets by
  timestamp: the time index, then a scan). Every record before that offset has a smaller
  timestamp, so nothing wanted is skipped; records after it may still be older (Kafka's
  timestamps are not monotonic), and an upper bound on the timestamp cannot cut the end of a
  range for the same reason.

Anything else (other columns, other shapes, literals of an unexpected type, naive datetimes)
limits nothing. A literal ``NULL`` compared with ``=`` or ``<=>`` matches nothing: these columns
are never null. The limits only drop rows that the filters drop too, so Spark may (and the batch
reader does) evaluate every filter again. Values are frozen and picklable (they travel inside the
reader).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from broker_embedded.storage.topic_partition import TopicPartition
from datasource.offset_range import OffsetRange

# A predicate on one value: (operator, operand); see _holds.
Predicate = tuple[str, Any]
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_COMPARISONS = {GreaterThan: "gt", GreaterThanOrEqual: "ge", LessThan: "lt", LessThanOrEqual: "le"}
_STRING_MATCHES = {
    StringStartsWith: "startswith",
    StringEndsWith: "endswith",
    StringContains: "contains",
}


@dataclass(frozen=True)
class PushedFilters:
    """The pushed limits, all of which hold (AND); the default limits nothing."""

    topic: tuple[Predicate, ...] = ()
    partition: tuple[Predicate, ...] = ()
    offset_start: int = 0
    offset_end: int | None = None
    min_timestamp_ms: int | None = None

    @classmethod
    def of(cls, filters: Iterable[Filter]) -> PushedFilters:
        """The limits the filters set (all of them hold)."""
        topic: list[Predicate] = []
        partition: list[Predicate] = []
        start, end, min_ts = 0, None, None
        for f in filters:
            column, pred = _predicate(f)
            if column == "topic" and _all(pred, str):
                topic.append(pred)
            elif column == "partition" and _all(pred, int) and pred[0] not in _STRING_OPS:
                partition.append(pred)
            elif column == "offset" and _all(pred, int) and pred[0] not in _STRING_OPS | {"ne"}:
                lo, hi = _offset_bounds(pred)
                start = max(start, lo)
                end = hi if end is None or (hi is not None and hi < end) else end
            elif column == "timestamp" and pred is not None and pred[0] in ("eq", "in", "gt", "ge"):
                low = _smallest_timestamp_ms(pred)
                if low is not None:
                    min_ts = low if min_ts is None else max(min_ts, low)
        return cls(tuple(topic), tuple(partition), start, end, min_ts)

    @property
    def is_empty(self) -> bool:
        """True when nothing is limited."""
        return self == PushedFilters()

    def allows(self, tp: TopicPartition) -> bool:
        return all(_holds(p, tp.topic) for p in self.topic) and all(
            _holds(p, tp.partition) for p in self.partition
        )

    def narrow(
        self,
        ranges: Sequence[OffsetRange],
        offset_for_timestamp: Callable[[TopicPartition, int], int | None],
    ) -> list[OffsetRange]:
        """``ranges`` without the partitions and offsets the filters rule out (empty ranges
        are dropped). ``offset_for_timestamp(tp, ms)``: the first offset whose record timestamp
        is >= ``ms``, ``None`` if none below the range ends (the planner's)."""
        out = []
        for r in ranges:
            tp = r.topic_partition
            if not self.allows(tp):
                continue
            start = max(r.start, self.offset_start)
            end = r.end if self.offset_end is None else min(r.end, self.offset_end)
            if start < end and self.min_timestamp_ms is not None:
                first = offset_for_timestamp(tp, self.min_timestamp_ms)
                start = end if first is None else max(start, first)
            if start < end:
                out.append(OffsetRange(r.topic, r.partition, start, end))
        return out


_STRING_OPS = frozenset(_STRING_MATCHES.values())


def _predicate(f: Filter) -> tuple[str | None, Predicate | None]:
    """(column, predicate) of a filter on one top-level column, else (None, None)."""
    negated = isinstance(f, Not)
    inner = f.child if negated else f
    path = getattr(inner, "attribute", None)
    if not isinstance(path, tuple) or len(path) != 1:
        return None, None
    value = getattr(inner, "value", None)
    if isinstance(inner, (EqualTo, EqualNullSafe)):
        pred: Predicate = ("in", frozenset()) if value is None else ("eq", value)
    elif isinstance(inner, In):
        values = tuple(value)
        if any(v is None for v in values):
            return None, None
        pred = ("in", frozenset(values))
    elif type(inner) in _COMPARISONS and value is not None:
        pred = (_COMPARISONS[type(inner)], value)
    elif type(inner) in _STRING_MATCHES and isinstance(value, str):
        pred = (_STRING_MATCHES[type(inner)], value)
    else:
        return None, None
    if negated:
        if pred[0] == "eq":
            pred = ("ne", pred[1])
        elif pred[0] == "in":
            pred = ("nin", pred[1])
        else:
            return None, None
    return path[0], pred


def _all(pred: Predicate | None, kind: type) -> bool:
    """The predicate's literals are all of ``kind`` (never ``bool`` for ``int``)."""
    if pred is None:
        return False
    values = pred[1] if pred[0] in ("in", "nin") else (pred[1],)
    return all(isinstance(v, kind) and not isinstance(v, bool) for v in values)


def _holds(pred: Predicate, v: Any) -> bool:
    op, operand = pred
    if op == "eq":
        return v == operand
    if op == "ne":
        return v != operand
    if op == "in":
        return v in operand
    if op == "nin":
        return v not in operand
    if op == "gt":
        return v > operand
    if op == "ge":
        return v >= operand
    if op == "lt":
        return v < operand
    if op == "le":
        return v <= operand
    if op == "startswith":
        return v.startswith(operand)
    if op == "endswith":
        return v.endswith(operand)
    if op == "contains":
        return operand in v
    raise ValueError(f"unknown predicate {pred!r}")


def _offset_bounds(pred: Predicate) -> tuple[int, int | None]:
    """``[start, end)`` (``None``: no end) of the offsets a predicate on ``offset`` allows
    (exactly, but for ``IN``: from its smallest to its largest value)."""
    op, v = pred
    if op == "eq":
        return v, v + 1
    if op == "gt":
        return v + 1, None
    if op == "ge":
        return v, None
    if op == "lt":
        return 0, v
    if op == "le":
        return 0, v + 1
    if not v:  # IN () or = NULL: nothing
        return 0, 0
    return min(v), max(v) + 1


def _smallest_timestamp_ms(pred: Predicate) -> int | None:
    """The ms (floor) of the smallest timestamp a lower-bound predicate allows; ``None`` if
    unknown (a literal that is not a time-zone-aware datetime) or before the epoch."""
    values = tuple(pred[1]) if pred[0] == "in" else (pred[1],)
    aware = [isinstance(v, dt.datetime) and v.utcoffset() is not None for v in values]
    if not values or not all(aware):
        return None
    ms = min((v - _EPOCH) // dt.timedelta(microseconds=1) for v in values) // 1000
    return ms if ms >= 0 else None
