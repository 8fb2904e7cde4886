"""A real full filesystem for disk-full tests: a size-limited tmpfs mounted for one test.

:func:`tmpfs` (a context manager) mounts ``tmpfs -o size=<n>`` on a fresh directory and unmounts
it on the way out, whatever happened; where mounting is refused (not root, no mount binary, a
container without CAP_SYS_ADMIN) the test is skipped, naming why. :func:`fill_leaving` takes
the free space down to a given number of bytes with one preallocated filler file (deleting it
gives the space back), so a test decides where the disk runs out. Nothing is mocked: the
writers under test get ``ENOSPC`` from the kernel.

:func:`fill_inodes_leaving` does the same with inodes (a tmpfs mounted with ``inodes``): a
filesystem out of inodes fails the creation of a file with ``ENOSPC`` too, while bytes are
free, which is how a test makes a write fail after the writer's free-space check passed.

Limits: the size is rounded up to pages by the kernel; free space is page-granular, so
:func:`fill_leaving` leaves ``leave`` bytes rounded down to a page.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

MOUNT_TIMEOUT_S = 60


def _refused(why: str) -> None:
    pytest.skip(f"cannot mount a size-limited tmpfs for a real full disk: {why}")


@contextmanager
def tmpfs(
    size_bytes: int, *, inodes: int | None = None, parent: Path | None = None
) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` (and ``inodes`` files and directories, when given) mounted on
    ``parent/tmpfs`` (a new temporary directory by default); unmounted on exit."""
    if os.geteuid() != 0:
        _refused(f"mounting needs root (this test runs as uid {os.geteuid()})")
    mount = shutil.which("mount")
    if mount is None:
        _refused("no mount binary on PATH")
    point = Path(tempfile.mkdtemp(prefix="kafkalog-tmpfs-")) if parent is None else parent / "tmpfs"
    point.mkdir(exist_ok=True)
    options = f"size={size_bytes},mode=0755" + (f",nr_inodes={inodes}" if inodes else "")
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
        capture_output=True,
        text=True,
        timeout=MOUNT_TIMEOUT_S,
    )
    if done.returncode != 0:
        _refused(f"mount exited {done.returncode}: {done.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=True, timeout=MOUNT_TIMEOUT_S)
        point.rmdir()


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def free_inodes(path: Path) -> int:
    return os.statvfs(path).f_favail


def fill_inodes_leaving(point: Path, leave: int, name: str = "inode-filler") -> Path:
    """Empty files in a new directory ``point/name`` until ``leave`` inodes stay free; the
    directory (deleting it gives them back)."""
    directory = point / name
    directory.mkdir()
    count = free_inodes(point) - leave
    assert count >= 0, f"{point} has only {free_inodes(point)} inodes free, less than {leave}"
    for i in range(count):  # bounded: the tmpfs's inode count
        (directory / str(i)).touch()
    return directory


def fill_leaving(point: Path, leave: int, name: str = "filler") -> Path:
    """Preallocate a file on ``point`` so that about ``leave`` bytes stay free; its path."""
    filler = point / name
    size = free_bytes(point) - leave
    assert size > 0, f"{point} has only {free_bytes(point)} bytes free, less than {leave}"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)
    return filler


def fill_while_written(point: Path, leave: int, name: str = "filler") -> Path:
    """:func:`fill_leaving` while a server writes to ``point``: a fill that its writes raced
    (the space it measured was gone when it allocated) is tried again."""
    for _ in range(20):  # bounded: each try measures the space left anew
        try:
            return fill_leaving(point, leave, name)
        except OSError:
            (point / name).unlink(missing_ok=True)
    raise AssertionError(f"could not fill {point} while it was written to")
