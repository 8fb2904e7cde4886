"""The exclusive write lock of a log dir: its ``.lock`` file (Kafka's ``FileLock`` on
``<log dir>/.lock``).

One writer per log dir: the broker (or the commit of a Spark write job) that opened a log dir
holds this lock for as long as it may write there. Readers take no lock.

Byte layout: ``<log dir>/.lock`` is created if missing and never deleted (as Kafka leaves it).
Kafka keeps it empty; here the holder writes one UTF-8 line naming itself::

    pid 4242 on host worker-1 (kafkalog broker 0)\\n

so that a refused process can say who holds the lock. The text is advice, the lock is
``flock(LOCK_EX | LOCK_NB)`` on the open file. The text may be empty (between a holder taking the
lock and writing it) or stale (the last holder was killed): it is rewritten by every holder and
cleared on release.

Semantics (Linux ``flock``):

- The lock belongs to the open file description: a second :class:`LogDirLock` on the same log
  dir conflicts even inside the same process, and the lock goes away when the holder releases
  it, closes the file, or dies (including SIGKILL); no stale lock survives a crash.
- The descriptor is not inherited across ``exec`` (close-on-exec), but a child made by a bare
  ``fork()`` shares it and keeps the lock held until it exits too.
- ``flock`` and the ``fcntl`` record locks a JVM's ``FileChannel.tryLock`` takes are separate on
  Linux: this lock excludes kafkalog processes, not a Kafka broker running on the same dir.

Shared holders (:meth:`LogDirLock.acquire_shared`): a compaction job holds the lock shared
(``flock(LOCK_SH)``) while it cleans a partition of a log dir nobody owns, so that several of
its tasks clean partitions side by side and no broker or write commit takes the dir meanwhile.
Shared holders write nothing into ``.lock`` (they are many); each names itself in its
partition's cleaning lock instead (cleaning_lock.py, ``.kafkalog-cleaning/``), and a refused
exclusive holder is told who cleans what (:func:`lock_holder`).

Thread safety: :meth:`LogDirLock.release` may be called from any thread, any number of times.
"""

from __future__ import annotations

import fcntl
import os
import re
import socket
import threading
from pathlib import Path
from types import TracebackType

from broker_embedded.errors import KafkaLogError, LogDirLockedError
from broker_embedded.storage.storage_health import NO_SPACE

LOCK_FILE_NAME = ".lock"
CLEANING_DIR = ".kafkalog-cleaning"  # the partition cleaning locks (cleaning_lock.py)
CLEANING_LOCK_SUFFIX = ".lock"
_MAX_OWNER_TEXT = 200  # characters of the caller's owner text kept in the file
_MAX_READ = 4096  # bytes of a .lock file read to describe its holder
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def lock_file_path(log_dir: str | Path) -> Path:
    return Path(log_dir) / LOCK_FILE_NAME


def _owner_line(owner: str) -> bytes:
    """The line a holder writes into the lock file."""
    text = f"pid {os.getpid()} on host {socket.gethostname()}"
    owner = _CONTROL.sub(" ", owner).strip()[:_MAX_OWNER_TEXT]
    if owner:
        text += f" ({owner})"
    return (text + "\n").encode("utf-8")


def read_text(fd: int) -> str:
    """The holder's line of a lock file (control characters blanked), ``""`` if none."""
    try:
        data = os.pread(fd, _MAX_READ, 0)
    except OSError:
        data = b""
    return _CONTROL.sub(" ", data.decode("utf-8", errors="replace")).strip()


def held_cleanings(log_dir: str | Path) -> list[str]:
    """The holders of the partition cleaning locks of ``log_dir`` held right now, as each wrote
    itself (a snapshot: probes with a shared lock released at once)."""
    try:
        entries = sorted(os.scandir(Path(log_dir) / CLEANING_DIR), key=lambda e: e.name)
    except OSError:
        return []
    held = []
    for e in entries:
        if not e.name.endswith(CLEANING_LOCK_SUFFIX):
            continue
        try:
            fd = os.open(e.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if not try_flock(fd, fcntl.LOCK_SH):
                held.append(read_text(fd) or f"an unknown holder of {e.name}")
        finally:
            os.close(fd)
    return held


_COMPACTION_HOLDERS = "a compaction job cleaning partitions: "


def _described(text: str, log_dir: str | Path) -> str:
    """A lock file's text, else the compaction jobs holding the lock shared, else ``""``."""
    if text:
        return text
    cleanings = held_cleanings(log_dir)
    return _COMPACTION_HOLDERS + "; ".join(cleanings) if cleanings else ""


def _holder_description(fd: int, log_dir: Path) -> str:
    """Who holds the lock (:func:`_described`); a placeholder if it wrote nothing yet."""
    return _described(read_text(fd), log_dir) or "an unknown holder (its .lock file names none yet)"


def lock_holder(log_dir: str | Path) -> str:
    """Who holds (or last held) the ``.lock`` of ``log_dir``: its text, else the compaction jobs
    holding it shared, else ``""``."""
    try:
        fd = os.open(lock_file_path(log_dir), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        text = read_text(fd)
    finally:
        os.close(fd)
    return _described(text, log_dir)


def held_by_compaction(holder: str) -> bool:
    """Whether a :func:`lock_holder` text names compaction jobs holding the lock shared."""
    return holder.startswith(_COMPACTION_HOLDERS)


def _locked_error(log_dir: Path, holder: str) -> LogDirLockedError:
    this_process = f"pid {os.getpid()} on host {socket.gethostname()}"
    if holder == this_process or holder.startswith(this_process + " "):
        who = "another LogDirLock in this process"
    else:
        who = "another process"
    return LogDirLockedError(f"log dir {log_dir} is locked by {holder}: {who} owns it for writing")


def open_lock_file(path: Path, log_dir: Path) -> int:
    """Open (creating) a lock file of ``log_dir``, close-on-exec."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise KafkaLogError(f"cannot open lock file {path} of log dir {log_dir}: {e}") from e


def write_owner(fd: int, owner: str) -> None:
    """Write the holder's line (pid, host, ``owner``) into a held lock file. On a full disk
    the line is left out: the lock (``flock``) is held all the same, and whoever is refused
    next is told less about the holder."""
    os.ftruncate(fd, 0)
    try:
        os.pwrite(fd, _owner_line(owner), 0)
    except OSError as e:
        if e.errno not in NO_SPACE:
            raise


def try_flock(fd: int, operation: int) -> bool:
    """Take ``operation`` without blocking: ``True`` if taken, ``False`` if someone holds it."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class LogDirLock:
    """A held ``.lock`` of one log dir; made by :meth:`acquire`, ended by :meth:`release` (or
    the context manager's exit, or the process's end)."""

    __slots__ = ("log_dir", "owner", "shared", "_fd", "_mutex")

    def __init__(self, log_dir: Path, owner: str, fd: int, shared: bool = False) -> None:
        """Use :meth:`acquire` or :meth:`acquire_shared`."""
        self.log_dir = log_dir
        self.owner = owner
        self.shared = shared
        self._fd: int | None = fd
        self._mutex = threading.Lock()

    @property
    def path(self) -> Path:
        return lock_file_path(self.log_dir)

    @classmethod
    def acquire(cls, log_dir: str | Path, owner: str = "") -> LogDirLock:
        """Lock ``log_dir`` for writing, or raise :class:`LogDirLockedError` naming its holder.

        ``owner`` (e.g. ``"kafkalog broker 0"``) is written into the lock file beside the pid and
        host name, for the error message of whoever is refused next.
        """
        log_dir = Path(log_dir)
        fd = open_lock_file(lock_file_path(log_dir), log_dir)
        try:
            if not try_flock(fd, fcntl.LOCK_EX):
                raise _locked_error(log_dir, _holder_description(fd, log_dir))
            write_owner(fd, owner)
        except BaseException:
            os.close(fd)  # also drops the flock if it was taken
            raise
        return cls(log_dir, owner, fd)

    @classmethod
    def acquire_shared(cls, log_dir: str | Path, owner: str = "") -> LogDirLock:
        """Hold the lock shared (a compaction job; see the module docstring), or raise
        :class:`LogDirLockedError` naming the exclusive holder. Writes nothing into the file."""
        log_dir = Path(log_dir)
        fd = open_lock_file(lock_file_path(log_dir), log_dir)
        try:
            if not try_flock(fd, fcntl.LOCK_SH):
                raise _locked_error(log_dir, _holder_description(fd, log_dir))
        except BaseException:
            os.close(fd)
            raise
        return cls(log_dir, owner, fd, shared=True)

    @staticmethod
    def is_locked(log_dir: str | Path) -> bool:
        """Whether some process holds the lock of ``log_dir`` exclusively right now (compaction
        jobs holding it shared are not seen: see :func:`held_cleanings`).

        Probes with a shared lock released at once, never creates the lock file, and is only a
        snapshot: the answer may be stale when it returns. A concurrent :meth:`acquire` may be
        refused during the probe's instant.
        """
        try:
            fd = os.open(lock_file_path(log_dir), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            return not try_flock(fd, fcntl.LOCK_SH)
        finally:
            os.close(fd)  # drops the probe's lock if it got one

    @property
    def is_held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Clear the owner text, unlock and close; the file stays. Idempotent."""
        with self._mutex:
            fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if not self.shared:
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> LogDirLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = ("held shared" if self.shared else "held") if self.is_held else "released"
        return f"LogDirLock({str(self.log_dir)!r}, owner={self.owner!r}, {state})"
