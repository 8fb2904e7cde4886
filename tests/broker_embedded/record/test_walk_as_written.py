"""The one header walk run as written (plain Python: what ``kafkalog serve`` runs) and compiled by
numba (``entry_scan_kernel``: the Spark reads, the decoder, the cleaner) gives the same answers:
the same ``walk_entries`` tuple and table, the same ``seek_entry`` answer, and through each
Python caller (``scan_window``, ``records.iter_batches``, ``log_validator.scan``) the same
tables, summaries and errors with the same messages. On every segment of the Kafka-written log
dirs in tests/fixtures, whole and at every window, and on damaged runs (test_entry_walk's
strategy: truncated, bad magic, bad lengths, negative counts and deltas, random bytes)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from broker_embedded.errors import CorruptRecordError
from broker_embedded.record import entry_scan as es
from broker_embedded.record import entry_scan_kernel as kernel
from broker_embedded.record import log_validator as lv
from broker_embedded.record.header_reads import readonly_bytes
from broker_embedded.record.records import iter_batches
from tests.broker_embedded.record.test_entry_walk import damaged
from tests.fixture_paths import FIXTURES

# Kafka-written segments, and batches Kafka's Java library wrote (every codec, control batches)
SEGMENTS = sorted(
    p
    for p in [
        *(FIXTURES / "kafka-logdirs").rglob("*.log"),
        *(FIXTURES / "kafka-java-ref").glob("*.bin"),
    ]
    if p.stat().st_size
)
AS_WRITTEN = (es.walk_entries, es.seek_entry)
COMPILED = (kernel.walk_entries, kernel.seek_entry)


@contextmanager
def walking(walks: tuple) -> Iterator[None]:  # type: ignore[type-arg]
    """The Python callers of this process on ``walks`` (this process has loaded the kernels, so
    it is back on the compiled ones after)."""
    es.use_compiled(*walks)
    try:
        yield
    finally:
        es.use_compiled(*COMPILED)


def both(fn: Callable[[], object]) -> tuple[object, object]:
    """``fn``'s outcome (its result, or its error's type and message) each way."""
    out = []
    for walks in (AS_WRITTEN, COMPILED):
        with walking(walks):
            try:
                result = fn()
            except CorruptRecordError as e:
                result = (type(e).__name__, str(e), e.position, e.base_offset)
        out.append(_plain(result))
    return out[0], out[1]


def _plain(value: object) -> object:
    """Arrays as lists, numpy scalars as ints, recursively: comparable with ``==``."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def _walks_alike(data: bytes) -> None:
    arr = readonly_bytes(data)
    for v2_only in (False, True):
        for limit in (es.NO_LIMIT, 2):
            for rows in (0, 1, 3, 64):
                tables = [np.full((rows, es.SCAN_FIELDS), -7, np.int64) for _ in range(2)]
                python = es.walk_entries(arr, 0, len(arr), v2_only, limit, False, 0, tables[0])
                compiled = kernel.walk_entries(
                    arr, 0, len(arr), v2_only, limit, False, 0, tables[1]
                )
                assert _plain(python) == _plain(compiled)
                assert tables[0].tolist() == tables[1].tolist()
    entries = _plain(es.walk_entries(arr, 0, len(arr), False, es.NO_LIMIT, False, 0, es.NO_ROWS))
    for target in (-1, 0, 1, 5, 1 << 40, es.NO_TARGET):
        assert _plain(es.seek_entry(arr, 0, len(arr), target)) == _plain(
            kernel.seek_entry(arr, 0, len(arr), target)
        ), (target, entries)


def _callers_alike(data: bytes) -> None:
    arr = readonly_bytes(data)
    python, compiled = both(lambda: es.scan_window(arr, 0, len(arr), "walk.log", 100))
    assert python == compiled
    for tail in ("stop", "error"):
        python, compiled = both(
            lambda tail=tail: [
                (b.position, bytes(b.buffer))
                for b in iter_batches(data, "walk.log", base_position=100, tail=tail)
            ]
        )
        assert python == compiled
    for mode, nxt in ((lv.FOLLOWER, 0), (lv.FOLLOWER, 3), (lv.LEADER, 1000)):
        python, compiled = both(
            lambda mode=mode, nxt=nxt: lv.scan(arr, len(arr), mode, nxt, 1 << 20, True)
        )
        assert python == compiled


@pytest.mark.parametrize("segment", SEGMENTS, ids=lambda p: "/".join(p.parts[-3:]))
def test_kafka_written_segments_walk_alike(segment: Path) -> None:
    data = segment.read_bytes()
    _walks_alike(data)
    _callers_alike(data)
    arr = readonly_bytes(data)
    for cut in range(0, len(data), max(1, len(data) // 7)):  # a partial last entry, each way
        _walks_alike(data[:cut])
        python, compiled = both(lambda cut=cut: es.scan_window(arr, cut // 3, cut, "w", 0))
        assert python == compiled


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged())
def test_damaged_runs_walk_alike_with_the_same_errors(data: bytes) -> None:
    _walks_alike(data)
    _callers_alike(data)


def test_the_serve_path_runs_the_walk_as_written_until_the_kernels_load() -> None:
    """``entry_scan.walk`` / ``seek`` are the functions as written in a process that has not
    imported ``entry_scan_kernel`` (the server's), the compiled ones after."""
    with walking(AS_WRITTEN):
        assert not es.compiled()
    assert es.compiled()
    assert kernel.walk_entries.py_func is es.walk_entries  # the same function, compiled
    assert kernel.seek_entry.py_func is es.seek_entry
