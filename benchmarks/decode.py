"""Decoding a segment: our columnar decoder against aiokafka and kafka-python, in one run.

    .venv/bin/python benchmarks/decode.py [--records N] [--codec none|gzip|snappy|lz4|zstd|all]
                                          [--batch-bytes B [B ...]] [--repeat R]
                                          [--skip-compile-time] [--no-kafka-python]

Builds once (cached in ``benchmarks/.data/``, git-ignored) a segment file of N records (default
1 M) with 100-byte JSON-like values and 10-20 byte keys, in batches of at most B bytes of records
(``columnar_encoder.encode_batches``: Kafka's producer writes; default both 16 KiB, the
producer's ``batch.size``, and 1 MiB, a large ``batch.size`` or ``linger.ms``), one file per codec
and batch size. Then, per file, times the best of R repetitions of:

- raw read: reading the file into memory (from the page cache), the floor of any reader;
- ours: ``columnar_decoder.decode_records`` on the bytes (CRC-32C checked), and the same without
  the CRC check;
- aiokafka and kafka-python: ``MemoryRecords`` over the same bytes, iterating every batch and
  record and touching its key and value (their decoders do not check CRCs while iterating).

glibc's malloc is set to fixed thresholds first (``mallopt``: blocks up to 32 MiB from the heap,
which is trimmed only past 256 MiB free), else the peers' speed depends on what the process freed
before: glibc raises its thresholds after the first free of a large block, and until then every
1 MiB batch the peers inflate is mapped, faulted in and unmapped again (aiokafka on snappy 1 MiB
batches: 0.39-0.45 s per 1 M records in that state, 0.22 s after; it made its ratio swing from
2x to 3.8x between runs). The peers are thus timed in their fast state. Our decoder allocates
from Arrow's pool (mimalloc), which glibc's settings do not touch.

Numba's compile time is measured first, in fresh processes (a cold compile with an empty
cache, then a load from that cache); this process warms up before the timings. Prints
records/s, MB/s (of the file), CPU seconds and our ratios to the peers per file (by wall time, and
by CPU time: steadier on a loaded machine, and it counts our CRC check's helper thread), then a
summary of the ratios to aiokafka with the load average (``/proc/loadavg``) at the end of each
file's timings.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
from _numba_compile import print_warm_up  # noqa: E402
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords  # noqa: E402
from kafka.record.memory_records import MemoryRecords as KafkaPythonMemoryRecords  # noqa: E402

from broker_embedded.record import columnar_decoder, columnar_encoder  # noqa: E402

DATA_DIR = ROOT / "benchmarks" / ".data"
VALUE_BYTES = 100
BASE_TIMESTAMP = 1_700_000_000_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BATCH_BYTES = (16 * 1024, 1024 * 1024)
EVENTS = ("view", "click", "purchase", "signup", "logout")
Timing = tuple[str, float, float]  # decoder, best wall seconds, best CPU seconds of the process
_PAD = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", np.uint8)


def records(n: int) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """Keys, values and timestamps of ``n`` records (the same for a given ``n``): values are a
    JSON document (id, user, event) padded with random characters to 100 bytes."""
    rng = np.random.default_rng(42)
    users = rng.integers(0, 10_000, n).tolist()
    events = rng.integers(0, len(EVENTS), n).tolist()
    pads = _PAD[rng.integers(0, len(_PAD), (n, VALUE_BYTES))].tobytes()
    widths = rng.integers(6, 16, n).tolist()
    key_numbers = rng.integers(0, 10**15, n).tolist()
    values, keys = [], []
    for i in range(n):
        doc = f'{{"id":{i},"user":"user-{users[i]}","event":"{EVENTS[events[i]]}","p":"'.encode()
        pad = pads[i * VALUE_BYTES : (i + 1) * VALUE_BYTES]
        values.append((doc + pad)[: VALUE_BYTES - 2] + b'"}')
        keys.append(b"key-%d" % (key_numbers[i] % 10 ** widths[i]))
    timestamps = BASE_TIMESTAMP + np.arange(n, dtype=np.int64)
    return pa.array(keys, pa.binary()), pa.array(values, pa.binary()), timestamps


def segment(n: int, codec: str, batch_bytes: int) -> Path:
    """The segment file of ``n`` records in ``codec`` and batches of ``batch_bytes``, built once."""
    path = DATA_DIR / f"records-{n}-{batch_bytes}-{codec}.log"
    if path.exists():
        return path
    began = time.perf_counter()
    print(f"building {path.name} ...", end=" ", flush=True)
    keys, values, timestamps = records(n)
    encoded = columnar_encoder.encode_batches(
        keys, values, timestamps, compression=codec, max_batch_bytes=batch_bytes
    )
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    (DATA_DIR / ".gitignore").write_text("*\n")
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(encoded.data)
    tmp.replace(path)
    print(f"{time.perf_counter() - began:.1f} s")
    return path


# -- decoders -------------------------------------------------------------------------------------


def read_file(path: Path) -> int:
    return len(path.read_bytes())


def ours(data: bytes, verify_crc: bool = True) -> int:
    batches = columnar_decoder.decode_records(
        data, topic="bench", partition=0, verify_crc=verify_crc
    )
    return sum(b.num_rows for b in batches)


def aiokafka(data: bytes) -> int:
    n = 0
    records = AioMemoryRecords(data)
    while records.has_next():
        for record in records.next_batch():
            record.key, record.value  # noqa: B018 - touch them
            n += 1
    return n


def kafka_python(data: bytes) -> int:
    n = 0
    records = KafkaPythonMemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        for record in batch:
            record.key, record.value  # noqa: B018 - touch them
            n += 1
    return n


def best_of(repeat: int, fn: Callable[[], int], expected: int | None) -> tuple[float, float]:
    """The best wall time and the best CPU time (every thread of the process: our CRC check
    runs on a helper thread) of ``repeat`` runs of ``fn``."""
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeat):
        gc.collect()
        began, began_cpu = time.perf_counter(), time.process_time()
        n = fn()
        elapsed, cpu = time.perf_counter() - began, time.process_time() - began_cpu
        if expected is not None and n != expected:
            raise AssertionError(f"decoded {n} records, expected {expected}")
        best, best_cpu = min(best, elapsed), min(best_cpu, cpu)
    return best, best_cpu


def run_file(path: Path, records: int, repeat: int, kafka_python_too: bool) -> list[Timing]:
    data = path.read_bytes()
    slow = max(1, repeat // 3)  # kafka-python takes seconds per run
    timings = [
        ("raw read", *best_of(repeat, lambda: read_file(path), None)),
        ("ours", *best_of(repeat, lambda: ours(data), records)),
        ("ours, no CRC check", *best_of(repeat, lambda: ours(data, False), records)),
        ("aiokafka", *best_of(repeat, lambda: aiokafka(data), records)),
    ]
    if kafka_python_too:
        timings.append(("kafka-python", *best_of(slow, lambda: kafka_python(data), records)))
    return timings


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def fix_malloc_thresholds() -> bool:
    """glibc's mmap threshold at 32 MiB and trim threshold at 256 MiB (module docstring); False
    where the C library is not glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mapped = mallopt(_M_MMAP_THRESHOLD, 32 << 20)
    return bool(mapped) and bool(mallopt(_M_TRIM_THRESHOLD, 256 << 20))


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def print_table(path: Path, records: int, timings: list[Timing], load: str) -> None:
    size = path.stat().st_size
    by_name = {name: (wall, cpu) for name, wall, cpu in timings}
    print(f"\n{path.name}: {records:,} records, {size / 1e6:.1f} MB, load average {load}")
    print(f"  {'decoder':<20} {'seconds':>9} {'records/s':>12} {'MB/s':>9} {'CPU s':>9}")
    for name, seconds, cpu in timings:
        rate = "" if name == "raw read" else f"{records / seconds / 1e6:10.2f} M"
        print(f"  {name:<20} {seconds:9.4f} {rate:>12} {size / seconds / 1e6:9.0f} {cpu:9.4f}")
    for peer in ("aiokafka", "kafka-python"):
        if peer in by_name:
            ratio = by_name[peer][0] / by_name["ours"][0]
            cpu_ratio = by_name[peer][1] / by_name["ours"][1]
            print(f"  ours / {peer:<13} {ratio:8.2f}x records/s, {cpu_ratio:.2f}x by CPU time")


SummaryRow = tuple[str, int, float, float, float, float, str]


def print_summary(rows: list[SummaryRow]) -> None:
    """One line per file: codec, batch size, records/s of ours and aiokafka, their ratio by wall
    time and by CPU time."""
    print("\nsummary (ours with CRC check / aiokafka, records/s, same run)")
    print(
        f"  {'codec':<7} {'batch':>8} {'ours':>10} {'aiokafka':>10} {'ratio':>7} {'by CPU':>7}"
        "  load average"
    )
    for codec, batch, ours_rate, peer_rate, ratio, cpu_ratio, load in rows:
        batch_name = f"{batch // 1024} KiB" if batch < 1 << 20 else f"{batch >> 20} MiB"
        print(
            f"  {codec:<7} {batch_name:>8} {ours_rate / 1e6:8.2f} M {peer_rate / 1e6:8.2f} M"
            f" {ratio:6.2f}x {cpu_ratio:6.2f}x  {load}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--codec", choices=(*CODECS, "all"), default="all")
    parser.add_argument("--batch-bytes", type=int, nargs="+", default=list(BATCH_BYTES))
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--skip-compile-time", action="store_true")
    parser.add_argument("--no-kafka-python", action="store_true")
    args = parser.parse_args(argv)
    codecs = CODECS if args.codec == "all" else (args.codec,)
    files = [(c, b, segment(args.records, c, b)) for b in args.batch_bytes for c in codecs]
    print_warm_up(columnar_decoder, args.skip_compile_time)
    fixed = fix_malloc_thresholds()
    print(f"glibc malloc thresholds fixed: {'yes' if fixed else 'no (not glibc)'}")
    summary = []
    for codec, batch, path in files:
        timings = run_file(path, args.records, args.repeat, not args.no_kafka_python)
        load = load_average()
        print_table(path, args.records, timings, load)
        by_name = {name: (wall, cpu) for name, wall, cpu in timings}
        (ours_s, ours_cpu), (peer_s, peer_cpu) = by_name["ours"], by_name["aiokafka"]
        n = args.records
        ratios = (peer_s / ours_s, peer_cpu / ours_cpu)
        summary.append((codec, batch, n / ours_s, n / peer_s, *ratios, load))
    print_summary(summary)


if __name__ == "__main__":
    main()
