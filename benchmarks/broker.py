"""The embedded broker's produce and fetch paths against the segment files themselves, in one run.

    .venv/bin/python benchmarks/broker.py [--records N] [--partitions 1,16] [--value-bytes V]
                                          [--batch-bytes B] [--inflight K] [--repeat R]

Builds once, up front, N records (default 1 M) of V-byte values (default 100, no keys) in record
batches v2 of about B bytes of records (default 16 KiB, Kafka's producer ``batch.size``), as a
producer client sends them, each batch distinct. Then, for each partition count (default 1 and
16), with the batches spread round-robin over the partitions:

- produce, acks=1: ``Broker.append`` of every batch on a standalone broker (one client thread:
  with acks=1 a request completes when the leader has written it);
- produce, acks=all: ``EmbeddedCluster.append`` on a 3-broker in-process cluster, topic with
  replication factor 3 (the followers' fetcher threads replicate; a request completes when the
  whole ISR has the batch), from K client threads (default 5, Kafka's
  ``max.in.flight.requests.per.connection``), and the latency of one request in flight;
- produce acks=all, the process on one core (one partition only): the same on a new cluster with
  every thread of the process pinned to one core for the run (``sched_setaffinity``, Linux
  only; restored after): the interpreter lock then changes hands on one core. What the hand-offs
  across the two cores cost;
- acks=all's work in turn (one partition only): the same cluster's work for the batches with no
  thread and no wait, the followers' fetchers stopped: one thread appends K requests on the
  leader, then makes each follower fetch them from the leader and append them, as its fetcher
  does. What acks=all costs without its hand-offs: the best it could do under one interpreter;
- the baseline for both: writing the same batch bytes to one plain file (page cache, no fsync);
- the floor of an append: what no leader can skip, done the cheapest way this runtime has, into
  one plain file: each request copied (offsets are assigned in place), its headers checked by the
  broker's pass (``log_validator.scan``), its CRCs checked, its offsets and epoch
  written, and the write. No index, no producer state, no high watermark, no locks. The broker's
  acks=1 over this floor is the bookkeeping the real append adds;
- fetch, raw: every partition read back to its high watermark through ``Broker.fetch`` as a
  consumer fetches (one request for all partitions, 1 MiB partition max bytes, max_wait_ms=0,
  the next fetch offset from the batch headers), in MB/s of record bytes returned;
- fetch + decode: the same fetches, each response decoded by the columnar decoder (CRC checked),
  in records/s;
- the baselines: the same partitions' ``.log`` files read directly from the page cache (open +
  read) in reads of 1 MiB into a reused buffer (the granularity of the fetches) and whole (one
  read per file into a fresh buffer), and decoded: each 1 MiB read decoded (a partial last
  batch carried over), and each whole file decoded in one ``decode_records`` call.

Fetch and baselines are the best of R repetitions (default 5); produce runs once (each run
writes a fresh log dir). Prints a markdown table with broker / direct ratios, and acks=all over
acks=1. Produce rows also give the process's CPU time per request (every thread: client,
fetchers, brokers), which other jobs on shared cores disturb less than the wall time.
Everything lives in a temporary directory deleted at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import random
import shutil
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from crc32c import crc32c

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from broker_embedded.broker import Broker  # noqa: E402
from broker_embedded.cluster import EmbeddedCluster  # noqa: E402
from broker_embedded.common.fetch_request import FetchRequest, PartitionFetch  # noqa: E402
from broker_embedded.record import columnar_decoder, entry_scan, log_validator  # noqa: E402
from broker_embedded.record.batch_layout import ATTRIBUTES_OFFSET  # noqa: E402
from broker_embedded.record.memory_records_builder import MemoryRecordsBuilder  # noqa: E402
from broker_embedded.storage.topic_partition import TopicPartition  # noqa: E402

TOPIC = "bench"
PARTITION_MAX_BYTES = 1 << 20
_BATCH_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_OFFSET_DELTA = struct.Struct(">i")  # at byte 23 of a v2 batch


# -- input -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    batches: list[bytes]
    records: int

    @property
    def bytes(self) -> int:
        return sum(map(len, self.batches))


def build_batches(records: int, value_bytes: int, batch_bytes: int) -> Workload:
    """Distinct batches of ``value_bytes`` values, about ``batch_bytes`` of records each."""
    rng = random.Random(42)
    alphabet = b"abcdefghijklmnopqrstuvwxyz0123456789"
    noise = rng.randbytes(1 << 20).translate(bytes(alphabet[i % 36] for i in range(256)))
    now = int(time.time() * 1000)
    batches = []
    made = 0
    while made < records:
        builder = MemoryRecordsBuilder(0, 0)
        while made < records and builder.uncompressed_records_size < batch_bytes:
            head = b'{"id":%d,"p":"' % made
            at = rng.randrange(len(noise) - value_bytes)
            pad = noise[at : at + max(0, value_bytes - len(head) - 2)]
            builder.append(None, now + made // 1000, None, (head + pad + b'"}')[:value_bytes])
            made += 1
        batches.append(builder.build())
    return Workload(batches, records)


# -- produce ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timed:
    """Wall seconds, and CPU seconds of the whole process (every thread: the client's, the
    followers' fetchers, the brokers' own), which shared cores disturb less than the wall."""

    wall: float
    cpu: float


def _timed(fn: Callable[[], object]) -> Timed:
    gc.collect()
    began, cpu = time.perf_counter(), time.process_time()
    fn()
    return Timed(time.perf_counter() - began, time.process_time() - cpu)


def produce_standalone(broker: Broker, work: Workload, partitions: int) -> Timed:
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]

    def run() -> None:
        for i, batch in enumerate(work.batches):
            r = broker.append(tps[i % partitions], batch, acks=1)
            if r.error is not None:
                raise r.error

    return _timed(run)


def produce_cluster(
    cluster: EmbeddedCluster, batches: list[bytes], partitions: int, inflight: int
) -> Timed:
    """``inflight`` client threads, each sending its share of the batches, acks=all."""
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    errors: list[BaseException] = []

    def client(k: int) -> None:
        try:
            for i in range(k, len(batches), inflight):
                r = cluster.append(tps[i % partitions], batches[i], acks="all")
                if r.error is not None:
                    raise r.error
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    def run() -> None:
        threads = [threading.Thread(target=client, args=(k,)) for k in range(inflight)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    timed = _timed(run)
    if errors:
        raise errors[0]
    return timed


def append_floor(path: Path, batches: list[bytes]) -> None:
    """The floor of a leader append (module docstring), one request per batch, to a new file."""
    offset = 0
    try:
        with open(path, "wb", buffering=0) as f:
            for b in batches:
                buf = bytearray(b)
                arr = np.frombuffer(buf, np.uint8)
                table, summary = log_validator.scan(
                    arr, len(buf), log_validator.LEADER, offset, 1 << 20, True
                )
                if not summary[log_validator.S_OK]:
                    raise AssertionError(f"batch at offset {offset} refused")
                view = memoryview(buf)
                for row in table.tolist():
                    pos = row[entry_scan.S_POS]
                    crc = crc32c(view[pos + ATTRIBUTES_OFFSET : pos + row[entry_scan.S_SIZE]])
                    if crc != row[entry_scan.S_CRC]:
                        raise AssertionError(f"CRC mismatch at offset {offset}")
                log_validator.assign(arr, table, 0)
                f.write(buf)
                offset = int(summary[log_validator.S_LAST_OFFSET]) + 1
    finally:
        path.unlink()


def replicate_in_turn(cluster: EmbeddedCluster, batches: list[bytes], per_fetch: int) -> Timed:
    """acks=all's work in turn on this thread (module docstring); checks every follower ends
    with the leader's log end offset."""
    tp = TopicPartition(TOPIC, 0)
    leader = cluster.leader_for(tp)
    followers = [b for b in cluster.brokers.values() if b is not leader]
    for f in followers:
        f.replica_manager.fetchers.remove_partitions([tp])
    lrm = leader.replica_manager

    def fetch_and_append(follower: Broker) -> None:
        p, config = follower.replica_manager.partitions[tp], follower.replica_manager.config
        offset = p.log.log_end_offset
        request = FetchRequest(
            (PartitionFetch(tp, offset, config.replica_fetch_max_bytes, p.leader_epoch),),
            replica_id=follower.broker_id,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=config.replica_fetch_response_max_bytes,
        )
        r = lrm.fetch_messages(request).partitions[0]
        if r.error is not None:
            raise r.error
        p.append_records_to_follower(
            r.records,
            r.high_watermark,
            r.log_start_offset,
            leader_id=leader.broker_id,
            leader_epoch=p.leader_epoch,
            fetch_offset=offset,
        )

    def run() -> None:
        for i in range(0, len(batches), per_fetch):
            for batch in batches[i : i + per_fetch]:
                r = lrm.append_records({tp: batch}, required_acks=1)[tp]
                if r.error is not None:
                    raise r.error
            for f in followers:
                fetch_and_append(f)

    timed = _timed(run)
    end = leader.replica_manager.partitions[tp].log.log_end_offset
    behind = [
        f.broker_id for f in followers if f.replica_manager.partitions[tp].log.log_end_offset != end
    ]
    if behind:
        raise AssertionError(f"followers {behind} did not reach the leader's end {end}")
    return timed


@contextlib.contextmanager
def one_core() -> Iterator[None]:
    """Every thread of this process (and those it starts meanwhile) on its current first
    core; the threads' own sets restored after."""
    threads = [int(t) for t in os.listdir("/proc/self/task")]
    saved = {t: os.sched_getaffinity(t) for t in threads}
    core = {min(os.sched_getaffinity(0))}
    for t in threads:
        os.sched_setaffinity(t, core)
    try:
        yield
    finally:
        for t, cpus in saved.items():
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(t, cpus)


def write_file(path: Path, batches: list[bytes]) -> None:
    """The batches written to a new file, one write each (page cache, no fsync)."""
    try:
        with open(path, "wb", buffering=0) as f:
            for b in batches:
                f.write(b)
    finally:
        path.unlink()


# -- fetch -----------------------------------------------------------------------------------------


def next_offset(records: bytes, default: int) -> tuple[int, int]:
    """The offset after the last complete v2 batch of a fetch response's records, and where
    that batch ends (a partial batch after it is dropped, as consumers do)."""
    pos, end, last = 0, len(records), None
    while pos + 12 <= end:
        base, length = _BATCH_HEAD.unpack_from(records, pos)
        if pos + 12 + length > end:
            break
        last = base + _LAST_OFFSET_DELTA.unpack_from(records, pos + 23)[0]
        pos += 12 + length
    return (default if last is None else last + 1), pos


def fetch_all(broker: Broker, partitions: int, hws: list[int], decode: bool) -> tuple[int, int]:
    """Read every partition to its HW through ``Broker.fetch``: (bytes of the complete batches
    returned, decoded rows)."""
    offsets = [0] * partitions
    total_bytes = rows = 0
    while True:
        todo = [p for p in range(partitions) if offsets[p] < hws[p]]
        if not todo:
            return total_bytes, rows
        request = FetchRequest(
            tuple(
                PartitionFetch(TopicPartition(TOPIC, p), offsets[p], PARTITION_MAX_BYTES)
                for p in todo
            ),
            max_wait_ms=0,
        )
        for p, result in zip(todo, broker.fetch(request).partitions, strict=True):
            if result.error is not None:
                raise result.error
            records = result.records
            if decode:
                d = columnar_decoder.decode(
                    records, topic=TOPIC, partition=p, start_offset=offsets[p]
                )
                rows += d.num_rows
                new, used = d.next_offset, d.end_position
            else:
                new, used = next_offset(records, offsets[p])
            total_bytes += used
            if new <= offsets[p]:
                raise RuntimeError(f"partition {p}: no progress at offset {offsets[p]}")
            offsets[p] = new


def read_files(files: list[Path]) -> int:
    """Each file in one read (a fresh buffer the size of the file)."""
    n = 0
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            n += len(fh.read())
    return n


def read_files_chunked(files: list[Path]) -> int:
    """Each file in reads of ``PARTITION_MAX_BYTES`` into one reused buffer."""
    buf = bytearray(PARTITION_MAX_BYTES)
    n = 0
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while got := fh.readinto(buf):
                n += got
    return n


def decode_files(files: list[Path]) -> int:
    """Each file read whole, then decoded in one call."""
    rows = 0
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            data = fh.read()
        batches = columnar_decoder.decode_records(data, topic=TOPIC, partition=0)
        rows += sum(b.num_rows for b in batches)
    return rows


def decode_files_chunked(files: list[Path]) -> int:
    """Each file read in reads of ``PARTITION_MAX_BYTES`` into one reused buffer, each decoded
    up to its last complete batch; the partial batch after it moves to the buffer's front."""
    buf = bytearray(2 * PARTITION_MAX_BYTES)
    view = memoryview(buf)
    rows = 0
    for f in files:
        kept = 0
        with open(f, "rb", buffering=0) as fh:
            while got := fh.readinto(view[kept : kept + PARTITION_MAX_BYTES]):
                filled = kept + got
                d = columnar_decoder.decode(view[:filled], topic=TOPIC, partition=0)
                rows += d.num_rows
                kept = filled - d.end_position
                buf[:kept] = view[d.end_position : filled]
    return rows


def best_of(repeat: int, fn: Callable[[], object], expected: object) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        began = time.perf_counter()
        got = fn()
        elapsed = time.perf_counter() - began
        if expected is not None and got != expected:
            raise AssertionError(f"got {got}, expected {expected}")
        best = min(best, elapsed)
    return best


# -- one partition count ---------------------------------------------------------------------------


@dataclass
class Results:
    partitions: int
    produce_1: Timed = Timed(0.0, 0.0)
    produce_all: Timed = Timed(0.0, 0.0)
    latency_all: Timed = Timed(0.0, 0.0)
    latency_requests: int = 0
    in_turn: Timed | None = None
    one_core: Timed | None = None
    write: float = 0.0
    floor: float = 0.0
    fetch_raw: float = 0.0
    read_raw: float = 0.0
    fetch_decode: float = 0.0
    read_decode: float = 0.0
    read_chunked: float = 0.0
    decode_chunked: float = 0.0
    log_bytes: int = 0


def run_partitions(
    base: Path, work: Workload, partitions: int, inflight: int, repeat: int
) -> Results:
    res = Results(partitions)
    res.write = best_of(repeat, lambda: write_file(base / "plain.bin", work.batches), None)
    res.floor = best_of(repeat, lambda: append_floor(base / "floor.bin", work.batches), None)

    print(f"[{partitions} partition(s)] produce acks=1 ...", flush=True)
    broker = Broker(base / "standalone", create=True)
    try:
        broker.create_topic(TOPIC, partitions)
        res.produce_1 = produce_standalone(broker, work, partitions)
        hws = [
            broker.list_offsets(TOPIC, p, -1).offset for p in range(partitions)
        ]  # LATEST: the HW
        files = sorted((base / "standalone").glob(f"{TOPIC}-*/*.log"))
        res.log_bytes = sum(f.stat().st_size for f in files)
        if res.log_bytes != work.bytes:
            raise AssertionError(f"the log holds {res.log_bytes} bytes, {work.bytes} produced")
        print(f"[{partitions} partition(s)] fetch and direct reads ...", flush=True)
        res.fetch_raw = best_of(
            repeat, lambda: fetch_all(broker, partitions, hws, False), (work.bytes, 0)
        )
        res.read_raw = best_of(repeat, lambda: read_files(files), work.bytes)
        res.read_chunked = best_of(repeat, lambda: read_files_chunked(files), work.bytes)
        res.fetch_decode = best_of(
            repeat, lambda: fetch_all(broker, partitions, hws, True), (work.bytes, work.records)
        )
        res.read_decode = best_of(repeat, lambda: decode_files(files), work.records)
        res.decode_chunked = best_of(repeat, lambda: decode_files_chunked(files), work.records)
    finally:
        broker.close()
        shutil.rmtree(base / "standalone")

    print(f"[{partitions} partition(s)] produce acks=all, 3 replicas ...", flush=True)
    cluster = EmbeddedCluster(base / "cluster", 3)
    try:
        cluster.create_topic(TOPIC, partitions, replication_factor=3)
        res.produce_all = produce_cluster(cluster, work.batches, partitions, inflight)
        res.latency_requests = min(len(work.batches), 300)
        res.latency_all = produce_cluster(
            cluster, work.batches[: res.latency_requests], partitions, 1
        )
    finally:
        cluster.close()
        shutil.rmtree(base / "cluster")
    if partitions == 1 and hasattr(os, "sched_setaffinity"):
        cluster = EmbeddedCluster(base / "onecore", 3)
        try:
            cluster.create_topic(TOPIC, 1, replication_factor=3)
            with one_core():
                res.one_core = produce_cluster(cluster, work.batches, 1, inflight)
        finally:
            cluster.close()
            shutil.rmtree(base / "onecore")
    if partitions == 1:
        cluster = EmbeddedCluster(base / "inturn", 3)
        try:
            cluster.create_topic(TOPIC, 1, replication_factor=3)
            res.in_turn = replicate_in_turn(cluster, work.batches, inflight)
        finally:
            cluster.close()
            shutil.rmtree(base / "inturn")
    return res


# -- report ----------------------------------------------------------------------------------------


def _rate(records: int, size: int, seconds: float) -> str:
    return f"{records / seconds / 1e6:.2f} M rec/s, {size / seconds / 1e6:,.0f} MB/s"


def _produced(records: int, size: int, t: Timed, requests: int) -> str:
    return f"{_rate(records, size, t.wall)}, CPU {t.cpu / requests * 1e6:,.0f} µs/request"


def _mb(size: int, seconds: float) -> str:
    return f"{size / seconds / 1e6:,.0f} MB/s"


def _rec(records: int, seconds: float) -> str:
    return f"{records / seconds / 1e6:.2f} M rec/s"


def print_table(work: Workload, results: list[Results], inflight: int) -> None:
    n, size, requests = work.records, work.bytes, len(work.batches)
    print()
    print(
        "| workload | partitions | broker | direct, 1 MiB reads (16 KiB writes) | broker / direct "
        "| direct, whole files | broker / whole files |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in results:
        p = r.partitions
        rows = [
            (
                "produce acks=1",
                _produced(n, size, r.produce_1, requests),
                _mb(size, r.write),
                r.write / r.produce_1.wall,
                "",
                None,
            ),
            (
                "the floor of an append (copy, compiled checks, CRC, offsets, write)",
                f"{_mb(size, r.floor)}, {r.floor / requests * 1e6:.1f} µs/request",
                _mb(size, r.write),
                r.write / r.floor,
                "",
                None,
            ),
            ("produce acks=1 / the floor", "", "", r.floor / r.produce_1.wall, "", None),
            (
                f"produce acks=all, 3 replicas, {inflight} in flight",
                _produced(n, size, r.produce_all, requests),
                _mb(size, r.write),
                r.write / r.produce_all.wall,
                "",
                None,
            ),
            (
                f"produce acks=all / acks=1, {inflight} in flight",
                "",
                "",
                r.produce_1.wall / r.produce_all.wall,
                "",
                None,
            ),
            *(
                []
                if r.one_core is None
                else [
                    (
                        f"produce acks=all, {inflight} in flight, the process on one core",
                        _produced(n, size, r.one_core, requests),
                        "",
                        None,
                        "",
                        None,
                    ),
                    (
                        "acks=all on one core / acks=1",
                        "",
                        "",
                        r.produce_1.wall / r.one_core.wall,
                        "",
                        None,
                    ),
                ]
            ),
            *(
                []
                if r.in_turn is None
                else [
                    (
                        f"acks=all's work in turn, one thread ({inflight} requests a fetch)",
                        _produced(n, size, r.in_turn, requests),
                        "",
                        None,
                        "",
                        None,
                    ),
                    (
                        "acks=all in turn / acks=1 (its best without hand-offs)",
                        "",
                        "",
                        r.produce_1.wall / r.in_turn.wall,
                        "",
                        None,
                    ),
                ]
            ),
            (
                f"produce acks=all, 1 in flight ({r.latency_requests} requests)",
                f"{r.latency_all.wall / r.latency_requests * 1000:.2f} ms/request, CPU "
                f"{r.latency_all.cpu / r.latency_requests * 1e6:,.0f} µs",
                "",
                None,
                "",
                None,
            ),
            (
                "fetch, raw bytes",
                _mb(size, r.fetch_raw),
                "read " + _mb(size, r.read_chunked),
                r.read_chunked / r.fetch_raw,
                "read " + _mb(size, r.read_raw),
                r.read_raw / r.fetch_raw,
            ),
            (
                "fetch + columnar decode",
                _rec(n, r.fetch_decode),
                "decode " + _rec(n, r.decode_chunked),
                r.decode_chunked / r.fetch_decode,
                "decode " + _rec(n, r.read_decode),
                r.read_decode / r.fetch_decode,
            ),
        ]
        for name, broker, direct, ratio, whole, whole_ratio in rows:
            cells = [
                name,
                str(p),
                broker,
                direct,
                "" if ratio is None else f"{ratio:.2f}x",
                whole,
                "" if whole_ratio is None else f"{whole_ratio:.2f}x",
            ]
            print("| " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", default="1,16", help="comma-separated partition counts")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch-bytes", type=int, default=16 * 1024)
    parser.add_argument("--inflight", type=int, default=5, help="acks=all client threads")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    counts = [int(p) for p in args.partitions.split(",")]

    began = time.perf_counter()
    work = build_batches(args.records, args.value_bytes, args.batch_bytes)
    print(
        f"built {len(work.batches):,} batches, {work.records:,} records, "
        f"{work.bytes / 1e6:.1f} MB ({work.bytes / len(work.batches) / 1024:.1f} KiB a batch) "
        f"in {time.perf_counter() - began:.1f} s; {os.cpu_count()} cores"
    )
    print(f"numba warm-up: {columnar_decoder.warm_up():.2f} s (not timed below)")
    results = []
    with tempfile.TemporaryDirectory(prefix="kafkalog-bench-") as tmp:
        for partitions in counts:
            base = Path(tmp) / f"p{partitions}"
            base.mkdir()
            results.append(run_partitions(base, work, partitions, args.inflight, args.repeat))
    print_table(work, results, args.inflight)
    print(f"\ntotal {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
