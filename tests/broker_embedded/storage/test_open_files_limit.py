"""A broker opens a log dir of 2,000 partitions under ``ulimit -n 1024`` (issue 11, defect 5):
index files are opened only to append entries, a segment's ``.log`` only from its first append,
and mappings keep no file descriptor; when the limit is still reached, the error names the file
and the limit with its value.

The children run in subprocesses whose RLIMIT_NOFILE is lowered (``preexec_fn``); the log dir is
built once with the real log manager (one partition with three rolled segments, producer
snapshots and a leader epoch checkpoint), then its directory copied for the other partitions.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from broker_embedded.record.memory_records_builder import build_record_batch
from broker_embedded.record.record_batch import Record
from broker_embedded.storage.log_manager import LogManager
from broker_embedded.storage.topic_config_file import TopicEntry
from broker_embedded.storage.topic_partition import TopicPartition

REPO = Path(__file__).resolve().parents[3]
PARTITIONS = 2000
SEGMENTS = 4  # three rolled, one active

CHILD = """
import os, sys
from broker_embedded.errors import TooManyOpenFilesError
from broker_embedded.record.memory_records_builder import build_record_batch
from broker_embedded.record.record_batch import Record
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.fetch_data_info import FetchIsolation
from broker_embedded.storage.log_manager import LogManager

with LogManager(sys.argv[1]) as lm:
    print(len(lm.logs), len(os.listdir("/proc/self/fd")))
    values = {r.value for lg in lm.logs.values() for o in range(3)
              for b in iter_batches(lg.read(o, 1 << 20, FetchIsolation.LOG_END).records)
              for r in b.records()}
    print(str(sorted(values)).replace(" ", ""), len(os.listdir("/proc/self/fd")))
    if sys.argv[2] == "append":
        try:
            for tp in sorted(lm.logs):
                lm.logs[tp].append_as_leader(build_record_batch([Record(0, 1, b"k", b"x")]), 0)
        except TooManyOpenFilesError as e:
            print(e)
"""


def build_log_dir(log_dir: Path, partitions: int) -> None:
    with LogManager(log_dir, create=True) as lm:
        lm.put_topic("t", TopicEntry(uuid.uuid4(), partitions))
        lg = lm.get_or_create_log(TopicPartition("t", 0))
        for i in range(SEGMENTS - 1):
            lg.append_as_leader(build_record_batch([Record(0, 1000, b"k", b"v%d" % i)]), 0)
            lg.roll()
    for p in range(1, partitions):
        shutil.copytree(log_dir / "t-0", log_dir / f"t-{p}")


def run_child(log_dir: Path, nofile: int, mode: str) -> list[str]:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]

    def lower_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(log_dir), mode],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=lower_limit,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.fixture(scope="module")
def many_partitions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log_dir = tmp_path_factory.mktemp("many") / "logs"
    build_log_dir(log_dir, PARTITIONS)
    return log_dir


def test_broker_opens_and_reads_2000_partitions_under_ulimit_1024(many_partitions: Path) -> None:
    opened, read = run_child(many_partitions, 1024, "read")
    count, fds = map(int, opened.split())
    assert count == PARTITIONS
    assert fds < 16  # the interpreter's own, the .lock: no file per partition
    assert read.split(" ", 1)[0] == "[b'v0',b'v1',b'v2']"  # every segment read
    assert int(read.rsplit(" ", 1)[1]) < 16


def test_reaching_the_limit_names_the_file_and_the_limit(tmp_path: Path) -> None:
    build_log_dir(tmp_path / "logs", 100)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    lines = run_child(tmp_path / "logs", 64, "append")
    message = lines[-1]
    prefix = f"cannot open {tmp_path / 'logs'}/t-"
    assert message.startswith(prefix)
    partition, rest = message[len(prefix) :].split("/", 1)
    assert 0 < int(partition) < 64
    assert rest == (
        f"{SEGMENTS - 1:020d}.log: this process reached its open-files limit (EMFILE, "
        f"RLIMIT_NOFILE: `ulimit -n` is 64, hard limit {hard}); raise it (e.g. `ulimit -n "
        "65536` before starting, or LimitNOFILE= for a systemd service)"
    )
