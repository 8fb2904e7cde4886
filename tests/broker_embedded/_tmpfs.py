"""A real, size-limited filesystem for the disk-full tests: a tmpfs mounted for one test and
unmounted after it. Mounting needs root (CI runs as root); elsewhere the test is skipped,
naming why. Nothing is mocked: a write that does not fit fails with ``ENOSPC`` from the kernel.

``fill(directory)`` takes every free byte (but ``leave``) with one filler file (returned, so that
the test frees the space again by deleting it).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

MOUNT_TIMEOUT_S = 30


@contextlib.contextmanager
def tmpfs(size: str = "20m", *, inodes: int | None = None) -> Iterator[Path]:
    """A tmpfs of ``size`` (and at most ``inodes`` files, when given), unmounted on exit."""
    if os.geteuid() != 0:
        pytest.skip("disk-full tests mount a size-limited tmpfs, which needs root")
    directory = Path(tempfile.mkdtemp(prefix="kafkalog-tmpfs-"))
    options = f"size={size}" + ("" if inodes is None else f",nr_inodes={inodes}")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(directory)],
                          capture_output=True, text=True, timeout=MOUNT_TIMEOUT_S)  # fmt: skip
    if done.returncode != 0:
        directory.rmdir()
        pytest.skip(f"mounting a tmpfs was refused: {done.stderr.strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], capture_output=True,
                       timeout=MOUNT_TIMEOUT_S)  # fmt: skip
        directory.rmdir()


def fill(directory: Path, name: str = "filler", *, leave: int = 0) -> Path:
    """Write one file in ``directory`` until the filesystem is full, then give ``leave`` bytes
    of it back (so that a larger write fails part way, as it does when a disk fills during
    it); the file."""
    path = directory / name
    chunk = b"\xa5" * (1 << 20)
    with open(path, "ab", buffering=0) as f:
        for _ in range(1 << 16):  # bounded: 64 GiB, far more than any tmpfs here
            try:
                written = f.write(chunk)
            except OSError:
                break
            if written < len(chunk):
                with contextlib.suppress(OSError):
                    f.write(chunk[written:])
                break
    if leave:
        os.truncate(path, max(0, path.stat().st_size - leave))
    return path


def free_bytes(directory: Path) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize
