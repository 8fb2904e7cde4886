"""The deleted topics' partitions whose stored objects are still to be deleted, kept in the log
dir so that a restart finishes them (remote_log_manager.py deletes them on its thread).

Layout of ``<log dir>/remote-log-pending-deletions``: a version line ``0``, then ``<topic>
<partition> <topic id or ->`` a line; written atomically (checkpoint_file.py), removed when no
partition is left. A damaged line is logged with the file and line number and skipped (that
partition's objects are then left for an operator). Called from one thread at a time.
"""

from __future__ import annotations

import logging
from pathlib import Path

from broker_embedded.storage.checkpoint_file import write_atomically
from broker_embedded.storage.topic_partition import TopicPartition

log = logging.getLogger(__name__)

PENDING_FILE = "remote-log-pending-deletions"
PENDING_VERSION = "0"


def write_pending_deletions(log_dir: Path, pending: list[tuple[TopicPartition, str]]) -> None:
    """Record ``pending`` ((partition, topic id) pairs) in ``log_dir``; remove the file when
    it is empty."""
    path = log_dir / PENDING_FILE
    if not pending:
        path.unlink(missing_ok=True)
        return
    lines = "".join(f"{tp.topic} {tp.partition} {tid or '-'}\n" for tp, tid in pending)
    write_atomically(path, f"{PENDING_VERSION}\n{lines}".encode())


def read_pending_deletions(log_dir: Path) -> list[tuple[TopicPartition, str]]:
    """The (partition, topic id or "") pairs recorded in ``log_dir``; none without the file."""
    path = log_dir / PENDING_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    lines = text.splitlines()
    if not lines or lines[0] != PENDING_VERSION:
        log.error("remote log manager: %s is not a version %s file; ignored", path, PENDING_VERSION)
        return []
    found = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            topic, partition, tid = line.rsplit(" ", 2)
            found.append((TopicPartition(topic, int(partition)), "" if tid == "-" else tid))
        except ValueError:  # the broker starts: that partition's objects are left
            log.error(
                "remote log manager: %s line %d is not '<topic> <partition> <topic "
                "id or ->': %r skipped (delete that partition's objects by hand)",
                path,
                number,
                line,
            )
    return found
