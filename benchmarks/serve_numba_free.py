"""What a ``kafkalog serve`` without numba would cost and save: the request path's compiled header
walks against a plain-Python walk of the same headers, and the memory numba takes.

    .venv/bin/python benchmarks/serve_numba_free.py [--repeat R] [--calls C]
                                                    [--records-per-batch 150,9000]

The serve path runs numba for two things: a produce request's checks on the leader
(``log_validator.scan`` and ``assign``: the header walk, the per-batch checks, the offsets
assigned, the summary) and a fetch's walk over batch headers (``entry_scan.seek_entry``: the
first batch at or after the fetch offset from the index's position). This script times, per
request and in CPU (``time.process_time``, best of R, default 5, of a loop of C calls, default
2,000):

- produce: one request holding one batch (librdkafka sends one batch a partition a request) of
  K records of 100-byte values (``--records-per-batch``, default 150 and 9,000: about the 16 KiB
  and the 1 MB ``batch.size``), and one holding 64 batches of K[0] records (a Java producer's
  request with many partitions' worth of batches): the compiled ``scan`` + ``assign`` against
  :func:`py_scan` + :func:`py_assign`, a plain-Python walk (one ``struct.unpack_from`` a batch)
  that checks what the compiled one checks and returns the same table and summary (compared
  before timing); the ``crc32c`` of the batches, which both paths pay, beside them;
- fetch: the walk from a 1 MiB region's start to its last batch (the worst case: the index's
  position is at most ``index.interval.bytes``, 4 KiB, before the batch, so a fetch usually
  walks one or two headers), in batches of K[0] records: ``seek_entry`` against
  :func:`py_seek`.

Then the memory, each in a fresh child process (VmRSS, RssAnon and RssFile from
``/proc/self/status``): the modules a numba-free path needs (numpy, crc32c, struct) against
``broker_embedded.server.broker_server`` (which imports numba) with the request kernels loaded
from the cache (``log_validator.warm_up``, ``seek_entry``), as serve's start does. Prints a
markdown table. The plain-Python walk is a prototype in this file, not the product's.
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import crc32c  # noqa: E402
import numpy as np  # noqa: E402

from broker_embedded.record import entry_scan as es  # noqa: E402
from broker_embedded.record import log_validator as lv  # noqa: E402
from broker_embedded.record.batch_layout import CONTROL_MASK, TRANSACTIONAL_MASK  # noqa: E402
from broker_embedded.record.kernel_primitives import readonly_bytes  # noqa: E402
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder  # noqa: E402

# base offset, length, epoch, magic, crc, attributes, last delta, base ts, max ts, producer id,
# producer epoch, base sequence, count: the 61-byte v2 batch header
_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_EPOCH = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
MIN_V2_BODY = es.MIN_ENTRY_BODY[2]


def py_scan(buf, end: int, next_offset: int, max_message_bytes: int, from_client: bool):  # type: ignore[no-untyped-def]
    """``log_validator.scan(buf, end, LEADER, ...)`` in plain Python: the same table and
    summary; ``S_OK`` 0 where the compiled walk says 0."""
    rows: list[tuple[int, ...]] = []
    pos = 0
    summary = [0] * lv.SUMMARY
    offset, records, producers, max_ts, of_max, last = next_offset, 0, 0, -1, -1, -1
    while pos < end:
        if end - pos < _HEADER.size:
            return _table(rows), summary
        base, length, epoch, magic, crc, attr, delta, base_ts, mts, pid, pepoch, seq, count = (
            _HEADER.unpack_from(buf, pos)
        )
        size = length + 12
        if magic != 2 or length < MIN_V2_BODY or size > end - pos or count < 0 or delta < 0:
            return _table(rows), summary
        control = attr & CONTROL_MASK != 0
        if (
            size > max_message_bytes or count == 0 or count != delta + 1
            or (control and from_client) or (pid >= 0 and seq < 0 and not control)
            or (attr & TRANSACTIONAL_MASK and pid < 0)
        ):  # fmt: skip
            return _table(rows), summary
        rows.append((pos, size, 2, offset, attr, delta, base_ts, mts, pid, count, crc, epoch,
                     pepoch, seq))  # fmt: skip
        last = offset + delta
        offset += delta + 1
        records += count
        producers += pid >= 0
        if mts > max_ts:
            max_ts, of_max = mts, last
        pos += size
    table = _table(rows)
    if not rows:
        return table, summary
    summary[lv.S_OK], summary[lv.S_ROWS], summary[lv.S_END] = 1, len(rows), pos
    summary[lv.S_FIRST_OFFSET], summary[lv.S_LAST_OFFSET] = next_offset, last
    summary[lv.S_RECORDS], summary[lv.S_PRODUCERS] = records, producers
    summary[lv.S_MAX_TS] = max_ts
    summary[lv.S_OFFSET_OF_MAX_TS] = last if of_max < 0 else of_max
    return table, summary


def _table(rows: list[tuple[int, ...]]) -> np.ndarray:
    return np.array(rows, np.int64).reshape(len(rows), lv.COLUMNS)


def py_assign(buf: bytearray, table: np.ndarray, leader_epoch: int) -> None:
    for pos, base in table[:, [es.S_POS, es.S_OFFSET]].tolist():
        _OFFSET_EPOCH.pack_into(buf, pos, base)
        _EPOCH.pack_into(buf, pos + 12, leader_epoch)


def py_seek(buf, start: int, stop: int, target: int) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """(position, last offset) of the first v2 batch from ``start`` whose last offset reaches
    ``target`` (the found case of ``entry_scan.seek_entry``)."""
    unpack, pos = _HEADER.unpack_from, start
    while pos + 61 <= stop:
        base, length, _, magic, _, _, delta, *_ = unpack(buf, pos)
        if magic != 2 or length < MIN_V2_BODY or delta < 0:
            break
        if base + delta >= target:
            return pos, base + delta
        pos += length + 12
    raise ValueError(f"no batch reaches offset {target} in [{start}, {stop})")


def batches(count: int, records: int, value_bytes: int = 100) -> bytes:
    out = bytearray()
    value = b"v" * value_bytes
    for b in range(count):
        builder = MemoryRecordsBuilder(b * records)
        for i in range(records):
            builder.append(None, 1_700_000_000_000 + i, None, value)
        out += builder.build()
    return bytes(out)


def best_cpu_us(fn, repeat: int, calls: int) -> float:  # type: ignore[no-untyped-def]
    """The best CPU time of one call, in µs, of ``repeat`` loops of ``calls`` calls."""
    best = float("inf")
    for _ in range(repeat):
        began = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, time.process_time() - began)
    return best / calls * 1e6


def produce_row(label: str, data: bytes, repeat: int, calls: int) -> str:
    buf = bytearray(data)
    arr = np.frombuffer(buf, np.uint8)
    table, summary = lv.scan(arr, len(buf), lv.LEADER, 1000, 1 << 20, True)
    py_table, py_summary = py_scan(buf, len(buf), 1000, 1 << 20, True)
    if summary[lv.S_OK] != 1 or summary.tolist() != py_summary or not (table == py_table).all():
        raise AssertionError(f"{label}: the Python walk differs: {summary} {py_summary}")

    def compiled() -> None:
        t, _ = lv.scan(arr, len(buf), lv.LEADER, 1000, 1 << 20, True)
        lv.assign(arr, t, 3)

    def python() -> None:
        t, _ = py_scan(buf, len(buf), 1000, 1 << 20, True)
        py_assign(buf, t, 3)

    def crcs() -> None:
        for pos, size in table[:, [es.S_POS, es.S_SIZE]].tolist():
            crc32c.crc32c(memoryview(buf)[pos + 21 : pos + size])

    c, p, k = (best_cpu_us(f, repeat, calls) for f in (compiled, python, crcs))
    return f"| {label} | {c:.1f} | {p:.1f} | {p / c:.2f}x | {k:.1f} |"


def fetch_row(label: str, data: bytes, repeat: int, calls: int) -> str:
    arr = readonly_bytes(data)
    target = int(lv.scan(arr, len(data), lv.FOLLOWER, 0, 0, False)[1][lv.S_LAST_OFFSET])
    status, pos, _, last = es.seek_entry(arr, 0, len(data), target)
    if status != es.SEEK_FOUND or py_seek(data, 0, len(data), target) != (pos, last):
        raise AssertionError(f"{label}: the Python seek differs")
    c = best_cpu_us(lambda: es.seek_entry(arr, 0, len(data), target), repeat, calls)
    p = best_cpu_us(lambda: py_seek(data, 0, len(data), target), repeat, calls)
    return f"| {label} | {c:.1f} | {p:.1f} | {p / c:.2f}x | |"


MEMORY_PROBE = """
import sys
sys.path.insert(0, {root!r})
import numpy, crc32c, struct, socket, selectors, ssl
if {kernels}:
    import broker_embedded.server.broker_server
    from broker_embedded.record import entry_scan, log_validator
    from broker_embedded.record.kernel_primitives import readonly_bytes
    log_validator.warm_up()
    entry_scan.seek_entry(readonly_bytes(b""), 0, 0, entry_scan.NO_TARGET)
d = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
print(*(int(d[k].split()[0]) // 1024 for k in ("VmRSS", "RssAnon", "RssFile")))
"""


def memory_row(label: str, kernels: bool) -> str:
    code = MEMORY_PROBE.format(root=str(ROOT), kernels=kernels)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    rss, anon, file = done.stdout.split()
    return f"| {label} | {rss} | {anon} | {file} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2_000)
    parser.add_argument("--records-per-batch", default="150,9000")
    a = parser.parse_args(argv)
    sizes = [int(k) for k in a.records_per_batch.split(",")]
    print(f"{os.cpu_count()} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    lv.warm_up()
    es.seek_entry(readonly_bytes(b""), 0, 0, es.NO_TARGET)
    print("\n| request | compiled (µs CPU) | plain Python (µs CPU) | Python / compiled "
          "| crc32c of its batches (µs CPU) |")  # fmt: skip
    print("|---|---|---|---|---|")
    timing = (a.repeat, a.calls)
    for k in sizes:
        data = batches(1, k)
        print(produce_row(f"produce, 1 batch of {k:,} records ({len(data):,} B)", data, *timing))
    many = batches(64, sizes[0])
    label = f"produce, 64 batches of {sizes[0]:,} records ({len(many):,} B)"
    print(produce_row(label, many, *timing))
    region = batches(max(1, (1 << 20) // len(batches(1, sizes[0]))), sizes[0])
    print(fetch_row(f"fetch, seek across {len(region):,} B to its last batch", region, *timing))
    print("\n| process | VmRSS (MiB) | RssAnon | RssFile |")
    print("|---|---|---|---|")
    print(memory_row("numpy, crc32c, socket, ssl (a numba-free request path's needs)", False))
    print(memory_row("+ broker_server (imports numba), request kernels loaded", True))
    print(f"\nload average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
