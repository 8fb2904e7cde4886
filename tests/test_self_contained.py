"""The repo needs nothing beside it: a copy of the tracked files, alone in a directory, runs the
tests that read the fixtures, and no tracked file names a path outside the repo (the reference
peers come only through ``KAFKALOG_PEERS``).

Beside the tracked files the copy gets one thing: the numba kernels this checkout compiled
(:data:`KERNEL_CACHE` in each ``__pycache__`` of a tracked file's directory), a cache of compiled
code, not a file the repo needs (a clone has none and compiles them). numba keys a kernel's
cache entry on its source file's mtime and size, which ``shutil.copy2`` keeps, so the copy loads
them instead of compiling the kernels its slice uses again (4 s of its 9 s at load 3; it passes
the same without them, only slower)."""

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
# numba's index and data files, spark_kafkalog/kernel_cache.py's source markers and its stamp
KERNEL_CACHE = ("*.nbi", "*.nbc", "kafkalog-kernel*")


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


def copy_kernel_cache(copy: Path, names: list[str]) -> None:
    """The compiled kernels beside the tracked sources, copied beside the copy's (module
    docstring)."""
    for folder in {Path(name).parent for name in names}:
        cache = ROOT / folder / "__pycache__"
        for pattern in KERNEL_CACHE:
            for found in cache.glob(pattern):
                (copy / folder / "__pycache__").mkdir(exist_ok=True)
                shutil.copy2(found, copy / folder / "__pycache__" / found.name)


def test_a_copy_with_nothing_beside_it_runs_the_fixture_tests(tmp_path):
    copy = tmp_path / "alone" / "kafkalog"
    names = [name for name in tracked() if (ROOT / name).is_file()]
    for name in names:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    copy_kernel_cache(copy, names)
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
