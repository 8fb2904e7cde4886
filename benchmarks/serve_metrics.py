"""The cost of ``kafkalog serve --metrics-port``: produce and fetch with the metrics on against
off, in one run, and the cost of a scrape.

    .venv/bin/python benchmarks/serve_metrics.py [--records N] [--value-bytes V] [--trials T]
                                                 [--scrape-interval S] [--scrapes K]
                                                 [--cost-calls C]
    .venv/bin/python benchmarks/serve_metrics.py --pairs BLOCKS [--chunk C] [--value-bytes V]

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
are measured apart, after the trials: K scrapes (default 20) of the idle "on" server, its CPU
per scrape, so the cost at an interval is that over the interval. ``--scrape-interval S`` also
scrapes the "on" server every S seconds while it is driven (a stress; its scrapes then count in
the workloads' CPU). Prints a markdown table with on / off ratios (1.00x: no cost). Exits 1 on an
error (a server that fails, a record missing), never on a ratio.

``--pairs BLOCKS``: instead, one served broker in this process (the serve command's own
``open_brokers``) and three workloads, each on one client connection kept for the whole run:
produce acks=1 with one record a request (C records, default 1,000), batched produce acks=1
(linger 5 ms, 20 * C records) and the raw Fetch loop (5 passes over a topic of 20 * C records
produced once). They run in chunks whose metrics are switched, between chunks, off, on, or off
again as a control: the processors' request metrics, the open connections' latency stamps and
the topic counters (the same connection is timed or not). BLOCKS blocks of three chunks, the
order rotated from block to block (:func:`chunk_order`), after a warm-up chunk. Measured: the
CPU of the server's threads alone (this process's Python threads but the main one, which
drives the clients; librdkafka's threads are not Python threads) per record, each chunk against
the "off" chunk of its block; the control's ratio is the run's own noise. Each chunk checks
that its metrics were switched (the requests timed, the records counted in). Why this mode:
two servers (or two connections) differ by more than the metrics cost (two producers connected
in turn to one server differed by 6 to 8% in server CPU a request with the metrics off).

It also times, in this process, what the metrics add to one request (the latency stamps, the
histograms, a partition's topic counters): :func:`per_request_cost`, over C calls (default
200,000).
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
    producer = Producer(
        {
            "bootstrap.servers": server.bootstrap,
            "acks": "1",
            "linger.ms": 0,
            "batch.num.messages": 1,
            "max.in.flight.requests.per.connection": 1,
            "enable.idempotence": False,
            "compression.type": "none",
        }
    )
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
    return Figure(
        sum(f.seconds for f in passes), s.records * RAW_PASSES, sum(f.nbytes for f in passes)
    )


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
        "produce acks=1": lambda: produce(server, f"p1-{trial}", "1", s.batch_bytes[0], s),
        "produce acks=all": lambda: produce(server, f"pall-{trial}", "all", s.batch_bytes[0], s),
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
    s: Settings, trials: int, interval: float, scrapes_idle: int = 20
) -> tuple[dict, list[Scraper], tuple[float, float]]:
    """mode -> workload -> the trials' figures; the stress scrapers; a scrape's cost."""
    figures: dict[str, dict[str, list[Measured]]] = {mode: {} for mode in MODES}
    scrapes: list[Scraper] = []
    with tempfile.TemporaryDirectory(prefix="kafkalog-metrics-bench-") as tmp:
        for mode in MODES:
            (Path(tmp) / mode).mkdir()
        with servers(Path(tmp)) as both:
            warm = Settings(1_000, s.value_bytes, 1, s.linger_ms, s.batch_bytes, (1,), 1)
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
                        print(
                            f"  trial {t + 1}, metrics {mode}: {label}: {m.figure}, {cpu}",
                            flush=True,
                        )
            server, url = both["on"]
            assert url is not None
            return figures, scrapes, scrape_cost(server, url, scrapes_idle)


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
SETTLE_S = 0.005
BATCHED = 20  # records of the batched produce, per one-record request of a chunk
FETCH_PASSES = 5  # raw fetch passes over the fetched topic, per chunk


def chunk_order(blocks: int) -> Iterator[str]:
    """``--pairs``' chunk modes: blocks of the three, each block a rotation of the one before,
    every other set of three rotations reversed, so each mode sits in each place equally."""
    for b in range(blocks):
        k = b % 3
        block = PAIRED_MODES[k:] + PAIRED_MODES[:k]
        yield from block if (b // 3) % 2 == 0 else block[::-1]


def paired_producer(bootstrap: str, one_per_request: bool) -> Producer:
    settings = {
        "bootstrap.servers": bootstrap,
        "acks": "1",
        "enable.idempotence": False,
        "compression.type": "none",
        "message.timeout.ms": int(WAIT_S * 1000),
    }
    if one_per_request:
        settings.update(
            {"linger.ms": 0, "batch.num.messages": 1, "max.in.flight.requests.per.connection": 1}
        )
    else:
        settings.update({"linger.ms": 5, "batch.size": 1_000_000})
    return Producer(settings)


def produced(producer: Producer, topic: str, records: int, value: bytes) -> int:
    for _ in range(records):
        _produce_one(producer, topic, value)
    if producer.flush(WAIT_S):
        raise BenchError(f"{topic}: records undelivered")
    return records


class PairedWorkloads:
    """The three workloads of ``--pairs``, each on one client kept for the whole run (one
    connection each, so that a chunk's metrics are switched on the same connection): produce
    with one record a request, batched produce (linger 5 ms) and the raw Fetch loop (1 MiB a
    request) over a third topic of as many records as a batched chunk, produced once.
    ``runs``: label -> a function running the workload once, returning the records handled."""

    def __init__(self, server: Server, chunk: int, value_bytes: int) -> None:
        for topic in ("one", "batched", "fetched"):
            create_topic(server, topic)
        self.chunk, self.value = chunk, os.urandom(value_bytes)
        self.one = paired_producer(server.bootstrap, True)
        self.batched = paired_producer(server.bootstrap, False)
        self.fetched = produced(self.batched, "fetched", chunk * BATCHED, self.value)
        self.fetcher = RawFetcher(server, "fetched", 1 << 20)
        self.runs: dict[str, Callable[[], int]] = {
            "produce acks=1, 1 record a request": lambda: produced(
                self.one, "one", self.chunk, self.value
            ),
            "produce acks=1, batched": lambda: produced(
                self.batched, "batched", self.chunk * BATCHED, self.value
            ),
            "raw fetch, 1 MiB a request": self.fetch,
        }

    def fetch(self) -> int:
        for _ in range(FETCH_PASSES):
            self.fetcher.read_all(self.fetched)
        return self.fetched * FETCH_PASSES

    def close(self) -> None:
        self.fetcher.close()
        del self.one, self.batched  # librdkafka closes their connections


def paired(blocks: int, chunk: int, value_bytes: int) -> dict[str, dict[str, list[float]]]:
    """``--pairs``: one served broker in this process, :class:`PairedWorkloads` run in ``3 *
    blocks`` chunks (plus a warm-up) whose metrics are off, on (:func:`switch_metrics` and the
    topic counters) or off again as a control (what "off" against "off" gives is this run's
    noise), in the order of :func:`chunk_order`. Returns workload -> mode -> each chunk's
    (server CPU (:func:`server_threads_cpu_seconds`), wall time) per record, in
    microseconds."""
    cpu: dict[str, dict[str, list[tuple[float, float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="kafkalog-metrics-bench-") as tmp:
        listeners = parse_listeners("PLAINTEXT://127.0.0.1:0")
        served = open_brokers(Path(tmp), BrokerConfig(), 1, listeners, None, MetricsOptions())
        try:
            served.start_all()
            bound, broker = served.server(0), served._brokers()[0]
            assert bound is not None
            server = Server("kafkalog (in this process)", bound.endpoints[0].port, os.getpid())
            loads = PairedWorkloads(server, chunk, value_bytes)
            kept = [RequestMetrics() for _ in bound.socket_server.processors]
            stats = BrokerTopicStats()
            try:
                for mode in ["warm-up", *chunk_order(blocks)]:
                    switch_metrics(bound, kept, mode == "on")
                    broker.replica_manager.topic_stats = stats if mode == "on" else None
                    counted = switched_counts(kept, stats)
                    for label, run in loads.runs.items():
                        began, wall = server_threads_cpu_seconds(), time.perf_counter()
                        records = run()
                        wall = (time.perf_counter() - wall) / records * 1e6
                        time.sleep(SETTLE_S)  # the server finishes a response after sending it
                        used = (server_threads_cpu_seconds() - began) / records * 1e6
                        if mode != "warm-up":
                            per_mode = cpu.setdefault(label, {m: [] for m in PAIRED_MODES})
                            per_mode[mode].append((used, wall))
                    check_switched(mode, counted, switched_counts(kept, stats), chunk)
            finally:
                loads.close()
        finally:
            served.shutdown()
    return cpu


def switched_counts(kept: list[RequestMetrics], stats: BrokerTopicStats) -> tuple[int, int]:
    """(requests timed, records counted in) so far."""
    timed = sum(api.count for m in kept for api in m.apis if api is not None)
    return timed, stats.snapshot()[0][MESSAGES_IN]


def check_switched(mode: str, before: tuple[int, int], after: tuple[int, int], chunk: int) -> None:
    """A chunk with the metrics on timed every request (but perhaps the last, which the server
    times when its last byte is written, after the client may have read it) and counted every
    record produced in; one with them off timed at most that straggler and counted nothing
    (:class:`BenchError` if not: the switch did not work)."""
    timed, counted = after[0] - before[0], after[1] - before[1]
    produced_in = chunk * (1 + BATCHED)
    ok = timed >= chunk and counted == produced_in if mode == "on" else timed <= 1 and not counted
    if mode != "warm-up" and not ok:
        raise BenchError(
            f"a chunk with the metrics {mode}: {timed} requests timed, "
            f"{counted} records counted ({produced_in} produced)"
        )


def print_pairs(measured: dict[str, dict[str, list[tuple[float, float]]]]) -> None:
    """Per workload and mode: the medians of the server's CPU and of the wall time a record,
    and their ratios to the "off" chunk of the same block (median and middle half)."""
    print(
        "\n| workload | chunks | server CPU a record (median) | CPU / off, chunk by chunk "
        "| wall a record (median) | wall / off, chunk by chunk |"
    )
    print("|---|---|---|---|---|---|")
    for label, per_mode in measured.items():
        off = per_mode["off"]
        cells = []
        for mode, chunks in per_mode.items():
            for i in (0, 1):  # CPU, wall
                mine = [c[i] for c in chunks]
                ratios = sorted(b[i] / a[i] for a, b in zip(off, chunks, strict=True))
                q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
                cells.append(
                    f"{statistics.median(mine):.2f} us | {statistics.median(ratios):.3f}x "
                    f"({q1:.3f}x to {q3:.3f}x)"
                )
            print(f"| {label} | {mode} ({len(chunks)}) | {cells[-2]} | {cells[-1]} |")


def print_table(
    figures: dict[str, dict[str, list[Measured]]],
    scrapes: list[Scraper],
    scrape: tuple[float, float] | None,
) -> None:
    print(
        "\n| workload | off: best / median | on: best / median | on / off: best, median "
        "| server CPU per record, off / on (median) |\n|---|---|---|---|---|"
    )
    for label, offs in figures["off"].items():
        ons = figures["on"][label]
        off_best, on_best = (max(m.figure.records_per_s for m in ms) for ms in (offs, ons))
        off_med, on_med = (
            statistics.median(m.figure.records_per_s for m in ms) for ms in (offs, ons)
        )
        off_cpu, on_cpu = (statistics.median(m.cpu_us_per_record for m in ms) for ms in (offs, ons))
        print(
            f"| {label} | {off_best / 1e3:,.0f} / {off_med / 1e3:,.0f} k rec/s "
            f"| {on_best / 1e3:,.0f} / {on_med / 1e3:,.0f} k rec/s "
            f"| {on_best / off_best:.3f}x, {on_med / off_med:.3f}x "
            f"| {off_cpu:.2f} / {on_cpu:.2f} us ({on_cpu / off_cpu:.3f}x) |"
        )
    if scrape is None:
        return
    cpu_ms, wall_ms = scrape
    print(
        f"\na scrape of the idle server: {cpu_ms:.1f} ms of its CPU, {wall_ms:.1f} ms; at "
        f"Prometheus' 15 s interval {cpu_ms / 150:.3f}% of a core"
    )
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
    parser.add_argument("--scrapes", type=int, default=20, help="scrapes of the idle server")
    parser.add_argument(
        "--cost-calls", type=int, default=200_000, help="calls timing the per-request work"
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=0,
        metavar="BLOCKS",
        help="instead: BLOCKS off/on/control blocks, one server",
    )
    parser.add_argument(
        "--chunk", type=int, default=1_000, help="one-record requests a --pairs chunk"
    )
    a = parser.parse_args(argv)
    if (
        min(a.records, a.trials, a.chunk, a.scrapes, a.cost_calls) < 1
        or min(a.scrape_interval, a.pairs) < 0
    ):
        parser.error(
            "--records, --trials, --chunk, --scrapes and --cost-calls must be >= 1, "
            "--scrape-interval and --pairs >= 0"
        )
    s = Settings(a.records, a.value_bytes, 1, 5, (1_000_000,), (1,), 1)
    what = (
        f"{a.pairs} blocks of 3 chunks of {a.chunk:,} one-record requests"
        if a.pairs
        else f"{s.records:,} records, {a.trials} trials per mode"
    )
    print(
        f"{what}, values of {s.value_bytes} bytes; {os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.1f}",
        flush=True,
    )
    began = time.perf_counter()
    try:
        if a.pairs:
            print_pairs(paired(a.pairs, a.chunk, a.value_bytes))
        else:
            print_table(*measure(s, a.trials, a.scrape_interval, a.scrapes))
    except (BenchError, PeerError, KafkaException) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(
        f"\nthe metrics' work per request, in this process: {per_request_cost(a.cost_calls):.2f} us"
    )
    print(f"\ntotal {time.perf_counter() - began:.0f} s, load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
