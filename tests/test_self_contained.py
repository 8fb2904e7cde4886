"""The repo needs nothing beside it: a copy of the tracked files, alone in a directory, runs the
tests that read the fixtures, and no tracked file names a path outside the repo (the reference
peers come only through ``KAFKALOG_PEERS``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLICE = (
    "tests/broker_embedded/record/test_record_batch.py",
    "tests/broker_embedded/record/test_legacy_record.py",
    "tests/broker_embedded/storage/test_fixture_indexes.py",
    "tests/spark_kafkalog/test_cli.py::test_dump_log_dir_summarises_every_segment",
)
OUTSIDE = ("../" + "shared", "/" + "work/")  # spelt apart so that this file does not match


def tracked() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [name for name in listed.stdout.decode().split("\0") if name]


def test_no_tracked_file_names_a_path_outside_the_repo():
    named = {}
    for name in tracked():
        path = ROOT / name
        if name.startswith(("tests/fixtures/", ".ci/")) or not path.is_file():
            continue
        text = path.read_bytes()
        found = [o for o in OUTSIDE if o.encode() in text]
        if found:
            named[name] = found
    assert named == {}


def test_a_copy_with_nothing_beside_it_runs_the_fixture_tests(tmp_path):
    copy = tmp_path / "alone" / "kafkalog"
    for name in tracked():
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    env = {k: v for k, v in os.environ.items() if k not in ("KAFKALOG_PEERS", "PYTHONPATH")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SLICE],
        cwd=copy,
        env=dict(env, PYTHONPATH=str(copy)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]
