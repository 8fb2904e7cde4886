"""The cost of ``kafkalog serve --metrics-port``: produce and fetch with the metrics on against
off, in one run, and the cost of a scrape.

    .venv/bin/python benchmarks/serve_metrics.py [--records N] [--value-bytes V] [--trials T]
                                                 [--scrape-interval S] [--toggled]

Two ``kafkalog serve`` run side by side on fresh log dirs, one with ``--metrics-port 0`` and
one without; only one is driven at a time, alternating (off, on, on, off, ...) trial after trial,
so a drift of the shared machine's load falls on both. Each trial runs benchmarks/serve.py's
workloads on new topics: produce acks=1 and acks=all (confluent-kafka, N records of V bytes,
default 300,000 of 100, ``linger.ms`` 5), consume from earliest (confluent-kafka), the raw Fetch
v4 loop (1 MiB a request, over the topic 20 times), and produce with one record a request
(``linger.ms`` 0, one in flight, N / 30 records): the per-request cost of the latency split
shows most there. Each server first runs them once on 1,000 records (not counted: the first
consumer group creates ``__consumer_offsets``).

Measured per workload: throughput (records/s; the best and the median of the T trials, default
5) and the server process's CPU time per record (the sum of its threads' on-CPU nanoseconds,
``/proc/PID/task/*/schedstat``: far less sensitive to a loaded machine than throughput). Scrapes
are measured apart, after the trials: 20 scrapes of the idle "on" server, its CPU per scrape,
so the cost at an interval is that over the interval. ``--scrape-interval S`` also scrapes the
"on" server every S seconds while it is driven (a stress; its scrapes then count in the
workloads' CPU). Prints a markdown table with on / off ratios (1.00x: no cost). Exits 1 on an
error (a server that fails, a record missing), never on a ratio.

``--toggled``: instead, one server in this process whose metrics are switched off and on between
trials (same server, same page cache: the two servers' log dirs differ in what the kernel keeps
cached); the CPU is then this whole process's, clients included.

It also times, in this process, what the metrics add to one request (the latency stamps, the
histograms, a partition's topic counters): :func:`per_request_cost`.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import KafkaException, Producer  # noqa: E402

from benchmarks._serve_peers import PeerError, Server, kafkalog_server  # noqa: E402
from benchmarks.serve import (  # noqa: E402
    BenchError,
    Figure,
    RawFetcher,
    Settings,
    _figure,
    _produce_one,
    consume,
    create_topic,
    produce,
)
from broker_embedded.broker_config import BrokerConfig  # noqa: E402
from broker_embedded.replica_manager.broker_topic_stats import (  # noqa: E402
    MESSAGES_IN,
    BrokerTopicStats,
)
from broker_embedded.server.broker_server import BrokerServer  # noqa: E402
from broker_embedded.server.request_metrics import RequestMetrics, RequestTimes  # noqa: E402
from spark_kafkalog.serve_command import MetricsOptions, open_brokers, parse_listeners  # noqa: E402

MODES = ("off", "on")
METRICS_LINE = re.compile(rb"metrics on (http://\S+)")
WAIT_S = 30.0
RAW_PASSES = 20


class Scraper:
    """GETs the metrics URL every ``interval`` seconds on a daemon thread until stopped."""

    def __init__(self, url: str, interval: float) -> None:
        self.url, self.interval = url, interval
        self.count, self.seconds = 0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scraper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            began = time.perf_counter()
            with urllib.request.urlopen(self.url, timeout=WAIT_S) as answer:
                answer.read()
            self.seconds += time.perf_counter() - began
            self.count += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)


def metrics_url(out: Path) -> str:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = METRICS_LINE.search(out.read_bytes())
        if found:
            return found.group(1).decode()
        time.sleep(0.05)
    raise PeerError(f"no metrics line in {out}")


@contextmanager
def servers(work: Path) -> Iterator[dict[str, tuple[Server, str | None]]]:
    """Both servers: mode -> (server, metrics URL or None)."""
    with (
        kafkalog_server(work / "logs-off", work / "off") as off,
        kafkalog_server(work / "logs-on", work / "on", args=("--metrics-port", "0")) as on,
    ):
        yield {"off": (off, None), "on": (on, metrics_url(work / "on" / "kafkalog-default.out"))}


def one_per_request(server: Server, topic: str, records: int, value_bytes: int) -> Figure:
    """Produce acks=1 with one record a request (linger 0, one request in flight)."""
    create_topic(server, topic)
    producer = Producer({
        "bootstrap.servers": server.bootstrap, "acks": "1", "linger.ms": 0,
        "batch.num.messages": 1, "max.in.flight.requests.per.connection": 1,
        "enable.idempotence": False, "compression.type": "none",
    })  # fmt: skip
    producer.list_topics(topic, timeout=WAIT_S)
    value = os.urandom(value_bytes)
    began = time.perf_counter()
    for _ in range(records):
        _produce_one(producer, topic, value)
    if producer.flush(WAIT_S * 4):
        raise BenchError(f"{server.name}: {topic}: records undelivered")
    return Figure(time.perf_counter() - began, records, records * value_bytes)


def raw_fetches(server: Server, topic: str, s: Settings) -> Figure:
    """The raw Fetch loop over the topic :data:`RAW_PASSES` times on one connection (one pass
    takes a few ms: too short for one figure)."""
    fetcher = RawFetcher(server, topic, 1 << 20)
    try:
        passes = [fetcher.read_all(s.records) for _ in range(RAW_PASSES)]
    finally:
        fetcher.close()
    return Figure(sum(f.seconds for f in passes), s.records * RAW_PASSES,
                  sum(f.nbytes for f in passes))  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """On-CPU time of a process's live threads so far (Linux ``/proc/PID/task/*/schedstat``,
    nanoseconds; a thread that ended meanwhile is missed, and the servers' threads live as
    long as they do, but a scrape's HTTP thread)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile
    return total / 1e9


def scrape_cost(server: Server, url: str, scrapes: int = 20) -> tuple[float, float]:
    """(server CPU ms, wall ms) of one scrape of the idle server, averaged over ``scrapes``
    (the scrape's HTTP thread is counted while it runs: each is sampled before it ends)."""
    cpu = wall = 0.0
    for _ in range(scrapes):
        before, began = process_cpu_seconds(server.pid), time.perf_counter()
        with urllib.request.urlopen(url, timeout=WAIT_S) as answer:
            answer.read()
        wall += time.perf_counter() - began
        time.sleep(0.05)  # the HTTP thread has ended: the process total has it
        cpu += process_cpu_seconds(server.pid) - before
    return cpu / scrapes * 1000, wall / scrapes * 1000


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a whole process, ended threads included (``/proc/PID/stat``,
    clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Measured:
    figure: Figure
    server_cpu_s: float  # the server's CPU time during the workload

    @property
    def cpu_us_per_record(self) -> float:
        return self.server_cpu_s / self.figure.records * 1e6


def workloads(server: Server, s: Settings, trial: int) -> dict[str, Measured]:
    small = max(1, s.records // 30)
    runs: dict[str, Callable[[], Figure]] = {
        "produce acks=1": lambda: produce(server, f"p1-{trial}", "1", s),
        "produce acks=all": lambda: produce(server, f"pall-{trial}", "all", s),
        "consume from earliest": lambda: consume(server, f"p1-{trial}", s, trial),
        "raw fetch, 1 MiB a request": lambda: raw_fetches(server, f"p1-{trial}", s),
        "produce acks=1, 1 record a request": lambda: one_per_request(
            server, f"small-{trial}", small, s.value_bytes
        ),
    }
    out = {}
    for label, run in runs.items():
        cpu = cpu_seconds(server.pid)
        figure = run()
        out[label] = Measured(figure, cpu_seconds(server.pid) - cpu)
    return out


def measure(
    s: Settings, trials: int, interval: float
) -> tuple[dict, list[Scraper], tuple[float, float]]:
    """mode -> workload -> the trials' figures; the stress scrapers; a scrape's cost."""
    figures: dict[str, dict[str, list[Measured]]] = {mode: {} for mode in MODES}
    scrapes: list[Scraper] = []
    with tempfile.TemporaryDirectory(prefix="kafkalog-metrics-bench-") as tmp:
        for mode in MODES:
            (Path(tmp) / mode).mkdir()
        with servers(Path(tmp)) as both:
            warm = Settings(1_000, s.value_bytes, 1, s.linger_ms, s.batch_bytes, (1,))
            for server, _ in both.values():  # the first group creates __consumer_offsets
                workloads(server, warm, -1)
            for t in range(trials):
                for mode in MODES if t % 2 == 0 else MODES[::-1]:
                    server, url = both[mode]
                    scraper = None if url is None or not interval else Scraper(url, interval)
                    try:
                        measured = workloads(server, s, t)
                    finally:
                        if scraper is not None:
                            scraper.stop()
                            scrapes.append(scraper)
                    for label, m in measured.items():
                        figures[mode].setdefault(label, []).append(m)
                        cpu = f"server CPU {m.cpu_us_per_record:.2f} us/record"
                        print(f"  trial {t + 1}, metrics {mode}: {label}: {_figure(m.figure)}, "
                              f"{cpu}", flush=True)  # fmt: skip
            server, url = both["on"]
            assert url is not None
            return figures, scrapes, scrape_cost(server, url)


def per_request_cost(calls: int = 200_000) -> float:
    """Microseconds the metrics add to one produce request of one partition: the connection's
    stamps (reset, dequeued, handler returned, response sent), the six histograms and the
    topic counters."""

    times, metrics, stats = RequestTimes(), RequestMetrics(), BrokerTopicStats()
    began = time.perf_counter()
    for _ in range(calls):
        times.reset()
        times.dequeued_ns = dequeued = time.monotonic_ns()
        stats.appended("events", 100, 10_000)
        times.handler_returned(dequeued)
        times.response_sent()
        metrics.finished(0, 9, dequeued - 1000, times, time.monotonic_ns())
    return (time.perf_counter() - began) / calls * 1e6


def toggled(s: Settings, trials: int) -> dict[str, dict[str, list[Measured]]]:
    """``--toggled``: one served broker in this process (the serve command's own
    ``open_brokers``, metrics on), its request metrics and topic counters switched off and on
    between trials (off, on, on, off, ...): same server, same page cache. The CPU is this whole
    process's (the clients' share is the same in both modes)."""

    figures: dict[str, dict[str, list[Measured]]] = {mode: {} for mode in MODES}
    with tempfile.TemporaryDirectory(prefix="kafkalog-metrics-bench-") as tmp:
        listeners = parse_listeners("PLAINTEXT://127.0.0.1:0")
        served = open_brokers(Path(tmp), BrokerConfig(), 1, listeners, None, MetricsOptions())
        try:
            served.start_all()
            bound, broker = served.server(0), served._brokers()[0]
            assert bound is not None
            server = Server("kafkalog (in this process)", bound.endpoints[0].port, os.getpid())
            workloads(server, Settings(1_000, s.value_bytes, 1, 5, 1_000_000, (1,)), -1)
            for t in range(trials * 2):
                mode = MODES[(t + t // 2) % 2]  # off, on, on, off, off, on, ...
                for p in bound.socket_server.processors:  # new connections follow it
                    p.metrics = RequestMetrics() if mode == "on" else None
                broker.replica_manager.topic_stats = BrokerTopicStats() if mode == "on" else None
                for label, m in workloads(server, s, t).items():
                    figures[mode].setdefault(label, []).append(m)
        finally:
            served.shutdown()
    return figures


def server_threads_cpu_seconds() -> float:
    """On-CPU time so far of this process's Python threads but the main one (the server's
    network, handler and purgatory threads; not the main thread driving the client, nor
    librdkafka's own threads, which are not Python threads)."""
    main = threading.main_thread().native_id
    total = 0
    for thread in threading.enumerate():
        if thread.native_id in (None, main):
            continue
        try:
            stat = Path(f"/proc/self/task/{thread.native_id}/schedstat").read_text()
            total += int(stat.split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile
    return total / 1e9


def switch_metrics(bound: BrokerServer, kept: list[RequestMetrics], on: bool) -> None:
    """Between chunks, with no request in flight: the processors' request metrics (``kept``,
    one per processor, so their histograms grow across chunks) and their open connections'
    latency stamps, on or off: the same connection is then timed or not."""
    for p, metrics in zip(bound.socket_server.processors, kept, strict=True):
        p.metrics = metrics if on else None
        for conn in list(p._connections.values()):
            conn.times = RequestTimes() if on else None


PAIRED_MODES = ("off", "on", "control")
PRODUCE_KEY = 0
SETTLE_S = 0.005


def chunk_order(blocks: int) -> Iterator[str]:
    """``--pairs``' chunk modes: blocks of the three, each block a rotation of the one before,
    every other set of three rotations reversed, so each mode sits in each place equally."""
    for b in range(blocks):
        k = b % 3
        block = PAIRED_MODES[k:] + PAIRED_MODES[:k]
        yield from block if (b // 3) % 2 == 0 else block[::-1]


def paired(blocks: int, chunk: int, value_bytes: int) -> dict[str, list[float]]:
    """``--pairs``: the one-record produce request alone, in one served broker of this process
    and from one producer (one connection), in ``blocks`` blocks of three chunks of ``chunk``
    requests each: metrics off, on (:func:`switch_metrics` and the topic counters), and off
    again as a control (what "off" against "off" gives is this run's noise), in the order of
    :func:`chunk_order`. Returns mode -> each chunk's server CPU
    (:func:`server_threads_cpu_seconds`) per request, in microseconds."""
    per_mode: dict[str, list[float]] = {mode: [] for mode in PAIRED_MODES}
    value = os.urandom(value_bytes)
    with tempfile.TemporaryDirectory(prefix="kafkalog-metrics-bench-") as tmp:
        listeners = parse_listeners("PLAINTEXT://127.0.0.1:0")
        served = open_brokers(Path(tmp), BrokerConfig(), 1, listeners, None, MetricsOptions())
        try:
            served.start_all()
            bound, broker = served.server(0), served._brokers()[0]
            assert bound is not None
            server = Server("kafkalog (in this process)", bound.endpoints[0].port, os.getpid())
            create_topic(server, "one")
            producer = Producer({
                "bootstrap.servers": server.bootstrap, "acks": "1", "linger.ms": 0,
                "batch.num.messages": 1, "max.in.flight.requests.per.connection": 1,
                "enable.idempotence": False, "compression.type": "none",
            })  # fmt: skip
            kept = [RequestMetrics() for _ in bound.socket_server.processors]
            stats = BrokerTopicStats()
            for c, mode in enumerate(["warm-up", *chunk_order(blocks)]):
                switch_metrics(bound, kept, mode == "on")
                broker.replica_manager.topic_stats = stats if mode == "on" else None
                cpu = server_threads_cpu_seconds()
                for _ in range(chunk):
                    _produce_one(producer, "one", value)
                if producer.flush(WAIT_S):
                    raise BenchError(f"chunk {c}: records undelivered")
                time.sleep(SETTLE_S)  # the server finishes the last response after it is sent
                if mode in per_mode:
                    per_mode[mode].append((server_threads_cpu_seconds() - cpu) / chunk * 1e6)
            del producer  # closes its connections before the server goes
            check_switched(kept, stats, chunk, blocks)
        finally:
            served.shutdown()
    return per_mode


def check_switched(
    kept: list[RequestMetrics], stats: BrokerTopicStats, chunk: int, chunks: int
) -> None:
    """The ``chunks`` "on" chunks alone were counted: their records counted in, their Produce
    requests timed (:class:`BenchError` if not: the switch did not work). The last request of
    a chunk may be timed or not: the server times it when the response's last byte is written,
    which may come after the client has read it and the metrics were switched off."""
    expected = chunk * chunks
    timed = sum(api.count for m in kept if (api := m.apis[PRODUCE_KEY]) is not None)
    counted = stats.snapshot()[0][MESSAGES_IN]
    if not expected - chunks <= timed <= expected or counted != expected:
        raise BenchError(f"metrics on for {expected} requests: {timed} timed, {counted} counted")


def print_pairs(per_mode: dict[str, list[float]]) -> None:
    off = per_mode["off"]
    print(f"\none-record produce requests, server CPU a request, {len(off)} chunks per mode")
    print("\n| chunks | median | mean | / off, chunk by chunk: median (middle half) "
          "| / off, means |\n|---|---|---|---|---|")  # fmt: skip
    for mode, cpu in per_mode.items():
        ratios = sorted(b / a for a, b in zip(off, cpu, strict=True))
        q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
        print(f"| {mode} | {statistics.median(cpu):.1f} us | {statistics.mean(cpu):.1f} us "
              f"| {statistics.median(ratios):.3f}x ({q1:.3f}x to {q3:.3f}x) "
              f"| {statistics.mean(cpu) / statistics.mean(off):.3f}x |")  # fmt: skip


def print_table(
    figures: dict[str, dict[str, list[Measured]]],
    scrapes: list[Scraper],
    scrape: tuple[float, float] | None,
) -> None:
    print("\n| workload | off: best / median | on: best / median | on / off: best, median "
          "| server CPU per record, off / on (median) |\n|---|---|---|---|---|")  # fmt: skip
    for label, offs in figures["off"].items():
        ons = figures["on"][label]
        off_best, on_best = (max(m.figure.records_per_s for m in ms) for ms in (offs, ons))
        off_med, on_med = (statistics.median(m.figure.records_per_s for m in ms)
                           for ms in (offs, ons))  # fmt: skip
        off_cpu, on_cpu = (statistics.median(m.cpu_us_per_record for m in ms)
                           for ms in (offs, ons))  # fmt: skip
        print(f"| {label} | {off_best / 1e3:,.0f} / {off_med / 1e3:,.0f} k rec/s "
              f"| {on_best / 1e3:,.0f} / {on_med / 1e3:,.0f} k rec/s "
              f"| {on_best / off_best:.3f}x, {on_med / off_med:.3f}x "
              f"| {off_cpu:.2f} / {on_cpu:.2f} us ({on_cpu / off_cpu:.3f}x) |")  # fmt: skip
    if scrape is None:
        return
    cpu_ms, wall_ms = scrape
    print(f"\na scrape of the idle server: {cpu_ms:.1f} ms of its CPU, {wall_ms:.1f} ms; at "
          f"Prometheus' 15 s interval {cpu_ms / 150:.3f}% of a core")  # fmt: skip
    count = sum(sc.count for sc in scrapes)
    if count:
        mean = sum(sc.seconds for sc in scrapes) / count * 1000
        print(f"{count} scrapes while the 'on' server was driven, {mean:.1f} ms each on average")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--scrape-interval", type=float, default=0.0, help="0: none")
    parser.add_argument("--toggled", action="store_true",
                        help="one server in this process, metrics switched off and on")  # fmt: skip
    parser.add_argument("--pairs", type=int, default=0, metavar="BLOCKS",
                        help="one-record produce only: BLOCKS off/on/control blocks")  # fmt: skip
    parser.add_argument("--chunk", type=int, default=1_000, help="requests a --pairs chunk")
    a = parser.parse_args(argv)
    if a.records < 1 or a.trials < 1 or a.scrape_interval < 0:
        parser.error("--records and --trials must be >= 1, --scrape-interval >= 0")
    s = Settings(a.records, a.value_bytes, 1, 5, 1_000_000, (1,))
    print(f"{s.records:,} records of {s.value_bytes} bytes, {a.trials} trials per mode; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    began = time.perf_counter()
    if a.pairs:
        try:
            print_pairs(paired(a.pairs, a.chunk, a.value_bytes))
        except (BenchError, PeerError, KafkaException) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"\ntotal {time.perf_counter() - began:.0f} s, load {os.getloadavg()[0]:.1f}")
        return 0
    try:
        if a.toggled:
            figures, scrapes, scrape = toggled(s, a.trials), [], None
        else:
            figures, scrapes, scrape = measure(s, a.trials, a.scrape_interval)
    except (BenchError, PeerError, KafkaException) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print_table(figures, scrapes, scrape)
    print(f"\nthe metrics' work per request, in this process: {per_request_cost():.2f} us")
    print(f"\ntotal {time.perf_counter() - began:.0f} s, load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
