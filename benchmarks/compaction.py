"""Compaction: our cleaner (bounded offset map, compiled kernels) against a naive dict compaction.

    .venv/bin/python benchmarks/compaction.py [--size-mb N] [--updates U] [--map-mb M]
                                              [--segment-mb S] [--skip-naive] [--dir DIR]

Builds a compacted partition of about N MB (default 1024, about 2.5 minutes here, most of it the
naive contender's): K distinct keys (about N * 1000: 1 M keys per GB) of 13 bytes, each updated U
times (default 10) in U passes over a random permutation of the keys, 80-byte values, uncompressed
batches of 1 MiB records, segments of S MiB (default 256), the last one rolled so that everything is
cleanable. Then, each in a fresh process on its own copy of the log dir:

- ours: one round of ``Cleaner.clean`` with an offset map of M MiB (default 128: 5.0 M keys per
  round, so one round covers the 1 M keys of a GB);
- naive: read every segment (a segment at a time), every record as a Python object
  (``RecordBatch.records``), keep the last one per key in a dict, rewrite them in offset order
  into batches of 1 MiB (``MemoryRecordsBuilder``) in one new segment.

Reported per contender: wall and CPU seconds, MB/s of log read per core (log bytes / CPU
seconds; both are single-threaded), the process's peak RSS during the work (VmHWM, restarted
when the work begins) and its RSS before the work (interpreter, numba, imports, the opened log),
their difference (what the work itself needed), the log size before and after. Both outputs are
checked against the generator's model (exactly one record per key, each at its key's last
offset, with its last value). The numba kernels are loaded from their cache before timing (the
first run in a fresh checkout compiles them: tens of seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from broker_embedded.storage.log_config import LogConfig  # noqa: E402
from broker_embedded.storage.segment_writer import SegmentWriter  # noqa: E402
from broker_embedded.storage.topic_partition import TopicPartition  # noqa: E402

if TYPE_CHECKING:
    from broker_embedded.record.columnar_encoder import EncodedBatches

TP = TopicPartition("compacted", 0)
KEY_FORMAT = b"key-%09d"
VALUE_BYTES = 80
RECORD_BYTES = 101  # on disk, with the 13-byte key and 80-byte value (plus batch headers)
BASE_TS = 1_700_000_000_000
CHUNK_ROWS = 1 << 20


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_kib() -> int:
    return _status_kib("VmRSS")


def reset_peak() -> bool:
    """Restart the peak RSS (VmHWM) from the current RSS (Linux: clear_refs 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_kib() -> int:
    """The peak RSS since :func:`reset_peak` (since the start where it is not available)."""
    return _status_kib("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def log_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("[0-9]" * 20 + ".log"))


# -- the data --------------------------------------------------------------------------------


def encoded_passes(
    keys: int, updates: int, seed: int, *, max_batch_bytes: int = 1 << 20
) -> Iterator[EncodedBatches]:
    """The records of :func:`generate`, in offset order from 0: K keys, U passes over a
    permutation of them; value = pass and key, padded; ``encode_batches`` of up to
    ``CHUNK_ROWS`` rows at a time, uncompressed batches of ``max_batch_bytes`` of records."""
    from broker_embedded.record.columnar_encoder import encode_batches

    rng = np.random.default_rng(seed)
    offset = 0
    pad = np.frombuffer(rng.bytes(VALUE_BYTES), np.uint8)
    for u in range(updates):
        order = rng.permutation(keys)
        for start in range(0, keys, CHUNK_ROWS):
            ids = order[start : start + CHUNK_ROWS]
            n = len(ids)
            key_data = np.frombuffer(b"".join(KEY_FORMAT % i for i in ids.tolist()), np.uint8)
            key_offsets = np.arange(0, 13 * (n + 1), 13, dtype=np.int32)
            values = np.tile(pad, n).reshape(n, VALUE_BYTES)
            stamp = np.array([u], np.int64).view(np.uint8)  # the pass in the value's first bytes
            values[:, :8] = stamp
            values[:, 8:16] = ids.astype("<i8").view(np.uint8).reshape(n, 8)
            value_offsets = np.arange(0, VALUE_BYTES * (n + 1), VALUE_BYTES, dtype=np.int32)
            k = pa.Array.from_buffers(
                pa.binary(), n, [None, pa.py_buffer(key_offsets), pa.py_buffer(key_data)]
            )
            v = pa.Array.from_buffers(
                pa.binary(),
                n,
                [None, pa.py_buffer(value_offsets), pa.py_buffer(values.reshape(-1))],
            )
            ts = np.full(n, BASE_TS + u, np.int64)
            yield encode_batches(k, v, ts, base_offset=offset, max_batch_bytes=max_batch_bytes)
            offset += n


def generate(log_dir: Path, keys: int, updates: int, segment_mb: int, seed: int) -> None:
    """K keys, U passes over a permutation of them; value = pass and key, padded."""
    config = LogConfig(cleanup_policy="compact", segment_bytes=segment_mb << 20)
    log_dir.mkdir(parents=True, exist_ok=True)
    writer = SegmentWriter(log_dir, TP, config, clock_ms=lambda: BASE_TS)
    for encoded in encoded_passes(keys, updates, seed):
        for i in range(len(encoded)):
            writer.append(encoded[i])
    writer.roll()
    writer.close()


def check(directory: Path, keys: int, updates: int) -> None:
    """Exactly one record per key, from the last pass (value bytes 0-7 = the pass)."""
    from broker_embedded.record.columnar_decoder import decode
    from broker_embedded.storage.log_segment import LogSegment

    seen = np.zeros(keys, np.int64)
    for path in sorted(directory.glob("[0-9]" * 20 + ".log")):
        with LogSegment(path) as seg:
            for batch in seg.batches():
                decoded = decode(batch.buffer, topic=TP.topic, partition=0)
                for rb in decoded.batches:
                    values = rb.column("value")
                    data = np.frombuffer(values.buffers()[2], np.uint8)
                    offs = np.frombuffer(values.buffers()[1], np.int32)[: len(values) + 1]
                    rows = data[offs[:-1, None] + np.arange(16)]
                    passes = rows[:, :8].copy().view("<i8")[:, 0]
                    ids = rows[:, 8:16].copy().view("<i8")[:, 0]
                    assert (passes == updates - 1).all(), "a record of an earlier pass survived"
                    np.add.at(seen, ids, 1)
    assert (seen == 1).all(), f"{int((seen == 0).sum())} keys lost, {int((seen > 1).sum())} dup"


# -- the contenders (each in its own process) ------------------------------------------------


def run_ours(log_dir: Path, map_mb: int, segment_mb: int) -> dict:
    from broker_embedded.cleaner.cleaner import Cleaner
    from broker_embedded.cleaner.skimpy_offset_map import SkimpyOffsetMap
    from broker_embedded.storage.unified_log import UnifiedLog

    config = LogConfig(cleanup_policy="compact", segment_bytes=segment_mb << 20)
    _warm_up(Cleaner, SkimpyOffsetMap, UnifiedLog, config)
    lg = UnifiedLog(log_dir, TP, config, high_watermark=1 << 62)
    before = rss_kib()
    reset_peak()
    offset_map = SkimpyOffsetMap(map_mb << 20)
    cleaner = Cleaner(offset_map)
    wall, cpu = time.perf_counter(), time.process_time()
    result = cleaner.clean(lg, None)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    extra = {
        "map_entries": result.map_entries,
        "map_full": result.map_full,
        "map_seconds": round(result.stats.map_seconds, 2),
        "recopy_seconds": round(result.stats.clean_seconds, 2),
    }
    lg.close()
    return {"wall": wall, "cpu": cpu, "rss_before_kib": before, "peak_kib": peak_kib(), **extra}


def _warm_up(cleaner_cls, map_cls, log_cls, config) -> None:  # type: ignore[no-untyped-def]
    """Load the kernels from numba's cache (compile them on a first run) on a tiny log."""
    from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder

    with tempfile.TemporaryDirectory() as d:
        lg = log_cls(d, TP, config)
        for i in range(10):
            b = MemoryRecordsBuilder(0)
            b.append(None, BASE_TS, b"k%d" % (i % 3), b"v")
            lg.append_as_leader(b.build(), 0)
        lg.roll()
        lg.update_high_watermark(lg.log_end_offset)
        cleaner_cls(map_cls(1 << 16)).clean(lg, None)
        lg.close()


def run_naive(log_dir: Path) -> dict:
    from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder
    from broker_embedded.record.records import iter_batches

    directory = log_dir / TP.dir_name
    segments = sorted(directory.glob("[0-9]" * 20 + ".log"))
    before = rss_kib()
    reset_peak()
    wall, cpu = time.perf_counter(), time.process_time()
    latest: dict[bytes, tuple] = {}
    for path in segments:
        data = path.read_bytes()
        for batch in iter_batches(data, str(path)):
            for r in batch.records():
                latest[r.key] = (r.offset, r.timestamp, r.key, r.value, r.headers)
        del data
    kept = sorted(latest.values())
    del latest
    out = directory / "naive.log.new"
    with open(out, "wb") as f:
        builder, size = None, 0
        for offset, ts, key, value, headers in kept:
            if builder is None:
                builder, size = MemoryRecordsBuilder(offset), 0
            builder.append(offset, ts, key, value, headers)
            size += len(key) + len(value or b"") + 8
            if size >= 1 << 20:
                f.write(builder.build())
                builder = None
        if builder is not None:
            f.write(builder.build())
    last_base = segments[-1].name  # the (empty) active segment stays
    for path in segments[:-1]:
        path.unlink()
        for suffix in (".index", ".timeindex"):
            path.with_suffix(suffix).unlink(missing_ok=True)
    os.replace(out, directory / segments[0].name)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert (directory / last_base).exists()
    return {"wall": wall, "cpu": cpu, "rss_before_kib": before, "peak_kib": peak_kib()}


# -- the harness -------------------------------------------------------------------------------


def child(kind: str, log_dir: Path, map_mb: int, segment_mb: int) -> None:
    result = run_ours(log_dir, map_mb, segment_mb) if kind == "ours" else run_naive(log_dir)
    print(json.dumps(result))


def run_child(kind: str, log_dir: Path, map_mb: int, segment_mb: int) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            kind,
            "--dir",
            str(log_dir),
            "--map-mb",
            str(map_mb),
            "--segment-mb",
            str(segment_mb),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--updates", type=int, default=10)
    ap.add_argument("--keys", type=int, default=None, help="default: fills --size-mb")
    ap.add_argument("--map-mb", type=int, default=128)
    ap.add_argument("--segment-mb", type=int, default=256)
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--dir", type=Path, default=None, help="scratch space (default: a temp dir)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--child", choices=("ours", "naive"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.dir, args.map_mb, args.segment_mb)
        return
    keys = args.keys or max(1, (args.size_mb << 20) // (RECORD_BYTES * args.updates))
    scratch = Path(tempfile.mkdtemp(prefix="compaction-", dir=args.dir))
    try:
        source = scratch / "source"
        started = time.perf_counter()
        generate(source, keys, args.updates, args.segment_mb, args.seed)
        size = log_bytes(source / TP.dir_name)
        print(
            f"generated {size / 1e6:.0f} MB: {keys} keys x {args.updates} updates "
            f"({keys * args.updates} records) in {time.perf_counter() - started:.0f} s",
            flush=True,
        )
        rows = []
        for kind in ("ours", "naive"):
            if kind == "naive" and args.skip_naive:
                continue
            work = scratch / kind
            shutil.copytree(source, work)
            r = run_child(kind, work, args.map_mb, args.segment_mb)
            after = log_bytes(work / TP.dir_name)
            check(work / TP.dir_name, keys, args.updates)
            shutil.rmtree(work)
            rows.append((kind, r, after))
            print(f"{kind}: {json.dumps(r)}", flush=True)
        map_bytes = (args.map_mb << 20) // 24 * 24
        print()
        print(
            f"Log: {size / 1e6:.0f} MB, {keys} keys x {args.updates} updates; offset map "
            f"{args.map_mb} MiB ({map_bytes // 24} slots, {int(map_bytes // 24 * 0.9)} keys "
            "a round)"
        )
        print()
        print(
            "| contender | wall s | CPU s | MB/s per core | peak RSS MiB | RSS before MiB "
            "| work RSS MiB | size after MB |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for kind, r, after in rows:
            mbps = size / 1e6 / r["cpu"]
            print(
                f"| {kind} | {r['wall']:.1f} | {r['cpu']:.1f} | {mbps:.0f} | "
                f"{r['peak_kib'] / 1024:.0f} | {r['rss_before_kib'] / 1024:.0f} | "
                f"{(r['peak_kib'] - r['rss_before_kib']) / 1024:.0f} | {after / 1e6:.1f} |"
            )
        if len(rows) == 2:
            (_, ours, _), (_, naive, _) = rows
            print()
            work = [r["peak_kib"] - r["rss_before_kib"] for r in (ours, naive)]
            print(
                f"naive / ours: {naive['cpu'] / ours['cpu']:.1f}x the CPU time "
                f"({naive['wall'] / ours['wall']:.1f}x the wall time), "
                f"{work[1] / max(1, work[0]):.1f}x the memory for the work"
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
