"""Encoding record batches: our columnar encoder against MemoryRecordsBuilder and kafka-python.

    .venv/bin/python benchmarks/encode.py [--records N] [--codec none|lz4|zstd|all]
                                          [--batch-bytes B] [--repeat R] [--skip-compile-time]

Generates N records (default 1 M) in memory: 100-byte JSON-like values, 10-20 byte keys,
timestamps one millisecond apart, no headers. Ours takes them as Arrow columns (what the Spark
writer has), the peers as Python lists of bytes (what they take). Then, per codec, times the
best of R repetitions of:

- ours: ``columnar_encoder.encode_batches`` into batches of at most B bytes of records (default
  1 MiB), one buffer out;
- MemoryRecordsBuilder (our byte-exact per-record builder) and kafka-python's
  ``DefaultRecordBatchBuilder``, each given the same batch split as ours, one builder per batch
  (the slow peers run max(1, R // 3) times).

Our output is checked once against MemoryRecordsBuilder's (byte for byte). Numba's compile time
is measured first, in fresh processes (a cold compile with an empty cache, then a load from
that cache). Prints a markdown table: seconds, records/s, MB/s (of encoded output) and how many
times faster ours is.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _numba_compile import print_warm_up  # noqa: E402
from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402

from broker_embedded.record import columnar_encoder  # noqa: E402
from broker_embedded.record.compression import CompressionType  # noqa: E402
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder  # noqa: E402

VALUE_BYTES = 100
BASE_TIMESTAMP = 1_700_000_000_000
CODECS = ("none", "lz4", "zstd")
DEFAULT_CODECS = ("none", "lz4")


@dataclass(frozen=True)
class Data:
    keys: pa.Array
    values: pa.Array
    timestamps: np.ndarray
    key_list: list[bytes]
    value_list: list[bytes]
    timestamp_list: list[int]


def make_data(records: int) -> Data:
    """Values ``{"id":N,"user":"user-U","p":"<random letters>"}`` cut to 100 bytes."""
    rng = np.random.default_rng(42)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz0123456789", np.uint8)
    pad = letters[rng.integers(0, len(letters), (records, VALUE_BYTES))]
    users = rng.integers(0, 10_000, records).tolist()
    value_list = []
    for i in range(records):
        head = f'{{"id":{i},"user":"user-{users[i]}","p":"'.encode()
        body = head + pad[i, : VALUE_BYTES - len(head) - 2].tobytes() + b'"}'
        value_list.append(body)
    digits = rng.integers(6, 16, records).tolist()
    key_list = [f"key-{int(rng.integers(0, 10**d))}".encode() for d in digits]
    timestamps = BASE_TIMESTAMP + np.arange(records, dtype=np.int64)
    return Data(
        keys=pa.array(key_list, pa.binary()),
        values=pa.array(value_list, pa.binary()),
        timestamps=timestamps,
        key_list=key_list,
        value_list=value_list,
        timestamp_list=timestamps.tolist(),
    )


# -- encoders --------------------------------------------------------------------------------------


def ours(data: Data, codec: CompressionType, batch_bytes: int) -> columnar_encoder.EncodedBatches:
    return columnar_encoder.encode_batches(
        data.keys, data.values, data.timestamps, compression=codec, max_batch_bytes=batch_bytes
    )


def memory_records_builder(data: Data, codec: CompressionType, bounds: list[int]) -> list[bytes]:
    out = []
    keys, values, timestamps = data.key_list, data.value_list, data.timestamp_list
    for first, end in zip(bounds[:-1], bounds[1:], strict=True):
        builder = MemoryRecordsBuilder(first, codec)
        for i in range(first, end):
            builder.append(i, timestamps[i], keys[i], values[i])
        out.append(builder.build())
    return out


def kafka_python(data: Data, codec: CompressionType, bounds: list[int]) -> list[bytes]:
    out = []
    keys, values, timestamps = data.key_list, data.value_list, data.timestamp_list
    for first, end in zip(bounds[:-1], bounds[1:], strict=True):
        builder = DefaultRecordBatchBuilder(2, int(codec), 0, -1, -1, -1, 1 << 30)
        for i in range(first, end):
            builder.append(i - first, timestamps[i], keys[i], values[i], [])
        out.append(bytes(builder.build()))
    return out


def best_of(repeat: int, fn: Callable[[], object]) -> tuple[float, int]:
    """Best seconds of ``repeat`` runs, and the encoded size."""
    best = float("inf")
    size = 0
    for _ in range(repeat):
        gc.collect()
        began = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - began)
        if isinstance(result, columnar_encoder.EncodedBatches):
            size = len(result.data)
        else:
            size = sum(len(b) for b in result)  # type: ignore[attr-defined]
        del result
    return best, size


def run_codec(
    data: Data, codec: CompressionType, batch_bytes: int, repeat: int
) -> list[tuple[str, float, int]]:
    first = ours(data, codec, batch_bytes)
    bounds = first.first_rows.tolist()
    # byte-for-byte check of our output against the per-record builder (once, untimed)
    reference = memory_records_builder(data, codec, bounds)
    if bytes(first.data) != b"".join(reference):
        raise AssertionError(f"{codec.name}: encode_batches differs from MemoryRecordsBuilder")
    del first, reference
    slow = max(1, repeat // 3)
    peers: list[tuple[str, int, Callable[[], object]]] = [
        ("ours (encode_batches)", repeat, lambda: ours(data, codec, batch_bytes)),
        ("MemoryRecordsBuilder", slow, lambda: memory_records_builder(data, codec, bounds)),
        ("kafka-python", slow, lambda: kafka_python(data, codec, bounds)),
    ]
    return [(name, *best_of(times, fn)) for name, times, fn in peers]


def print_table(results: dict[str, list[tuple[str, float, int]]], records: int) -> None:
    print()
    print("| codec | encoder | seconds | records/s | MB/s | ours is x faster |")
    print("|---|---|---:|---:|---:|---:|")
    for codec, timings in results.items():
        ours_seconds = timings[0][1]
        for name, seconds, size in timings:
            ratio = "" if name.startswith("ours") else f"{seconds / ours_seconds:.1f}x"
            print(
                f"| {codec} | {name} | {seconds:.3f} | {records / seconds / 1e6:.2f} M "
                f"| {size / seconds / 1e6:.0f} | {ratio} |"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--codec", choices=(*CODECS, "all"), default=None)
    parser.add_argument("--batch-bytes", type=int, default=columnar_encoder.DEFAULT_MAX_BATCH_BYTES)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-compile-time", action="store_true")
    args = parser.parse_args(argv)
    if args.codec is None:
        codecs = DEFAULT_CODECS
    else:
        codecs = CODECS if args.codec == "all" else (args.codec,)
    print_warm_up(columnar_encoder, args.skip_compile_time)
    began = time.perf_counter()
    data = make_data(args.records)
    print(
        f"{args.records:,} records of {VALUE_BYTES}-byte values generated in "
        f"{time.perf_counter() - began:.1f} s; batches of at most {args.batch_bytes:,} "
        "bytes of records"
    )
    results = {
        codec: run_codec(data, CompressionType.parse(codec), args.batch_bytes, args.repeat)
        for codec in codecs
    }
    print_table(results, args.records)


if __name__ == "__main__":
    main()
