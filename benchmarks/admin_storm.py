"""Admin storms against ``kafkalog serve``: partition creation rate, other clients' latency
during it, shutdown during it, and reopening a log dir of many partitions. One run.

    .venv/bin/python benchmarks/admin_storm.py [--clients C] [--partitions P]
                                               [--inproc-partitions N] [--restart-partitions R]
                                               [--stop-partitions S] [--timeout T] [--only ...]
                                               [--storm-runs K] [--ready-poll S]

Phases (``--only`` takes a comma-separated subset of their names):

- ``floor``: N directories of five empty files each (a new partition's files) made with plain
  ``mkdir``/``open``, on one thread and on eight: what this disk allows before any broker code;
- ``inproc``: one ``Broker`` on a fresh log dir creates a topic of N partitions (default 2,000):
  partitions a second (what the controller, replica manager and log manager cost, no network);
- ``restart``: a log dir of R empty partitions (default 4,000: one topic of one partition made
  by the broker, its directory copied R-1 times and the topic registered with R partitions, as a
  broker that created them leaves them) is opened by a ``Broker``: seconds, clean (after a
  clean close) and unclean (after ``Broker.crash``, as a SIGKILL leaves it);
- ``storm``: ``kafkalog serve`` (a child process, default config) while C AdminClients (default 9)
  each create a topic of P partitions (default 400) at once; meanwhile a thread sends ApiVersions
  v0 on a new raw connection every 0.2 s (5 s timeout each), and one acks=all record is
  produced to another topic. Figures: partitions a second, "answered" (C*P over the time from
  the requests to the last CreateTopics answer) and "ready" (to the moment every partition has
  a leader in Metadata, polled every ``--ready-poll`` seconds (default 0.5: a Metadata of the
  3,600 partitions costs kafkalog about 70 ms of Python, so polling it ten times a second
  takes a third of a core from the creation), and has acknowledged one acks=all record
  produced to it then), ApiVersions round trips (count, median, max, how many over 1 s), the
  produce's latency. The same storm runs against Apache Kafka 3.9
  (``$KAFKALOG_PEERS/kafka-3.9``, its ``peer.sh``; its log dir in the same temporary
  directory, so on the same file system, which is checked), a fresh server and log dir each
  time, alternating, ``--storm-runs`` times (default 2); a table then gives both servers'
  figures and kafkalog/Kafka for the rates. Both answer once the topics are registered
  (Kafka's controller: in its metadata log) and make the partitions' logs afterwards, so
  "ready" is the rate that counts all the work on both. Without
  ``KAFKALOG_PEERS`` (or java) the Kafka rows are skipped with a line saying why;
- ``stop``: the same storm with S partitions a client (default 1,000), SIGTERM 2 s after the
  requests: seconds to exit (the wait is bounded by T, then the process is killed and the
  figure is "> T"); then the same with SIGKILL, and the restart of that log dir: seconds from
  the start of ``kafkalog serve`` to its listener line, and which storm topics it lists whole.

Every wait is bounded by ``--timeout`` (default 300 s); a phase that times out prints what it
measured so far. Everything lives in a temporary directory deleted at the end; child servers
are killed on every path out. Prints one line per figure and the load average before and after.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from benchmarks._serve_peers import (  # noqa: E402
    PeerError,
    kafka_home,
    kafka_server,
    recv_exactly,
)
from broker_embedded.broker import Broker  # noqa: E402
from broker_embedded.storage.topic_config_file import TopicConfigFile  # noqa: E402

PHASES = ("floor", "inproc", "restart", "storm", "stop")
PROBE_TIMEOUT_S = 5.0
PROBE_EVERY_S = 0.2
MAX_PROBES = 2_000
READY_POLL_S = 0.5  # the default of --ready-poll
READY_POLL = [READY_POLL_S]  # what this run uses


def say(line: str) -> None:
    print(line, flush=True)


# -- in process ------------------------------------------------------------------------------------


def inproc(work: Path, partitions: int) -> None:
    with Broker(work / "inproc", create=True) as broker:
        broker.create_topic("warm", 1)
        started = time.monotonic()
        broker.create_topic("rate", partitions)
        took = time.monotonic() - started
    say(f"inproc: {partitions} partitions created in {took:.2f} s: {partitions / took:.0f}/s")


def floor(work: Path, partitions: int) -> None:
    """What the file system alone costs: a directory and five empty files a partition (the
    files of a new partition in Kafka's layout), on one thread and on eight."""
    for threads in (1, 8):
        base = work / f"floor-{threads}"
        base.mkdir()

        def make(p: int, base: Path = base) -> None:
            d = base / f"t-{p}"
            d.mkdir()
            for name in ("0.log", "0.index", "0.timeindex", "partition.metadata", "epochs"):
                (d / name).open("wb").close()

        started = time.monotonic()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(make, range(partitions)))
        took = time.monotonic() - started
        say(
            f"floor: {partitions} directories of 5 empty files on {threads} thread(s) in "
            f"{took:.2f} s: {partitions / took:.0f}/s"
        )


def restart(work: Path, partitions: int) -> None:
    log_dir = work / "restart"
    with Broker(log_dir, create=True) as broker:
        broker.create_topic("t", 1)
    for p in range(1, partitions):
        shutil.copytree(log_dir / "t-0", log_dir / f"t-{p}")
    topics = TopicConfigFile(log_dir)
    entries = topics.read()
    entries["t"] = dataclasses.replace(entries["t"], partitions=partitions)
    topics.write(entries)
    started = time.monotonic()
    broker = Broker(log_dir)
    clean = time.monotonic() - started
    broker.crash()
    started = time.monotonic()
    Broker(log_dir).close()
    unclean = time.monotonic() - started
    say(
        f"restart: {partitions} partitions opened in {clean:.2f} s clean, "
        f"{unclean:.2f} s after a crash"
    )


# -- served ----------------------------------------------------------------------------------------


class Served:
    """``kafkalog serve`` on ``log_dir`` as a child process; killed on exit if still running."""

    def __init__(self, log_dir: Path, out: Path, timeout: float) -> None:
        self.started = time.monotonic()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self._out = out.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "spark_kafkalog.cli",
                "serve",
                "--log-dir",
                str(log_dir),
                "--listeners",
                "PLAINTEXT://127.0.0.1:0",
            ],
            stdout=subprocess.PIPE,
            stderr=self._out,
            cwd=ROOT,
            env=env,
            text=True,
        )
        self.port = self._listening(timeout)
        self.listening_s = time.monotonic() - self.started

    def _listening(self, timeout: float) -> int:
        found: list[int] = []

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if " listening on PLAINTEXT://" in line and not found:
                    found.append(int(line.rsplit(":", 1)[1]))

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not found:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("kafkalog serve did not start")
            time.sleep(0.05)
        return found[0]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, sig: int, timeout: float) -> float | None:
        """Send ``sig``; seconds until the process ended (None: not within ``timeout``)."""
        started = time.monotonic()
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return time.monotonic() - started

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._out.close()


@contextmanager
def served(log_dir: Path, out: Path, timeout: float) -> Iterator[Served]:
    server = Served(log_dir, out, timeout)
    try:
        yield server
    finally:
        server.close()


def api_versions_v0(port: int) -> float:
    """One ApiVersions v0 round trip on a new connection: seconds (the timeout when none)."""
    client = b"bench"
    body = struct.pack(">hhih", 18, 0, 1, len(client)) + client
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT_S) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", recv_exactly(sock, 4))[0]
            recv_exactly(sock, size)
    except OSError:
        return PROBE_TIMEOUT_S
    return time.monotonic() - started


class Prober:
    """ApiVersions every PROBE_EVERY_S on a thread until stopped (at most MAX_PROBES)."""

    def __init__(self, port: int) -> None:
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(port,), daemon=True)
        self._thread.start()

    def _run(self, port: int) -> None:
        while not self._stop.is_set() and len(self.latencies) < MAX_PROBES:
            self.latencies.append(api_versions_v0(port))
            self._stop.wait(PROBE_EVERY_S)

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join(PROBE_TIMEOUT_S + 1)
        return self.latencies


def admin(bootstrap: str) -> AdminClient:
    return AdminClient(
        {"bootstrap.servers": bootstrap, "socket.timeout.ms": 300_000, "log_level": 0}
    )


def start_storm(bootstrap: str, clients: int, partitions: int, timeout: float):
    """The admin clients (keep them) and their futures by topic."""
    handles, futures = [], {}
    for i in range(clients):
        name = f"storm-{i}"
        handles.append(admin(bootstrap))
        futures[name] = handles[-1].create_topics(
            [NewTopic(name, partitions, 1)], request_timeout=timeout
        )[name]
    return handles, futures


@dataclasses.dataclass(frozen=True)
class StormFigures:
    """One storm against one server. ``answered_s``: from the requests to the last answer;
    ``ready_s``: to the moment every partition had a leader in Metadata and acknowledged a
    record (both servers answer once the topics are registered and make the logs after: this
    is the figure that counts all the work); None: not within the timeout."""

    server: str
    made: int
    failed: int
    answered_s: float
    ready_s: float | None
    led_s: float | None  # to the moment Metadata gave every partition a leader
    probes: tuple[float, ...]
    produce_s: float | None

    def rate(self, seconds: float | None) -> float | None:
        return None if seconds is None or not self.made else self.made / seconds


def led(client: AdminClient, topics: list[str], partitions: int, timeout: float) -> bool:
    """Whether Metadata gives every partition of ``topics`` a leader and no error."""
    try:
        listed = client.list_topics(timeout=timeout).topics
    except KafkaException:
        return False
    for name in topics:
        t = listed.get(name)
        if t is None or t.error is not None or len(t.partitions) != partitions:
            return False
        if any(p.leader < 0 or p.error is not None for p in t.partitions.values()):
            return False
    return True


def wait_ready(
    bootstrap: str, topics: list[str], partitions: int, started: float, timeout: float
) -> tuple[float | None, float | None]:
    """Seconds from ``started`` until every partition of ``topics`` is led in Metadata (polled
    every ``--ready-poll`` seconds), and until each then acknowledged one acks=all record; None:
    not within ``timeout``."""
    client = admin(bootstrap)
    while not led(client, topics, partitions, max(1.0, started + timeout - time.monotonic())):
        if time.monotonic() > started + timeout:
            return None, None
        time.sleep(READY_POLL[0])
    led_s = time.monotonic() - started
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": int(timeout * 1000),
            "log_level": 0,
        }
    )
    acked: list[bool] = []
    for name in topics:
        for p in range(partitions):
            producer.produce(
                name, b"ready", partition=p, on_delivery=lambda err, _m: acked.append(err is None)
            )
            producer.poll(0)
    producer.flush(max(0.0, started + timeout - time.monotonic()))
    if len(acked) != len(topics) * partitions or not all(acked):
        return None, led_s
    return time.monotonic() - started, led_s


def run_storm(
    server: str, port: int, log_dir: Path, clients: int, partitions: int, timeout: float
) -> StormFigures:
    """The storm against the server at 127.0.0.1:``port`` whose log dir is ``log_dir``."""
    bootstrap = f"127.0.0.1:{port}"
    creator = admin(bootstrap)  # kept: a dropped client's futures fail
    creator.create_topics([NewTopic("other", 1, 1)])["other"].result(timeout)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "message.timeout.ms": int(timeout * 1000),
            "log_level": 0,
        }
    )
    producer.list_topics("other", timeout=timeout)  # connected, metadata known
    prober = Prober(port)
    started = time.monotonic()
    handles, futures = start_storm(bootstrap, clients, partitions, timeout)
    produced: list[float] = []
    producer.produce(
        "other",
        b"x",
        on_delivery=lambda err, _m: produced.append(
            time.monotonic() - started if err is None else float("nan")
        ),
    )
    flusher = threading.Thread(target=producer.flush, args=(timeout,), daemon=True)
    flusher.start()  # serves the delivery callback as soon as the record is acknowledged
    failed = 0
    for future in futures.values():
        try:
            future.result(max(0.0, started + timeout - time.monotonic()))
        except (KafkaException, TimeoutError, Exception):
            failed += 1
    answered = time.monotonic() - started
    made = (clients - failed) * partitions
    acknowledged = [n for n, f in futures.items() if f.done() and f.exception() is None]
    ready, led_s = wait_ready(bootstrap, acknowledged, partitions, started, timeout)
    flusher.join(max(0.0, started + timeout - time.monotonic()))
    latencies = prober.stop()
    del handles
    return StormFigures(
        server,
        made,
        failed,
        answered,
        ready,
        led_s,
        tuple(latencies),
        produced[0] if produced else None,
    )


def storm_kafkalog(work: Path, run: int, clients: int, partitions: int, timeout: float):
    log_dir = work / f"storm-kafkalog-{run}"
    with served(log_dir, work / f"storm-kafkalog-{run}.out", timeout) as server:
        return run_storm("kafkalog", server.port, log_dir, clients, partitions, timeout), log_dir


def storm_kafka(home: Path, work: Path, run: int, clients: int, partitions: int, timeout: float):
    run_dir = work / f"storm-kafka-{run}"
    with kafka_server(home, run_dir) as server:
        log_dir = run_dir / "data"
        return run_storm(server.name, server.port, log_dir, clients, partitions, timeout), log_dir


def _seconds(x: float | None, timeout: float) -> str:
    return f"{x:.2f} s" if x is not None else f"> {timeout:.0f} s"


def _per_s(x: float | None) -> str:
    return f"{x:.0f}/s" if x is not None else "-"


def say_storm(f: StormFigures, run: int, timeout: float) -> None:
    say(
        f"storm {run} {f.server}: {f.made} partitions ({f.failed} requests failed) answered in "
        f"{_seconds(f.answered_s, timeout)}: {_per_s(f.rate(f.answered_s))}; ready in "
        f"{_seconds(f.ready_s, timeout)}: {_per_s(f.rate(f.ready_s))} (all led in Metadata in "
        f"{_seconds(f.led_s, timeout)}: {_per_s(f.rate(f.led_s))})"
    )
    if f.probes:
        over = sum(1 for x in f.probes if x > 1.0)
        say(
            f"storm {run} {f.server}: ApiVersions {len(f.probes)} probes, median "
            f"{statistics.median(f.probes) * 1000:.1f} ms, max {max(f.probes) * 1000:.0f} ms, "
            f"{over} over 1 s"
        )
    say(
        f"storm {run} {f.server}: acks=all produce during it: "
        + (f"{f.produce_s:.2f} s" if f.produce_s is not None else "not delivered")
    )


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def storm_table(rows: list[tuple[int, StormFigures]]) -> None:
    """One line per run and server, then kafkalog/Kafka for the rates of each run."""
    say(
        "storm table: run | server | answered/s | ready/s | ApiVersions n, median ms, max ms, "
        "over 1 s | produce s"
    )
    for run, f in rows:
        probes = (
            f"{len(f.probes)}, {statistics.median(f.probes) * 1000:.1f}, "
            f"{max(f.probes) * 1000:.0f}, {sum(1 for x in f.probes if x > 1.0)}"
            if f.probes
            else "-"
        )
        produce = f"{f.produce_s:.2f}" if f.produce_s is not None else "not delivered"
        say(
            f"  {run} | {f.server} | {_per_s(f.rate(f.answered_s))} | "
            f"{_per_s(f.rate(f.ready_s))} | {probes} | {produce}"
        )
    runs = sorted({run for run, _ in rows})
    for run in runs:
        ours = [f for r, f in rows if r == run and f.server == "kafkalog"]
        peer = [f for r, f in rows if r == run and f.server != "kafkalog"]
        if ours and peer:
            a, b = ours[0], peer[0]
            say(
                f"storm {run} ratio kafkalog/{b.server}: answered "
                f"{_ratio(a.rate(a.answered_s), b.rate(b.answered_s))}, ready "
                f"{_ratio(a.rate(a.ready_s), b.rate(b.ready_s))}"
            )


def storm(work: Path, clients: int, partitions: int, timeout: float, runs: int) -> None:
    """``runs`` storms against kafkalog and, when it can be had, Kafka 3.9, alternating (each
    run on fresh log dirs in ``work``: one file system for both)."""
    home = kafka_home()
    if isinstance(home, str):
        say(f"storm: Kafka 3.9 peer skipped: {home}")
    rows: list[tuple[int, StormFigures]] = []
    for run in range(1, runs + 1):
        say(f"storm {run}: load average {os.getloadavg()}")
        figures, ours = storm_kafkalog(work, run, clients, partitions, timeout)
        say_storm(figures, run, timeout)
        rows.append((run, figures))
        if isinstance(home, Path):
            say(f"storm {run}: load average {os.getloadavg()}")
            try:
                figures, theirs = storm_kafka(home, work, run, clients, partitions, timeout)
            except PeerError as e:
                say(f"storm {run}: Kafka 3.9 peer failed: {e}")
                continue
            same = os.stat(ours).st_dev == os.stat(theirs).st_dev
            say(
                f"storm {run}: log dirs {ours} and {theirs}: "
                + ("one file system" if same else "DIFFERENT file systems")
            )
            say_storm(figures, run, timeout)
            rows.append((run, figures))
            shutil.rmtree(theirs, ignore_errors=True)  # the next run's disk as the first's
        shutil.rmtree(ours, ignore_errors=True)
    storm_table(rows)


def stop_mid_storm(work: Path, clients: int, partitions: int, timeout: float) -> None:
    for name, sig in (("SIGTERM", signal.SIGTERM), ("SIGKILL", signal.SIGKILL)):
        log_dir = work / f"stop-{name}"
        with served(log_dir, work / f"stop-{name}.out", timeout) as server:
            handles, futures = start_storm(server.bootstrap, clients, partitions, timeout)
            time.sleep(2.0)
            exited = server.stop(sig, timeout)
            del handles
        say(
            f"stop: {name} 2 s into a storm of {clients} x {partitions}: exited in "
            + (f"{exited:.2f} s" if exited is not None else f"> {timeout:.0f} s")
        )
        with served(log_dir, work / f"restart-{name}.out", timeout) as server:
            lister = admin(server.bootstrap)
            listed = lister.list_topics(timeout=timeout).topics
            counts = {n: len(listed[n].partitions) for n in futures if n in listed}
            whole = sum(1 for c in counts.values() if c == partitions)
            say(
                f"stop: restart after {name}: listening in {server.listening_s:.2f} s; storm "
                f"topics listed {len(counts)} (whole {whole})"
            )
            server.stop(signal.SIGTERM, timeout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=9)
    parser.add_argument("--partitions", type=int, default=400)
    parser.add_argument("--inproc-partitions", type=int, default=2_000)
    parser.add_argument("--restart-partitions", type=int, default=4_000)
    parser.add_argument("--stop-partitions", type=int, default=1_000)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--storm-runs", type=int, default=2)
    parser.add_argument("--ready-poll", type=float, default=READY_POLL_S)
    parser.add_argument("--only", default=",".join(PHASES))
    args = parser.parse_args(argv)
    READY_POLL[0] = args.ready_poll
    only = set(args.only.split(","))
    say(f"load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="admin-storm-") as tmp:
        work = Path(tmp)
        if "floor" in only:
            floor(work, args.inproc_partitions)
        if "inproc" in only:
            inproc(work, args.inproc_partitions)
        if "restart" in only:
            restart(work, args.restart_partitions)
        if "storm" in only:
            storm(work, args.clients, args.partitions, args.timeout, args.storm_runs)
        if "stop" in only:
            stop_mid_storm(work, args.clients, args.stop_partitions, args.timeout)
    say(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
