"""The record timestamps a write gives its rows: the optional ``timestamp`` column, as Spark 4.x's
Kafka sink takes it (SPARK-50160: ``KafkaWriter.timestampExpression``, ``KafkaWriteTask``).

The column is ``timestamp`` (Spark's TimestampType; Arrow ``timestamp[us]``, any time zone) or
``double`` (seconds since the epoch, Spark's cast of a double to a timestamp); kafka_writer.py's
``check_columns`` refuses any other type. Each value becomes
the record's CreateTime in milliseconds as Spark computes it: microseconds (a double's
``seconds * 10^6`` truncated toward zero) divided by 1000, truncated toward zero. A null value,
or no column at all, is the write's wall-clock time (``now_ms``), as Kafka's producer stamps a
record without a timestamp. A value below 0 ms, or a double that is NaN or infinite, is an
:class:`InvalidWriteError` naming the column and the value (Kafka's producer refuses a negative
timestamp; Spark's ANSI cast refuses NaN and infinities).

Vectorised over an Arrow array (numpy; no Python object per row). Stateless, thread-safe.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from datasource.errors import KafkaSourceError

TIMESTAMP = "timestamp"
MICROS_PER_MS = 1000
MICROS_PER_SECOND = 1_000_000
INT64_MIN, INT64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


class InvalidTimestampError(KafkaSourceError, ValueError):
    """A value of the ``timestamp`` column the sink cannot write."""


def record_timestamps(column: pa.Array | None, n: int, now_ms: int) -> np.ndarray:
    """int64 milliseconds, one per row: the column's values, ``now_ms`` where null or absent."""
    if column is None:
        return np.full(n, now_ms, np.int64)
    if pa.types.is_timestamp(column.type):
        micros = column.cast(pa.timestamp("us", column.type.tz), safe=False).cast(pa.int64())
        values = micros.fill_null(0).to_numpy(zero_copy_only=False)
    else:
        values = _double_micros(column.fill_null(0.0).to_numpy(zero_copy_only=False))
    ms = _truncating_div(values, MICROS_PER_MS)
    if column.null_count:
        ms[column.is_null().to_numpy(zero_copy_only=False)] = now_ms
    bad = np.flatnonzero(ms < 0)
    if bad.size:
        raise InvalidTimestampError(
            f"column 'timestamp': {column[int(bad[0])]} is before 1970-01-01 (a record timestamp "
            f"of {int(ms[bad[0]])} ms); Kafka takes timestamps >= 0 only"
        )
    return ms


def _double_micros(seconds: np.ndarray) -> np.ndarray:
    finite = np.isfinite(seconds)
    if not finite.all():
        raise InvalidTimestampError(
            f"column 'timestamp': {seconds[~finite][0]} is not a timestamp (seconds since the "
            "epoch; Spark's cast refuses NaN and infinities)"
        )
    micros = np.trunc(seconds * MICROS_PER_SECOND)
    if (micros < INT64_MIN).any() or (micros >= 2.0**63).any():
        raise InvalidTimestampError(
            f"column 'timestamp': {seconds[np.argmax(np.abs(micros))]} seconds is out of range"
        )
    return micros.astype(np.int64)


def _truncating_div(values: np.ndarray, divisor: int) -> np.ndarray:
    """``values / divisor`` truncated toward zero (Java's long division), as int64."""
    q = values // divisor
    q += (values % divisor != 0) & (values < 0)
    return q.astype(np.int64, copy=False)
