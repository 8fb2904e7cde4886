"""benchmarks/serve.py end to end on small workloads: kafkalog only (Tansu is downloaded from
PyPI, which a test does not do), and beside Apache Kafka 3.9 where ``KAFKALOG_PEERS`` has it:
both ``kafkalog serve`` runs (sendfile, then read + send on the same log dir) produce, consume and
raw-fetch every record, and the table has every row; Kafka's own perf tools (producer, consumer,
end-to-end latency) run on kafkalog where KAFKALOG_PEERS has Kafka's folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import serve
from benchmarks._serve_peers import kafka_home

# --settle-s: each server start waits this long idle for the settled memory row (5 s by default,
# for the benchmark's figure; here only that the row is there); --group-initial-rebalance-delay-ms
# 0: kafka-consumer-perf-test's group joins kafkalog at once (3 s of waiting each by default, not
# part of the figure; the Kafka peer runs with 0)
TINY = [
    "--records",
    "3000",
    "--rounds",
    "1",
    "--no-tansu",
    "--fetch-mib",
    "1",
    "--batch-bytes",
    "16384",
    "--latency-samples",
    "20",
    "--settle-s",
    "0.1",
    "--group-initial-rebalance-delay-ms",
    "0",
]
ROWS = [
    "| start to first ApiVersions answer",
    "| memory, idle (VmRSS after start)",
    "| memory, idle settled (VmRSS 0.1 s after start)",
    "| produce acks=1, 16 KiB batches",
    "| produce acks=all, 16 KiB batches",
    "| end-to-end latency p50",
    "| end-to-end latency p99",
    "| consume from earliest (sendfile)",
    "| consume from earliest (read + send)",
    "| raw fetch, 1 MiB a request (sendfile)",
    "| raw fetch, 1 MiB a request (read + send)",
    "| memory, under load (VmHWM after the workloads)",
]
TOOL_ROWS = [
    "| kafka-producer-perf-test acks=1, 16 KiB batches",
    "| kafka-producer-perf-test acks=all, 16 KiB batches",
    "| kafka-e2e-latency p50",
    "| kafka-e2e-latency p99",
]
TOOL_READ_ROWS = [
    "| kafka-consumer-perf-test (sendfile)",
    "| kafka-consumer-perf-test (read + send)",
]
WITH_TOOLS = [*ROWS[:7], *TOOL_ROWS, *ROWS[7:11], *TOOL_READ_ROWS, ROWS[11]]


def _rows(out: str) -> list[list[str]]:
    lines = [x for x in out.splitlines() if x.startswith("| ") and not x.startswith("| workload")]
    return [line.split(" | ") for line in lines]


def test_kafkalog_only_run_reads_back_every_record(capsys):
    """Kafka's perf tools too where ``KAFKALOG_PEERS`` has Kafka's folder (its bin/ tools against
    ``kafkalog serve``; the Kafka broker itself is not started)."""
    assert serve.main([*TINY, "--no-kafka"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    tools = kafka_home()
    assert [r[0] for r in rows] == (WITH_TOOLS if isinstance(tools, Path) else ROWS)
    assert all(r[1] and r[2] == "" and r[4] == "" for r in rows)  # no Kafka figures, no ratios
    assert "Tansu not measured: --no-tansu" in out
    assert "Kafka 3.9 not measured: --no-kafka" in out
    if isinstance(tools, str):
        assert f"Kafka's perf tools not run: {tools}" in out


def test_no_perf_tools_says_so(capsys):
    argv = ["--start-only", "--rounds", "1", "--no-kafka", "--no-tansu", "--settle-s", "0.1"]
    assert serve.main(argv) == 0
    assert "Kafka's perf tools not run: --start-only" in capsys.readouterr().out


@pytest.mark.peer  # starts the peer itself
def test_beside_kafka39_every_row_has_both_servers_and_a_ratio(capsys):
    """The Kafka peer path: Kafka 3.9 started, timed, measured and stopped in the same run;
    without Kafka's perf tools (the kafkalog-only test runs them on kafkalog, the one they test).
    """
    home = kafka_home()
    if isinstance(home, str):
        pytest.skip(f"needs Apache Kafka 3.9: {home}")
    assert serve.main([*TINY, "--no-perf-tools"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert [r[0] for r in rows] == ROWS
    for r in rows:
        assert r[2] and r[4].endswith("x"), r  # Kafka's figure and kafkalog / Kafka
    assert [r[6] for r in rows if r[0] == ROWS[0]][0].endswith("(< 1 s) |")


def test_raw_fetch_counts_complete_batches_only():
    """A response cut inside its second batch: the offset after the first, its bytes only."""
    fetcher = serve.RawFetcher.__new__(serve.RawFetcher)
    batch = bytearray(61)  # base offset 10, length 49, last offset delta 4
    batch[0:12] = serve._BATCH_HEAD.pack(10, 49)
    batch[23:27] = serve._LAST_OFFSET_DELTA.pack(4)
    cut = bytearray(serve._BATCH_HEAD.pack(15, 49)) + bytes(20)
    fetcher.buf = bytearray(b"\xff" * 5) + batch + cut
    assert fetcher._complete_batches(5, len(fetcher.buf), 10) == (15, 61)


def test_metrics_cost_run_has_every_row(capsys):
    """benchmarks/serve_metrics.py on a tiny workload: both servers serve every workload."""
    from benchmarks import serve_metrics

    argv = ["--records", "2000", "--trials", "1", "--scrapes", "2", "--cost-calls", "2000"]
    assert serve_metrics.main(argv) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "rec/s" in line]
    assert [r.split(" | ")[0] for r in rows] == [
        "| produce acks=1",
        "| produce acks=all",
        "| consume from earliest",
        "| raw fetch, 1 MiB a request",
        "| produce acks=1, 1 record a request",
    ]
    assert "the metrics' work per request" in out


def test_metrics_cost_pairs_switch_the_metrics(capsys):
    """``--pairs``: each workload's chunks with the metrics off, on and off again; the run
    checks itself that the "on" chunks alone were timed and counted."""
    from benchmarks import serve_metrics

    assert serve_metrics.main(["--pairs", "2", "--chunk", "25"]) == 0
    out = capsys.readouterr().out
    rows = [line.split(" | ")[:2] for line in out.splitlines() if line.endswith("x) |")]
    workloads = [
        "produce acks=1, 1 record a request",
        "produce acks=1, batched",
        "raw fetch, 1 MiB a request",
    ]
    assert rows == [[f"| {w}", f"{m} (2)"] for w in workloads for m in ("off", "on", "control")]
