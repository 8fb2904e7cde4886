"""Opening and mapping segment files without keeping file descriptors.

A broker holds thousands of segments: Kafka opens index files lazily and keeps no descriptor it
does not need, and so do we. Two helpers:

- :func:`open_file`: ``open`` whose "too many open files" failure (``EMFILE``: this process's
  ``RLIMIT_NOFILE``, what ``ulimit -n`` sets; ``ENFILE``: the system-wide table,
  ``fs.file-max``) is a :class:`TooManyOpenFilesError` naming the file, the limit with its
  current value and what to raise.
- :func:`map_read_only`: the first ``size`` bytes of a file mapped read-only
  (``mmap(PROT_READ, MAP_SHARED)`` through libc), as a read-only ``memoryview`` of format ``B``.
  Python's ``mmap.mmap`` keeps a duplicate descriptor for the mapping's whole life (until 3.13's
  ``trackfd``); this mapping keeps none: the file is open only during the call. The pages are
  unmapped when the last view of them (slices, numpy arrays made from them) is released: the
  memoryview exports a numpy array whose base owns the mapping and unmaps it when collected.
- :func:`release_mapped_pages`: a reader done with the start of such a mapping drops its
  resident pages (``madvise(MADV_DONTNEED)``: for a read-only shared file mapping this unmaps
  the pages from this process only; the bytes stay in the page cache and a later touch faults
  them in again), so that a sequential read of a large segment does not keep the file resident
  in the process (its RSS would grow with the segment's size).

Thread safety: both are plain functions; a mapping is read-only and any number of threads may
read it. Touching mapped bytes past the end of a file truncated since raises SIGBUS, as with
``mmap.mmap``: never truncate a file that a reader has mapped (log_segment.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import resource
import weakref
from pathlib import Path
from typing import IO, Any

import numpy as np

from broker_embedded.errors import TooManyOpenFilesError

_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_LIBC.mmap.restype = ctypes.c_void_p
_LIBC.mmap.argtypes = (
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
)
_LIBC.madvise.restype = ctypes.c_int
_LIBC.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_LIBC.munmap.restype = ctypes.c_int
_LIBC.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_MAP_FAILED = ctypes.c_void_p(-1).value


def too_many_open_files(path: str | os.PathLike[str], error: OSError) -> TooManyOpenFilesError:
    """The domain error for an ``EMFILE`` / ``ENFILE`` failure opening ``path``."""
    if error.errno == errno.ENFILE:
        what = (
            "the system-wide limit on open files is reached (ENFILE); raise fs.file-max "
            "(sysctl -w fs.file-max=N) or close other programs' files"
        )
    else:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        what = (
            f"this process reached its open-files limit (EMFILE, RLIMIT_NOFILE: `ulimit -n` is "
            f"{soft}, hard limit {hard}); raise it (e.g. `ulimit -n {max(2 * soft, 65536)}` "
            "before starting, or LimitNOFILE= for a systemd service)"
        )
    return TooManyOpenFilesError(f"cannot open {path}: {what}")


def is_too_many_open_files(error: OSError) -> bool:
    return error.errno in (errno.EMFILE, errno.ENFILE)


def open_file(path: str | os.PathLike[str], mode: str = "rb", **kwargs: Any) -> IO[Any]:
    """``open(path, mode, **kwargs)``; see the module docstring for the error."""
    try:
        return open(path, mode, **kwargs)
    except OSError as e:
        if is_too_many_open_files(e):
            raise too_many_open_files(path, e) from e
        raise


class _Mapping:
    """Owns ``size`` bytes mapped at ``address``; numpy reads them through
    ``__array_interface__`` (read-only) and keeps this object as the array's base."""

    __slots__ = ("__array_interface__", "__weakref__")

    def __init__(self, address: int, size: int) -> None:
        self.__array_interface__ = {
            "data": (address, True),
            "shape": (size,),
            "typestr": "|u1",
            "version": 3,
        }
        weakref.finalize(self, _LIBC.munmap, address, size)


def open_read_only(path: str | os.PathLike[str]) -> int:
    """A bare descriptor of ``path`` opened read-only (the caller closes it): a buffered file
    object costs more than the calls it wraps when only a ``pread`` or a map follows. See the
    module docstring for the error."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        if is_too_many_open_files(e):
            raise too_many_open_files(path, e) from e
        raise


def map_descriptor(fd: int, length: int, path: str | os.PathLike[str]) -> memoryview:
    """The first ``length`` bytes of the file open as ``fd`` mapped read-only (the mapping
    keeps no descriptor: ``fd`` may be closed at once); ``path`` names it in errors."""
    if length == 0:
        return memoryview(b"")
    address = _LIBC.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address in (None, _MAP_FAILED):
        code = ctypes.get_errno()
        raise OSError(code, f"mmap of {length} bytes failed: {os.strerror(code)}", str(Path(path)))
    return memoryview(np.asarray(_Mapping(address, length)))


def map_read_only(
    path: str | os.PathLike[str], size: int | None = None
) -> tuple[memoryview, os.stat_result]:
    """The first ``size`` bytes of ``path`` (default: all of it) mapped read-only, and the
    ``stat`` of the file mapped; see the module docstring. An empty file maps to ``b""``."""
    fd = open_read_only(path)
    try:
        st = os.fstat(fd)
        return map_descriptor(fd, st.st_size if size is None else size, path), st
    finally:
        os.close(fd)


def release_mapped_pages(view: Any, around: int | None = None) -> bool:
    """Drop this process's resident pages of the mapping ``view`` is (a slice of), from the
    mapping's start through the end of ``view``: what a sequential reader left behind, including
    the pages the kernel mapped around its faults (fault-around), which lie outside the slices
    read. With ``around``: only the pages of ``view`` and of ``around`` bytes either side (within
    the mapping), for a reader that touched no more than that (the cost of ``madvise`` grows with
    the range, page tables included, so a release from the start of a large segment at every
    read of its tail would cost more than the read). See the module docstring. Anything but a
    :func:`map_read_only` mapping (bytes, memory of the heap, which ``MADV_DONTNEED`` would zero)
    is left alone. Whether pages were released."""
    if not isinstance(view, memoryview) or view.nbytes == 0:
        return False
    mapped = view.obj
    if not isinstance(getattr(mapped, "base", None), _Mapping):
        return False
    start = mapped.__array_interface__["data"][0]  # page-aligned: where mmap put it
    first = np.frombuffer(view, dtype=np.uint8).__array_interface__["data"][0]
    end = first + view.nbytes
    if around is not None:
        end = min(end + around, start + mapped.nbytes)
        start = max(start, (first - around) & ~(mmap.PAGESIZE - 1))
    return _LIBC.madvise(start, end - start, mmap.MADV_DONTNEED) == 0
