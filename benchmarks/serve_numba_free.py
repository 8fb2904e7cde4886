"""What ``kafkalog serve`` without numba costs and saves: the request path's header walk run as
written (plain Python: what the server runs) against the same functions compiled by numba
(``entry_scan_kernel``: what a process that has loaded the kernels runs), and the memory numba
takes.

    .venv/bin/python benchmarks/serve_numba_free.py [--repeat R] [--calls C]
                                                    [--records-per-batch 150,9000]

The request path walks batch headers twice: a produce request's checks on the leader
(``log_validator.scan`` and ``assign``: the header walk, the per-batch checks, the offsets
assigned, the summary) and a fetch's walk from the index's position (``entry_scan.seek``: the
first batch at or after the fetch offset). Both call the one walk (``entry_scan.walk_entries``)
through ``entry_scan.walk`` / ``seek``, which run it as written until ``entry_scan_kernel`` is
imported and compiled after (``entry_scan.use_compiled``): this script times each request both
ways, per request and in CPU (``time.process_time``, best of R, default 5, of a loop of C calls,
default 2,000), after checking both ways give the same table, summary and seek result:

- produce: one request holding one batch (librdkafka sends one batch a partition a request) of
  K records of 100-byte values (``--records-per-batch``, default 150 and 9,000: about the 16 KiB
  and the 1 MB ``batch.size``), and one holding 64 batches of K[0] records (a Java producer's
  request with many partitions' worth of batches); the ``crc32c`` of the batches, which both
  pay, beside them;
- fetch: the walk from a 1 MiB region's start to its last batch (the worst case: the index's
  position is at most ``index.interval.bytes``, 4 KiB, before the batch, so a fetch usually
  walks one or two headers), in batches of K[0] records.

Then the memory, each in a fresh child process (VmRSS, RssAnon and RssFile from
``/proc/self/status``): ``broker_embedded.server.broker_server`` and the request path's modules
(numba is not imported: the probe checks), and the same with the compiled walk loaded
(``entry_scan_kernel.warm_up``: what the cleaner or a Spark read adds). Prints markdown tables.
"""

from __future__ import annotations

import argparse
import os
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
from broker_embedded.record.header_reads import readonly_bytes  # noqa: E402
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder  # noqa: E402

AS_WRITTEN = (es.walk_entries, es.seek_entry)


def compiled_walks() -> tuple:  # type: ignore[type-arg]
    """The walk and the seek compiled (imports numba, loads them from its cache), leaving this
    process's Python callers on the functions as written."""
    from broker_embedded.record import entry_scan_kernel as kernel

    kernel.warm_up()
    es.use_compiled(*AS_WRITTEN)
    return kernel.walk_entries, kernel.seek_entry


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


def both_ways(compiled: tuple, fn):  # type: ignore[no-untyped-def, type-arg]
    """``fn``'s result with the walk as written and compiled, and a caller of each way."""

    def way(walks: tuple):  # type: ignore[no-untyped-def, type-arg]
        def call():  # type: ignore[no-untyped-def]
            es.use_compiled(*walks)
            try:
                return fn()
            finally:
                es.use_compiled(*AS_WRITTEN)

        return call

    return way(AS_WRITTEN), way(compiled)


def produce_row(label: str, data: bytes, compiled: tuple, repeat: int, calls: int) -> str:  # type: ignore[type-arg]
    buf = bytearray(data)
    arr = np.frombuffer(buf, np.uint8)

    def checks():  # type: ignore[no-untyped-def]
        return lv.scan(arr, len(buf), lv.LEADER, 1000, 1 << 20, True)

    def request() -> None:
        table, _ = checks()
        lv.assign(arr, table, 3)  # the same offsets and epoch every time

    python, jitted = both_ways(compiled, checks)
    (pt, ps), (ct, cs) = python(), jitted()
    if ps[lv.S_OK] != 1 or ps.tolist() != cs.tolist() or not (pt == ct).all():
        raise AssertionError(f"{label}: the walk as written and compiled differ: {ps} {cs}")
    es.use_compiled(*compiled)  # whole loops, not a swap a call
    c = best_cpu_us(request, repeat, calls)
    es.use_compiled(*AS_WRITTEN)
    p = best_cpu_us(request, repeat, calls)

    def crcs() -> None:
        for pos, size in pt[:, [es.S_POS, es.S_SIZE]].tolist():
            crc32c.crc32c(memoryview(buf)[pos + 21 : pos + size])

    k = best_cpu_us(crcs, repeat, calls)
    return f"| {label} | {c:.1f} | {p:.1f} | {p / c:.2f}x | {k:.1f} |"


def fetch_row(label: str, data: bytes, compiled: tuple, repeat: int, calls: int) -> str:  # type: ignore[type-arg]
    arr = readonly_bytes(data)
    target = int(lv.scan(arr, len(data), lv.FOLLOWER, 0, 0, False)[1][lv.S_LAST_OFFSET])
    python, jitted = both_ways(compiled, lambda: es.seek(arr, 0, len(data), target))
    found, same = python(), jitted()
    if found[0] != es.SEEK_FOUND or tuple(found) != tuple(int(x) for x in same):
        raise AssertionError(f"{label}: the seek as written and compiled differ")
    es.use_compiled(*compiled)
    c = best_cpu_us(lambda: es.seek(arr, 0, len(data), target), repeat, calls)
    es.use_compiled(*AS_WRITTEN)
    p = best_cpu_us(lambda: es.seek(arr, 0, len(data), target), repeat, calls)
    return f"| {label} | {c:.1f} | {p:.1f} | {p / c:.2f}x | |"


MEMORY_PROBE = """
import sys
sys.path.insert(0, {root!r})
import broker_embedded.server.broker_server
from broker_embedded.record import log_validator, entry_scan, records
from broker_embedded.storage import local_log, log_segment, log_appender
assert "numba" not in sys.modules, "the request path imported numba"
if {kernels}:
    from broker_embedded.record import entry_scan_kernel
    entry_scan_kernel.warm_up()
d = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
print(*(int(d[k].split()[0]) // 1024 for k in ("VmRSS", "RssAnon", "RssFile")))
"""


def memory_row(label: str, kernels: bool) -> str:
    code = MEMORY_PROBE.format(root=str(ROOT), kernels=kernels)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
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
    compiled = compiled_walks()
    print(
        "\n| request | compiled (µs CPU) | as written, plain Python (µs CPU) "
        "| Python / compiled | crc32c of its batches (µs CPU) |"
    )
    print("|---|---|---|---|---|")
    timing = (compiled, a.repeat, a.calls)
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
    print(memory_row("broker_server and the request path (no numba)", False))
    print(memory_row("+ the compiled walk loaded (numba: the cleaner, a Spark read)", True))
    print(f"\nload average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
