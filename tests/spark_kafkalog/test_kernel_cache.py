"""``spark_kafkalog.kernel_cache``: the kernels compiled once, before Spark's workers start.

The processes here use numba's usual cache (warm after ``bash dev.sh``) and a stamp directory of
their own (``KAFKALOG_KERNEL_STAMP_DIR``), so each test sees "not compiled yet" without paying a
cold compile; tests/spark_kafkalog/test_demo.py checks that no process of the demo compiles a
kernel after the warm-up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spark_kafkalog import kernel_cache

ROOT = Path(__file__).resolve().parents[2]


def start(stamps: Path) -> subprocess.Popen:
    env = {**os.environ, "KAFKALOG_KERNEL_STAMP_DIR": str(stamps), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "spark_kafkalog.kernel_cache"]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_concurrent_callers_compile_once(tmp_path: Path) -> None:
    """Three processes at once: one runs the warm-up under the lock, the others wait for it and
    find the stamp; a later call finds it at once."""
    procs = [start(tmp_path) for _ in range(3)]
    outputs = sorted(p.communicate(timeout=900)[0].strip().splitlines()[-1] for p in procs)
    assert [p.returncode for p in procs] == [0, 0, 0]
    stamps = sorted(tmp_path.glob("kafkalog-kernels-*.stamp"))
    assert len(stamps) == 1
    assert outputs == ["kernels already compiled (" + str(stamps[0]) + ")"] * 2 + [
        "kernels compiled"
    ]
    again = start(tmp_path)
    assert again.communicate(timeout=60)[0].strip() == f"kernels already compiled ({stamps[0]})"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["kernels.lock", stamps[0].name])


def test_the_stamp_names_the_sources_and_the_cache(tmp_path: Path, monkeypatch) -> None:
    """A different ``NUMBA_CACHE_DIR`` is another cache: another stamp, in that directory."""
    monkeypatch.setenv("KAFKALOG_KERNEL_STAMP_DIR", str(tmp_path / "a"))
    first = kernel_cache.stamp_path()
    assert first.parent == tmp_path / "a" and first.parent.is_dir()
    monkeypatch.delenv("KAFKALOG_KERNEL_STAMP_DIR")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    second = kernel_cache.stamp_path()
    assert second.parent == tmp_path / "numba"
    assert second.name != first.name
    assert not second.exists()


def test_numba_is_asked_where_each_kernel_is_cached() -> None:
    """The directories come from the kernels themselves (a numba that moved its private cache
    attribute would make this fail rather than leave stale kernels in place)."""
    from broker_embedded.record import decode_kernel, entry_scan_kernel

    dirs = kernel_cache.kernel_cache_dirs()
    for kernel in (decode_kernel.inflate_sections, entry_scan_kernel.walk_entries):
        assert Path(kernel._cache._cache_path) in dirs


def test_a_cache_filled_from_other_sources_loses_our_kernels_first(tmp_path: Path) -> None:
    """numba keys a kernel on its own file only: after snappy_block.py changed, decode_kernel's
    cached inflate_sections would still hold the old snappy code. A directory whose marker is
    missing or names other sources loses every cache file of our kernels' modules (and only
    those); a current marker keeps them."""
    ours = [
        "decode_kernel.inflate_sections-228.py311.nbi",
        "decode_kernel._fail-382.py311.2.nbc",
        "snappy_block.decode-40.py311.nbi",
    ]
    theirs = ["somebody_else.f-1.py311.nbi", "somebody_else.f-1.py311.1.nbc", "notes.txt"]
    for name in ours + theirs:
        (tmp_path / name).write_bytes(b"x")
    assert kernel_cache.forget_stale_kernels({tmp_path}) == [tmp_path]  # no marker
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(theirs)

    for name in ours:
        (tmp_path / name).write_bytes(b"x")
    kernel_cache._mark_current({tmp_path})
    assert kernel_cache.forget_stale_kernels({tmp_path}) == []  # the same sources: kept
    assert len(list(tmp_path.iterdir())) == len(ours) + len(theirs) + 1

    (tmp_path / "kafkalog-kernel-sources.sha256").write_text("0" * 64 + "\n")  # other sources
    assert kernel_cache.forget_stale_kernels({tmp_path}) == [tmp_path]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*theirs, "kafkalog-kernel-sources.sha256"]
    )
