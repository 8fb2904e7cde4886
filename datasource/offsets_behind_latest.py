"""How far a streaming query of the ``kafkalog`` source is behind the latest offsets, as the
metrics ``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest`` and ``avgOffsetsBehindLatest``
that Spark's Kafka connector reports in ``sources[i].metrics`` of a query's progress.

Why a function: a Python data source cannot report source metrics. Spark takes them from a
source that implements ``ReportsSourceMetrics``; the classes behind a Python streaming reader
(``PythonMicroBatchStream``, ``PythonMicroBatchStreamWithAdmissionControl``, Spark 4.3) do not,
and the Python side (``DataSourceStreamReader``, the runner
``pyspark/sql/streaming/python_streaming_source_runner.py``) has no call for it. So
``sources[i].metrics`` of a kafkalog query stays empty, and this function works the connector's
values out of what the progress does show: ``latestOffset`` (the latest offsets the reader saw
for the batch, ``reportLatestOffset``) and ``endOffset`` (what the batch consumed up to).

The connector's definitions (``KafkaMicroBatchStream.metrics``): for every partition of the
latest offsets, latest minus consumed; ``min`` and ``max`` as Java longs (``"12"``), ``avg``
their sum divided by their count as a Java double (``Double.toString``: ``"12.5"``, ``"1.0E7"``).
Nothing (``{}``) when either offset is missing. Pure functions of their arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal


def offsets_behind_latest(source: Mapping[str, object]) -> dict[str, str]:
    """The connector's three metrics for one ``sources[i]`` of a progress (a dict, e.g.
    ``query.lastProgress["sources"][0]``), or ``{}`` without ``latestOffset`` or ``endOffset``."""
    latest, consumed = _offsets(source.get("latestOffset")), _offsets(source.get("endOffset"))
    if latest is None or consumed is None:
        return {}
    behind = [
        offset - consumed[topic][partition]
        for topic, parts in latest.items()
        for partition, offset in parts.items()
    ]
    if not behind:
        return {}
    return {
        "minOffsetsBehindLatest": str(min(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "avgOffsetsBehindLatest": java_double(sum(behind) / len(behind)),
    }


def _offsets(value: object) -> dict[str, dict[str, int]] | None:
    """Spark's Kafka offsets JSON (text, as a progress holds it, or parsed); None when absent."""
    if value is None:
        return None
    parsed = json.loads(value) if isinstance(value, str) else value
    return parsed if isinstance(parsed, dict) and parsed else None


def java_double(x: float) -> str:
    """``x`` as Java's ``Double.toString`` writes a finite double: plain decimals with at least
    one fraction digit from 10^-3 up to 10^7, otherwise ``d.dddE<exponent>``; shortest digits."""
    if x == 0:
        return "-0.0" if str(x).startswith("-") else "0.0"
    sign = "-" if x < 0 else ""
    _, digits, exponent = Decimal(repr(abs(x))).normalize().as_tuple()
    text = "".join(map(str, digits))
    point = len(text) + int(exponent)  # the decimal point's place in `text`
    if 1e-3 <= abs(x) < 1e7:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{text}"
        whole, fraction = text[:point].ljust(point, "0"), text[point:]
        return f"{sign}{whole}.{fraction or '0'}"
    return f"{sign}{text[0]}.{text[1:] or '0'}E{point - 1}"
