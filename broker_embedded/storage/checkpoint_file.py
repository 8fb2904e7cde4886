"""Kafka's checkpoint text files, and the atomic file replacement they (and others) use.

Byte layout (UTF-8 text, ``\\n`` line ends; readers also accept ``\\r\\n`` and ``\\r``)::

    0            line 1: version, always 0
    3            line 2: number of entries
    topic 0 42   one entry per line, fields separated by whitespace

Reading follows Kafka's ``CheckpointFile``: an empty file, or one holding only the version line,
has no entries (Kafka creates an empty file when it opens a missing checkpoint); another version,
a line that does not parse, or an entry count that differs from the header is a
:class:`CheckpointError` naming the file and the 1-based line number. Writing produces exactly
what Kafka writes: ``<path>.tmp`` is written and fsynced, renamed over ``<path>`` (atomic on
POSIX), then the directory is fsynced, so a reader sees the old or the new file, never a mix;
a write that fails (a full disk) removes its ``.tmp`` and leaves the old file as it was.

What an entry is comes from an :class:`EntryFormat` (offset checkpoints, leader epochs).
Stateless apart from the file: concurrent reads are safe; writers of one file must be serialised
by the caller (they share the ``.tmp`` name).

:func:`one_sync` batches durability: within it, this thread's :func:`write_atomically` and
:func:`fsync_dir` skip their fsyncs (the renames stay atomic), and at its end one ``syncfs`` of
each file system written to (``os.sync`` where there is no ``syncfs``) makes everything durable
at once. Creating or reopening thousands of partitions then costs a few syncs, not several
fsyncs per partition (at 2-5 ms each on a disk). The caller answers (or acknowledges) only
after the block ended; a crash inside it leaves files written whole (the process died) or, on
a power loss, files the open path must treat as never written (new partitions: nothing was
acknowledged in them).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from broker_embedded.errors import CheckpointError

CHECKPOINT_VERSION = 0
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_LINE_END = re.compile(r"\r\n|\r|\n")
_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")  # Java's \s
_INTEGER = re.compile(r"[+-]?[0-9]+")

E = TypeVar("E")
T = TypeVar("T")


class EntryFormat(Protocol[E]):
    """How one entry line of a checkpoint file reads and writes."""

    def parse(self, fields: list[str]) -> E:
        """The entry of a line's whitespace-separated fields; ``ValueError`` if malformed."""
        ...

    def format(self, entry: E) -> str:
        """The line of an entry, without line end."""
        ...


def parse_int(text: str, lo: int, hi: int, what: str) -> int:
    """A decimal integer as Java's ``parseInt``/``parseLong`` reads it; ``ValueError`` else."""
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"{what} {text!r} is not an integer")
    n = int(text)
    if not lo <= n <= hi:
        raise ValueError(f"{what} {n} is out of range [{lo}, {hi}]")
    return n


def split_fields(line: str) -> list[str]:
    """Split a line on whitespace as Java's ``String.split("\\\\s+")`` does."""
    fields = _WHITESPACE.split(line)
    while fields and fields[-1] == "":
        fields.pop()
    return fields


def write_atomically(path: str | Path, data: bytes, *, tmp: Path | None = None) -> None:
    """Write ``tmp`` (default ``<path>.tmp``), fsync it, rename it over ``path``, fsync the
    directory (both fsyncs left to the end of a :func:`one_sync` block)."""
    path = Path(path)
    tmp = tmp or path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            if not _deferred(path.parent):
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk: the old file stays, the partial .tmp goes
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: str | Path) -> None:
    """Make a directory's entries (created, renamed files) durable (at the end of a
    :func:`one_sync` block, within one)."""
    if _deferred(directory):
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_batch = threading.local()  # .dirs: the directories written to in this thread's one_sync block


def _deferred(directory: str | Path) -> bool:
    dirs = getattr(_batch, "dirs", None)
    if dirs is None:
        return False
    dirs.add(str(directory))
    return True


@contextlib.contextmanager
def one_sync() -> Iterator[None]:
    """This thread's fsyncs deferred to one sync per file system at the end of the block
    (module docstring); a nested block joins the outer one. When the block raises, the sync is
    still made (its own failure then is not reported over the block's error)."""
    if getattr(_batch, "dirs", None) is not None:
        yield
        return
    dirs: set[str] = set()
    _batch.dirs = dirs
    try:
        yield
    except BaseException:
        _batch.dirs = None
        with contextlib.suppress(OSError):
            _sync_file_systems(dirs)
        raise
    _batch.dirs = None
    _sync_file_systems(dirs)


def within_this_sync(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` to run on other threads (a pool's) inside this thread's :func:`one_sync` block:
    their deferred fsyncs join it (unchanged outside a block)."""
    dirs = getattr(_batch, "dirs", None)

    def run(*args: Any) -> T:
        saved = getattr(_batch, "dirs", None)
        _batch.dirs = dirs
        try:
            return fn(*args)
        finally:
            _batch.dirs = saved

    return run


def _sync_file_systems(dirs: set[str]) -> None:
    """One ``syncfs`` per file system holding one of ``dirs`` (``os.sync`` without it)."""
    by_device: dict[int, str] = {}
    for d in dirs:
        with contextlib.suppress(FileNotFoundError):  # deleted since (a topic's rollback)
            by_device.setdefault(os.stat(d).st_dev, d)
    syncfs = _syncfs()
    for d in by_device.values():
        if syncfs is None:
            os.sync()
            return
        fd = os.open(d, os.O_RDONLY)
        try:
            if syncfs(fd) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"syncfs of {d} failed: {os.strerror(errno)}", d)
        finally:
            os.close(fd)


@functools.cache
def _syncfs():
    """libc's ``syncfs`` (Linux), or None."""
    try:
        return ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None


class CheckpointFile(Generic[E]):
    """One checkpoint file at ``path`` whose entries read and write through ``entry_format``."""

    __slots__ = ("path", "entry_format")

    def __init__(self, path: str | Path, entry_format: EntryFormat[E]) -> None:
        self.path = Path(path)
        self.entry_format = entry_format

    def exists(self) -> bool:
        return self.path.is_file()

    def read(self) -> list[E]:
        """The entries; ``FileNotFoundError`` when the file does not exist."""
        return self.parse(self.path.read_bytes())

    def write(self, entries: Sequence[E]) -> None:
        write_atomically(self.path, self.format(entries))

    def format(self, entries: Sequence[E]) -> bytes:
        lines = [str(CHECKPOINT_VERSION), str(len(entries))]
        lines += [self.entry_format.format(e) for e in entries]
        return "".join(line + "\n" for line in lines).encode("utf-8")

    def parse(self, data: bytes) -> list[E]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CheckpointError(f"checkpoint file {self.path} is not UTF-8 text: {e}") from None
        lines = _LINE_END.split(text)
        if lines[-1] == "":
            lines.pop()  # the file's last line end
        if not lines:
            return []
        version = self._header(lines, 0, "version")
        if version != CHECKPOINT_VERSION:
            raise self._malformed(1, f"unrecognized version {version}, expected 0")
        if len(lines) == 1:
            return []
        expected = self._header(lines, 1, "entry count")
        entries = [self._entry(lines[i], i + 1) for i in range(2, len(lines))]
        if len(entries) != expected:
            raise self._malformed(
                len(lines), f"header says {expected} entries, the file holds {len(entries)}"
            )
        return entries

    def _header(self, lines: list[str], index: int, what: str) -> int:
        try:
            return parse_int(lines[index], INT32_MIN, INT32_MAX, what)
        except ValueError as e:
            raise self._malformed(index + 1, str(e)) from None

    def _entry(self, line: str, line_no: int) -> E:
        try:
            return self.entry_format.parse(split_fields(line))
        except ValueError as e:
            raise self._malformed(line_no, f"{e} in {line!r}") from None

    def _malformed(self, line_no: int, reason: str) -> CheckpointError:
        return CheckpointError(f"malformed checkpoint file {self.path}, line {line_no}: {reason}")
