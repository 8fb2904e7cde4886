"""Whether a log dir's writes succeed: one log line per episode of failed writes (a full disk),
not one per request.

An episode starts at the first failed write (an ``OSError``: ``ENOSPC`` when the disk is full,
``EDQUOT`` over a quota, ``EIO``) after writes succeeded: one WARNING naming the log dir, what
failed and why. Every failure of the episode is counted (``failures``), none logged again. The
episode ends at the first successful write at least :data:`QUIET_S` after its last failure: one
INFO line with the count. It ends too, at the next failure, when a write succeeded after its last
failure and that failure is at least :data:`QUIET_S` old (space came back and the log dir went
quiet before it filled again): that failure starts a new episode, logged. So a disk that flaps
(small writes fit, large ones do not) logs at most two lines per :data:`QUIET_S`.

What a failed write means is decided by its writer (log_segment.py rolls an append back and the
request gets KAFKA_STORAGE_ERROR; a checkpoint keeps its old file and is written again later);
this object only counts and logs.

Thread safety: a failure takes a lock; a success reads one attribute unless an episode is open
(the append path pays nothing in the usual case).
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

QUIET_S = 5.0  # seconds without a failure before a success ends an episode
# what a full disk or quota raises: a write that may succeed once space is freed
NO_SPACE = frozenset((errno.ENOSPC, errno.EDQUOT))


class StorageHealth:
    """The write health of one log dir; see the module docstring."""

    __slots__ = (
        "log_dir",
        "failing",
        "failures",
        "episodes",
        "_last_failure",
        "_recovered",
        "_lock",
    )

    def __init__(self, log_dir: str | Path) -> None:
        self.log_dir = Path(log_dir)
        self.failing = False
        self.failures = 0  # failed writes of the current (or last) episode
        self.episodes = 0
        self._last_failure = 0.0
        self._recovered = False  # a write succeeded after the episode's last failure
        self._lock = threading.Lock()

    def failed(self, what: str, error: BaseException) -> None:
        """A write failed: ``what`` names it (file, partition), ``error`` says why."""
        with self._lock:
            now = time.monotonic()
            ended = self.failing and self._recovered and now - self._last_failure >= QUIET_S
            self._last_failure = now
            self._recovered = False
            if self.failing and not ended:
                self.failures += 1
                return
            if ended:
                log.info(
                    "log dir %s: writes succeeded again, after %d failed",
                    self.log_dir,
                    self.failures,
                )
            self.failing = True
            self.failures = 1
            self.episodes += 1
        log.warning(
            "log dir %s: %s: %s; appends that fail answer KAFKA_STORAGE_ERROR (56) "
            "with nothing kept, checkpoints keep their old files; not logged again until "
            "writes succeed",
            self.log_dir,
            what,
            _reason(error),
        )

    def succeeded(self) -> None:
        """A write succeeded (the common case costs one attribute read)."""
        if not self.failing:
            return
        with self._lock:
            if not self.failing:
                return
            self._recovered = True
            if time.monotonic() - self._last_failure < QUIET_S:
                return
            self.failing = False
            failures = self.failures
        log.info("log dir %s: writes succeed again, after %d failed", self.log_dir, failures)


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return f"[Errno {error.errno}] {error.strerror}"
    cause, text = error.__cause__, str(error)
    if isinstance(cause, OSError) and cause.strerror and cause.strerror not in text:
        return f"{text} ([Errno {cause.errno}] {cause.strerror})"
    return text
