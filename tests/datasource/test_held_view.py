"""A log dir read in place while another process truncates a segment (recovery of a torn tail
above the recovery point, a replica's truncation after an unclean election): the reader gets its
records or a named error, never SIGBUS. Each read runs in a child process
(``_held_view_child.py``) so that a SIGBUS fails the test instead of killing pytest.

The log dir: a broker that crashed (nothing flushed at the end) after 200 records of 1,000 bytes
in segments of 64 KiB: segments based at 0, 61, 122 and 183, the recovery point 183 (the last
roll), the high watermark 200.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker_embedded.broker import Broker
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.storage.log_dir_fetch_source import LogDirSource
from broker_embedded.storage.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


@pytest.fixture(name="crashed")
def crashed_fixture(tmp_path: Path) -> Path:
    broker = Broker(tmp_path, create=True)
    broker.create_topic("t", config={"segment.bytes": 65536})
    for i in range(200):
        broker.produce("t", 0, [ProducerRecord(bytes([i]) * 1000)])
    deadline = time.monotonic() + 60  # the checkpoints are written a moment later
    while published(tmp_path) != ([0, 61, 122, 183], 183, 200) and time.monotonic() < deadline:
        time.sleep(0.05)
    broker.crash()
    assert published(tmp_path) == ([0, 61, 122, 183], 183, 200)
    return tmp_path


def published(log_dir: Path) -> tuple[list[int], int, int]:
    """The segments, recovery point and high watermark a reader of the log dir sees."""
    with LogDirSource(str(log_dir)).open() as source:
        view = source.view(TP)
        return view.base_offsets, view.recovery_point, view.high_watermark


def held(log_dir: Path, offset: int, *options: str) -> dict:
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.datasource._held_view_child",
            str(log_dir),
            "t",
            "0",
            str(offset),
            *options,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (child.returncode, child.stderr[-500:]) == (0, "")  # -7: SIGBUS
    return json.loads(child.stdout)


def truncated(log_dir: Path, base: int, offset: int) -> list[str]:
    path = log_dir / "t-0" / f"{base:020d}.log"
    return [
        "SegmentTruncatedError",
        (
            f"{path} is shorter than when it was opened (truncated by another process: "
            f"recovery, or a replica's truncation): fetch at offset {offset} of t-0; open the "
            "log dir again"
        ),
    ]


def test_a_segment_above_the_recovery_point_is_copied_and_truncation_is_named(crashed):
    """The last segment (above the recovery point: recovery may truncate it) is copied out."""
    report = held(crashed, 190)
    assert report == {
        "view": False,
        "decoded": [190, 199, 10],
        "unchanged": True,
        "again in place": truncated(crashed, 183, 190),
        "again copied": truncated(crashed, 183, 190),
    }


def test_a_segment_below_the_recovery_point_stays_a_view_and_truncation_is_named(crashed):
    """A segment wholly below the recovery point stays a view (no copy on the hot path); its
    truncation is named at the next fetch. (Truncated while its view is being decoded, it would
    still fault: only a replica's truncation after an unclean election reaches below the
    recovery point, and the fast path is kept for closed segments.)"""
    report = held(crashed, 70, "--no-decode")
    assert report == {
        "view": True,
        "decoded": None,
        "unchanged": None,
        "again in place": truncated(crashed, 61, 70),
        "again copied": truncated(crashed, 61, 70),
    }
