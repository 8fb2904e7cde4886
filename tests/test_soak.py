"""The soak's (benchmarks/soak.py) Spark checks: what of the driver's stderr is an error, and the
streaming reader stopped mid-batch, which Spark 4.3 turns into a StackOverflowError in the
stream execution thread unless the foreachBatch function lets the stop through quietly (see
``SparkReader``): a real SparkSession in a process of its own (tests/_soak_child.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.soak import driver_log_finding
from tests.once_per_run import once_per_run

ROOT = Path(__file__).resolve().parent.parent
DEAD_THREAD = re.compile(
    r'spark driver stderr: Exception in thread "stream execution thread for \[id = [0-9a-f-]{36}, '
    r'runId = [0-9a-f-]{36}\]" java\.lang\.StackOverflowError'
)


@pytest.mark.parametrize(
    ("line", "finding"),
    [
        (
            'Exception in thread "stream execution thread for [id = 1, runId = 2]" '
            "java.lang.StackOverflowError",
            True,
        ),
        ('Exception in thread "main" java.lang.IllegalStateException: x', True),
        ("java.lang.OutOfMemoryError: Java heap space", True),
        ("Caused by: java.lang.StackOverflowError", True),
        ("26/11/24 16:42:24 ERROR Executor: Exception in task 0.0 in stage 3.0 (TID 3)", True),
        ("Traceback (most recent call last):", True),
        ("\tat java.base/java.util.regex.Pattern$Loop.match(Pattern.java:4898)", False),
        ("26/11/24 16:42:24 WARN NativeCodeLoader: Unable to load native-hadoop library", False),
        (
            "soak-del-0: offsets [2680, 3580) were deleted before they were read; "
            "failOnDataLoss=false: reading soak-del-0 from offset 3580",
            False,
        ),
        ("java.lang.InterruptedException", False),
        ("", False),
    ],
)
def test_driver_log_finding(line: str, finding: bool) -> None:
    assert driver_log_finding(line) is finding


@pytest.fixture(scope="module")
def stopped_mid_batch(tmp_path_factory) -> dict:
    """The child's findings, once per run (a worker stealing some of these tests from another
    ran the child again, about a minute of CPU)."""
    return once_per_run(tmp_path_factory, "soak-child", run_soak_child)


def run_soak_child(work: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "tests._soak_child", str(work)],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"stderr": proc.stderr, **json.loads(proc.stdout.splitlines()[-1])}


def test_a_stop_mid_batch_kills_the_stream_thread_and_the_soak_reports_it(stopped_mid_batch):
    """``query.stop()`` while the foreachBatch function is in a Spark call (the soak before it
    stopped between batches): Spark's stream thread dies of a StackOverflowError in a regex,
    the query's exception is unset; the soak's checks see both."""
    unguarded = stopped_mid_batch["unguarded"]
    dead, stopped = unguarded["violations"]
    assert DEAD_THREAD.fullmatch(dead), dead
    assert stopped == "spark stream: the query stopped before the end of the soak"
    assert (unguarded["batches"], unguarded["records"]) == (0, 0)


def test_the_soak_stops_its_query_after_the_batch_in_flight(stopped_mid_batch):
    stop = stopped_mid_batch["stop"]
    assert stop == {"violations": [], "batches": 1, "records": 90}


def test_a_batch_the_stop_interrupts_returns_quietly(stopped_mid_batch):
    interrupted = stopped_mid_batch["interrupted"]
    assert interrupted == {"violations": [], "batches": 0, "records": 0}


def test_only_the_unguarded_stop_printed_a_dead_thread(stopped_mid_batch):
    stderr = stopped_mid_batch["stderr"]
    assert stderr.count("java.lang.StackOverflowError") == 1
    assert stderr.count("Exception in thread") == 1
