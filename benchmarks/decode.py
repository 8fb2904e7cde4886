"""Decoding a segment: our columnar decoder against aiokafka and kafka-python, in one run.

    .venv/bin/python benchmarks/decode.py [--records N] [--codec none|lz4|zstd|all]
                                          [--batch-bytes B] [--repeat R] [--skip-compile-time]

Builds once (cached in ``benchmarks/.data/``, git-ignored) a segment file of N records (default
1 M) with 100-byte JSON-like values and 10-20 byte keys, in batches of about B bytes of records
(default 16 KiB, Kafka's producer ``batch.size``), one file per codec. Then, per codec, times the
best of R repetitions of:

- raw read: reading the file into memory (from the page cache), the floor of any reader;
- ours: ``columnar_decoder.decode_records`` on the bytes (CRC-32C checked), and the same without
  the CRC check;
- aiokafka and kafka-python: ``MemoryRecords`` over the same bytes, iterating every batch and
  record and touching its key and value (their decoders do not check CRCs while iterating).

Numba's compile time is measured first, in fresh processes (a cold compile with an empty
cache, then a load from that cache); this process warms up before the timings. Prints
records/s, MB/s (of the file) and our ratios to the peers as a table.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _numba_compile import print_warm_up  # noqa: E402
from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords  # noqa: E402
from kafka.record.memory_records import MemoryRecords as KafkaPythonMemoryRecords  # noqa: E402

from broker_embedded.record import columnar_decoder  # noqa: E402
from broker_embedded.record.compression import CompressionType  # noqa: E402
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder  # noqa: E402

DATA_DIR = ROOT / "benchmarks" / ".data"
VALUE_BYTES = 100
BASE_TIMESTAMP = 1_700_000_000_000
CODECS = ("none", "lz4", "zstd")


def _value(rng: random.Random, i: int) -> bytes:
    doc = {"id": i, "user": f"user-{rng.randrange(10_000)}", "event": rng.choice(EVENTS)}
    text = json.dumps(doc, separators=(",", ":"))
    pad = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(VALUE_BYTES))
    return (text + ',"p":"' + pad)[: VALUE_BYTES - 2].encode() + b'"}'


EVENTS = ("view", "click", "purchase", "signup", "logout")


def build_segment(path: Path, records: int, codec: CompressionType, batch_bytes: int) -> None:
    """A segment of ``records`` records in batches of about ``batch_bytes`` record bytes."""
    rng = random.Random(42)
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / ".gitignore").write_text("*\n")
    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as out:
        offset = 0
        while offset < records:
            builder = MemoryRecordsBuilder(offset, codec)
            while offset < records and builder.uncompressed_records_size < batch_bytes:
                key = f"key-{rng.randrange(10 ** rng.randrange(6, 16))}".encode()
                builder.append(offset, BASE_TIMESTAMP + offset, key, _value(rng, offset))
                offset += 1
            out.write(builder.build())
    tmp.replace(path)


def segment(records: int, codec: str, batch_bytes: int) -> Path:
    path = DATA_DIR / f"segment-{records}-{batch_bytes}-{codec}.log"
    if not path.exists():
        began = time.perf_counter()
        print(f"building {path.name} ...", end=" ", flush=True)
        build_segment(path, records, CompressionType.parse(codec), batch_bytes)
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


def best_of(repeat: int, fn: Callable[[], int], expected: int | None) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        began = time.perf_counter()
        n = fn()
        elapsed = time.perf_counter() - began
        if expected is not None and n != expected:
            raise AssertionError(f"decoded {n} records, expected {expected}")
        best = min(best, elapsed)
    return best


def run_codec(path: Path, records: int, repeat: int) -> list[tuple[str, float]]:
    data = path.read_bytes()
    slow = max(1, repeat // 3)  # kafka-python takes seconds per run
    return [
        ("raw read", best_of(repeat, lambda: read_file(path), None)),
        ("ours", best_of(repeat, lambda: ours(data), records)),
        ("ours, no CRC check", best_of(repeat, lambda: ours(data, False), records)),
        ("aiokafka", best_of(repeat, lambda: aiokafka(data), records)),
        ("kafka-python", best_of(slow, lambda: kafka_python(data), records)),
    ]


def print_table(codec: str, path: Path, records: int, timings: list[tuple[str, float]]) -> None:
    size = path.stat().st_size
    by_name = dict(timings)
    print(f"\ncodec {codec}: {records:,} records, {size / 1e6:.1f} MB ({path.name})")
    print(f"  {'decoder':<20} {'seconds':>9} {'records/s':>12} {'MB/s':>9}")
    for name, seconds in timings:
        rate = "" if name == "raw read" else f"{records / seconds / 1e6:10.2f} M"
        print(f"  {name:<20} {seconds:9.4f} {rate:>12} {size / seconds / 1e6:9.0f}")
    for peer in ("aiokafka", "kafka-python"):
        ratio = by_name[peer] / by_name["ours"]
        print(f"  ours / {peer:<13} {ratio:8.1f}x records/s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--codec", choices=(*CODECS, "all"), default="all")
    parser.add_argument("--batch-bytes", type=int, default=16 * 1024)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--skip-compile-time", action="store_true")
    args = parser.parse_args(argv)
    codecs = CODECS if args.codec == "all" else (args.codec,)
    paths = {codec: segment(args.records, codec, args.batch_bytes) for codec in codecs}
    print_warm_up(columnar_decoder, args.skip_compile_time)
    for codec in codecs:
        timings = run_codec(paths[codec], args.records, args.repeat)
        print_table(codec, paths[codec], args.records, timings)


if __name__ == "__main__":
    main()
