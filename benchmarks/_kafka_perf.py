"""Kafka's own perf tools (Apache Kafka 3.9's ``bin/``) against a server benchmarks/serve.py runs.

- :func:`producer_perf`: ``kafka-producer-perf-test --topic T --num-records N --record-size V
  --throughput -1 --producer-props bootstrap.servers=... acks=A batch.size=B linger.ms=L
  compression.type=none enable.idempotence=false``; its last line ("N records sent, R
  records/sec (M MB/sec), ... ms avg latency, ...") gives the records per second; the topic is
  created first (1 partition), as for confluent-kafka;
- :func:`consumer_perf`: ``kafka-consumer-perf-test --bootstrap-server ... --topic T --messages
  N --group G --timeout 60000``, a subscribing consumer in a group of its own reading from the
  earliest offset; its data line (``start.time, end.time, data.consumed.in.MB, MB.sec,
  data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, ...``) gives the records
  and the fetch time (the time after the group's join), which is what :class:`Figure` keeps;
- :func:`e2e_latency`: ``kafka-e2e-latency BOOTSTRAP T N 1 V``: N records sent one at a time
  (acks=1), each waited for by a consumer before the next; its "Percentiles: 50th = a, 99th =
  b, 99.9th = c" line (whole milliseconds: the tool divides nanoseconds by 10^6 as integers)
  gives p50 and p99.

Each tool is one JVM of 256 MiB heap (``KAFKA_HEAP_OPTS``), its log4j output in the work
directory, bounded by :data:`TOOL_S`; a non-zero exit or an output without the expected line
raises :class:`PerfToolError` with the tool's output. The JVM's own start is not in any figure
(each tool times itself from its first send or its subscription).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

TOOL_S = 300.0
_PRODUCED = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec", re.M)
_PERCENTILES = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+), 99\.9th = (\d+)")
CONSUMER_FIELDS = 10  # start.time .. fetch.nMsg.sec


class PerfToolError(RuntimeError):
    """A perf tool failed or printed no result."""


def run_tool(home: Path, work: Path, tool: str, *args: str) -> str:
    """``bin/<tool>.sh ARGS``'s standard output; :class:`PerfToolError` on a failure."""
    env = dict(os.environ, KAFKA_HEAP_OPTS="-Xmx256m", LOG_DIR=str(work))
    cmd = [str(home / "bin" / f"{tool}.sh"), *args]
    try:
        done = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=TOOL_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise PerfToolError(f"{tool} {' '.join(args)} took over {TOOL_S:.0f} s") from None
    if done.returncode != 0:
        raise PerfToolError(
            f"{tool} {' '.join(args)} exited {done.returncode}:\n"
            f"{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
        )
    return done.stdout


def producer_perf(
    home: Path,
    work: Path,
    bootstrap: str,
    topic: str,
    records: int,
    value_bytes: int,
    acks: str,
    batch_bytes: int,
    linger_ms: int,
) -> float:
    """Seconds for ``records`` records, from the tool's records per second."""
    props = [
        f"bootstrap.servers={bootstrap}",
        f"acks={acks}",
        f"batch.size={batch_bytes}",
        f"linger.ms={linger_ms}",
        "compression.type=none",
        "enable.idempotence=false",
        "buffer.memory=268435456",
    ]
    out = run_tool(
        home,
        work,
        "kafka-producer-perf-test",
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(value_bytes),
        "--throughput",
        "-1",
        "--producer-props",
        *props,
    )
    found = _PRODUCED.findall(out)
    if not found or int(found[-1][0]) != records:
        raise PerfToolError(
            f"kafka-producer-perf-test to {topic}: no total of {records} records in:\n{out[-1500:]}"
        )
    return records / float(found[-1][1])


def consumer_perf(
    home: Path, work: Path, bootstrap: str, topic: str, records: int, group: str
) -> float:
    """Seconds of fetching (after the group's join) for ``records`` records."""
    out = run_tool(
        home,
        work,
        "kafka-consumer-perf-test",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(records),
        "--group",
        group,
        "--timeout",
        "60000",
    )
    rows = [line.split(",") for line in out.splitlines() if line.count(",") == 9]
    data = [r for r in rows if r[0].strip() != "start.time"]
    if not data:
        raise PerfToolError(f"kafka-consumer-perf-test of {topic}: no data line in:\n{out[-1500:]}")
    fields = [f.strip() for f in data[-1]]
    consumed, fetch_ms = int(fields[4]), float(fields[7])
    if consumed < records:
        raise PerfToolError(
            f"kafka-consumer-perf-test of {topic}: {consumed} records, expected {records}"
        )
    return fetch_ms / 1e3


def e2e_latency(
    home: Path, work: Path, bootstrap: str, topic: str, records: int, value_bytes: int
) -> tuple[float, float]:
    """(p50, p99) in ms of ``records`` round trips, acks=1."""
    out = run_tool(
        home, work, "kafka-e2e-latency", bootstrap, topic, str(records), "1", str(value_bytes)
    )
    found = _PERCENTILES.search(out)
    if found is None:
        raise PerfToolError(f"kafka-e2e-latency on {topic}: no percentiles in:\n{out[-1500:]}")
    return float(found.group(1)), float(found.group(2))
