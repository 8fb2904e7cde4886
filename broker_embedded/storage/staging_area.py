"""The staging area of Spark write jobs beside a log dir, as a log manager opening the log dir
sees it: the paths (staged_write.py writes and commits there, and its module docstring holds the
whole layout and commit), and :func:`resolve_interrupted_commits`, which finishes or rolls back
what a commit's dead process left.

Layout::

    <log dir>/.kafkalog-staging/          the staging root (never a partition directory)
      <job id>/                           one write job; COMMITTING inside: a commit's journal
      <job id>.aborted                    the job was aborted

A job directory holding a journal was left by a dead commit (a live one holds the log dir's
lock). If the published high watermark of every journaled partition is still at or below its
journaled log end offset, the commit never published: each such partition is truncated to its
journaled LEO (fsynced before the journal goes) and a streaming writer's commits file is set back
to the journaled previous batch; otherwise it published and is kept, the commits file set to the
journaled batch. Either way the job directory is then deleted. Aborted jobs' directories and
markers older than ``ABORTED_MARKER_AGE_S``, and job directories without a journal unchanged for
``STALE_JOB_AGE_S``, are deleted too.

Thread safety: runs under the log dir's lock, while the log manager opens it.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Mapping
from contextlib import suppress
from pathlib import Path
from typing import Protocol

from broker_embedded.storage.checkpoint_file import fsync_dir
from broker_embedded.storage.commit_journal import (
    checked_name,
    read_journal_entries,
    set_committed_batch,
)
from broker_embedded.storage.topic_partition import TopicPartition
from broker_embedded.storage.unified_log import UnifiedLog

log = logging.getLogger(__name__)

STAGING_DIR = ".kafkalog-staging"
JOURNAL = "COMMITTING"
STALE_JOB_AGE_S = 24 * 3600
ABORTED_SUFFIX = ".aborted"
ABORTED_MARKER_AGE_S = 3600.0


class LogsToResolve(Protocol):
    """What resolving needs of the log manager that is opening the log dir."""

    @property
    def log_dir(self) -> Path: ...

    def get_log(self, tp: TopicPartition) -> UnifiedLog | None: ...


def staging_root(log_dir: str | Path) -> Path:
    return Path(log_dir) / STAGING_DIR


def job_dir(log_dir: str | Path, job_id: str) -> Path:
    """``<log dir>/.kafkalog-staging/<job id>``."""
    return staging_root(log_dir) / checked_name(job_id, "write job id")


def aborted_marker(log_dir: str | Path, job_id: str) -> Path:
    """``<log dir>/.kafkalog-staging/<job id>.aborted``: the job was aborted."""
    return staging_root(log_dir) / (checked_name(job_id, "write job id") + ABORTED_SUFFIX)


def truncate_back(lm: LogsToResolve, leos: Mapping[TopicPartition, int]) -> None:
    """Truncate each log to its journaled LEO and make it durable."""
    for tp, leo in sorted(leos.items()):
        lg = lm.get_log(tp)
        if lg is None or lg.is_closed:
            continue
        if lg.log_end_offset > leo:
            lg.truncate_to(leo)
        lg.flush()
        fsync_dir(lg.directory)


def resolve_interrupted_commits(
    lm: LogsToResolve,
    published_high_watermarks: Mapping[TopicPartition, int],
    *,
    now_s: float | None = None,
) -> bool:
    """Finish or roll back the commits a dead process left in ``lm``'s log dir, and delete the
    staging directories of jobs untouched for ``STALE_JOB_AGE_S`` (module docstring). Runs while
    ``lm`` opens, under the log dir's lock. True when a log was truncated."""
    root = staging_root(lm.log_dir)
    try:
        jobs = sorted(e.path for e in os.scandir(root) if e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return False
    now = time.time() if now_s is None else now_s
    truncated = False
    for path in map(Path, jobs):
        marker = path.with_name(path.name + ABORTED_SUFFIX)
        if marker.exists() and not (path / JOURNAL).exists():
            shutil.rmtree(path, ignore_errors=True)  # an aborted job's late task
            continue
        journal = path / JOURNAL
        if journal.exists():
            leos, mark = read_journal_entries(journal)
            published = any(published_high_watermarks.get(tp, -1) > leo for tp, leo in leos.items())
            if published:
                log.warning(
                    "%s: write job %s published before its process died: kept",
                    lm.log_dir,
                    path.name,
                )
                if mark is not None:
                    set_committed_batch(lm.log_dir, mark.writer_id, mark.batch)
            else:
                log.warning(
                    "%s: write job %s died before publishing: rolled back %s",
                    lm.log_dir,
                    path.name,
                    sorted(map(str, leos)),
                )
                truncate_back(lm, leos)
                if mark is not None:
                    set_committed_batch(lm.log_dir, mark.writer_id, mark.previous)
                truncated = True
            journal.unlink()
            fsync_dir(path)
            shutil.rmtree(path, ignore_errors=True)
        elif now - _last_change_s(path) > STALE_JOB_AGE_S:
            log.info("%s: deleting staging directory %s (no change for a day)", lm.log_dir, path)
            shutil.rmtree(path, ignore_errors=True)
    for marker in root.glob("*" + ABORTED_SUFFIX):
        with suppress(OSError):
            if now - marker.stat().st_mtime > ABORTED_MARKER_AGE_S:
                marker.unlink()
    return truncated


def _last_change_s(directory: Path) -> float:
    """The latest modification time of ``directory`` and the files in it."""
    latest = directory.stat().st_mtime
    for e in os.scandir(directory):
        try:
            latest = max(latest, e.stat(follow_symlinks=False).st_mtime)
        except FileNotFoundError:
            pass
    return latest
