"""A partition of 2 GiB read with executor memory that does not grow with it.

One partition of :data:`TOTAL_BYTES` (1 KB values, batches of about 1 MB: the same encoded
batch appended again and again, so that the file is written at disk speed) is served by an
in-process ``kafkalog serve`` on 127.0.0.1. Read as a Spark task reads it
(``offset_range_reader.read_offset_range``, tests/datasource/_read_rss_child.py) in a child
process, over the Kafka protocol and from the log dir: the first tenth, then the whole partition
in the same process (one interpreter start per transport); the peak resident set size
(``VmHWM``) after the whole read stays within :data:`GROWTH_BOUND` of the peak after the read of
the first tenth (so the bound is on what the whole partition added), and far below the
partition's size; every count, the offsets and the last value are exact. Then
through a real Spark job (one task reading every row, which Spark counts): the Python
workers' peak RSS (``VmHWM`` of the children of this session's ``pyspark.daemon``) after the
whole partition stays within the same bound of their peak after the first tenth (the workers
are reused, so their peak only grows: the bound is on what the whole partition added), and the
count, first and last offsets are exact. The log dir is deleted at the end (it is 2 GiB).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from broker_embedded.record.columnar_encoder import encode_batches
from tests.broker_embedded.server._serve import served

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "big"
TOTAL_BYTES = 2 << 30
VALUE_BYTES = 1000
RECORDS_PER_BATCH = 1000
TENTH = 10
GROWTH_BOUND = 64 << 20  # bytes of peak RSS the 2 GiB read may add to the 200 MiB read's
ABSOLUTE_BOUND = 768 << 20  # and no reader process above this, whatever it started at
CHILD_S = 120


def one_batch() -> bytes:
    """``RECORDS_PER_BATCH`` records of ``VALUE_BYTES`` each (value ``i`` starts with ``i``)."""
    values = pa.array([b"%08d" % i + b"v" * (VALUE_BYTES - 8) for i in range(RECORDS_PER_BATCH)])
    keys = pa.array([b"k%d" % (i % 10) for i in range(RECORDS_PER_BATCH)])
    timestamps = np.full(RECORDS_PER_BATCH, 1_700_000_000_000, dtype=np.int64)
    encoded = encode_batches(keys, values, timestamps, max_batch_bytes=4 << 20)
    assert len(encoded.positions) == 2  # one batch
    return bytes(encoded.data)


def read_in_child(ends: list[int], **where: str) -> list[dict]:
    """Run tests/datasource/_read_rss_child.py over ``[0, end)`` for each of ``ends`` in turn,
    in one process; its JSON reports."""
    flag, value = next(iter(where.items()))
    cmd = [
        sys.executable,
        "-m",
        "tests.datasource._read_rss_child",
        f"--{flag.replace('_', '-')}",
        value,
        TOPIC,
        "0",
        *map(str, ends),
    ]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    done = subprocess.run(cmd, capture_output=True, timeout=CHILD_S, cwd=ROOT, env=env, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    lines = done.stdout.decode().splitlines()
    reports = [json.loads(line) for line in lines if line.startswith("{")]
    assert len(reports) == len(ends), reports
    return reports


def check_exact(report: dict, end: int) -> None:
    assert (report["rows"], report["first"], report["last"]) == (end, 0, end - 1), report
    assert report["offset_sum"] == end * (end - 1) // 2
    assert report["last_value_len"] == VALUE_BYTES


def _proc(pid: int, name: str) -> str:
    return Path(f"/proc/{pid}/{name}").read_text(errors="replace")


def _descendants(root: int) -> list[int]:
    """The processes below ``root``, from the parent pid of every ``/proc/<pid>/stat``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:  # the fields after the command name, which may hold spaces: state, ppid, ...
                ppid = int(_proc(int(entry.name), "stat").rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        found = children.get(todo.pop(), [])
        out += found
        todo += found
    return out


def python_workers_peak_rss() -> int:
    """The largest ``VmHWM`` (bytes) of the Python workers forked by this session's
    ``pyspark.daemon`` (a descendant of this process, through Spark's JVM)."""
    peak = 0
    for pid in _descendants(os.getpid()):
        try:
            if "pyspark.daemon" not in _proc(pid, "cmdline"):
                continue
            for worker in _descendants(pid):
                status = _proc(worker, "status")
                kib = next(
                    int(line.split()[1])
                    for line in status.splitlines()
                    if line.startswith("VmHWM:")
                )
                peak = max(peak, kib << 10)
        except OSError:  # a process that ended meanwhile
            continue
    return peak


@pytest.mark.slow  # a 2 GiB partition read through
def test_a_2_gib_partition_is_read_in_bounded_memory(spark, tmp_path: Path) -> None:
    log_dir = tmp_path / "big"
    t0 = time.monotonic()
    try:
        with served(log_dir) as running:
            batch = one_batch()
            batches = -(-TOTAL_BYTES // len(batch))
            running.broker.create_topic(
                TOPIC, 1, config={"retention.ms": -1, "retention.bytes": -1}
            )
            for _ in range(batches):
                running.broker.produce(TOPIC, 0, batch)
            running.broker.log_manager.checkpoint()
            print(f"wrote {batches} batches of {len(batch)} bytes in {time.monotonic() - t0:.1f} s")
            end, tenth = batches * RECORDS_PER_BATCH, batches // TENTH * RECORDS_PER_BATCH
            for where in ({"bootstrap": running.bootstrap}, {"log_dir": str(log_dir)}):
                small, whole = read_in_child([tenth, end], **where)
                print(f"peak RSS reading {where}: {small} then {whole}")
                check_exact(small, tenth)
                check_exact(whole, end)
                assert whole["peak_rss_kib"] << 10 < ABSOLUTE_BOUND, whole
                assert (whole["peak_rss_kib"] - small["peak_rss_kib"]) << 10 < GROWTH_BOUND
            print(f"child reads done at {time.monotonic() - t0:.1f} s")
            _spark_job_in_bounded_memory(spark, running.bootstrap, tenth, end)
            print(f"Spark jobs done at {time.monotonic() - t0:.1f} s")
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)


def _spark_job_in_bounded_memory(spark, bootstrap: str, tenth: int, end: int) -> None:
    def job(ending: str, want: int) -> None:
        df = (
            spark.read.format("kafkalog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", TOPIC)
            .option("endingOffsets", ending)
            .load()
        )
        assert df.rdd.getNumPartitions() == 1
        got = df.selectExpr("count(*)", "min(offset)", "max(offset)").first()
        assert tuple(got) == (want, 0, want - 1)

    job(json.dumps({TOPIC: {"0": tenth}}), tenth)
    after_tenth = python_workers_peak_rss()
    job("latest", end)
    after_whole = python_workers_peak_rss()
    print(
        f"\nPython workers' peak RSS: {after_tenth >> 20} MiB after the first tenth, "
        f"{after_whole >> 20} MiB after the whole partition"
    )
    # the workers are the session's: their peak includes what earlier tests ran in them (kernel
    # compiles, other reads), so only what the whole partition added is bounded here
    assert 0 < after_tenth <= after_whole
    assert after_whole - after_tenth < GROWTH_BOUND
