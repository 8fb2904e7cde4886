"""The durable records of a write job's commit (staged_write.py): the journal a commit writes
before it appends (:func:`write_journal`, :func:`read_journal_entries`), and a streaming
writer's commits file, the last batch it committed (:func:`committed_batch`,
:func:`set_committed_batch`). Job and writer ids are checked by :func:`checked_name`.

The journal ``COMMITTING`` is UTF-8 JSON, written atomically (tmp, fsync, rename)::

    {"version": 1, "job": "<job id>",
     "partitions": [{"topic": "t", "partition": 0, "log_end_offset": 42}, ...]}

holding each touched partition's log end offset (LEO) before the commit. The commit of a
micro-batch of a streaming writer (``writer_id`` and ``batch_id`` given) writes version 2, the
same plus ``"writer": {"id": "<writer id>", "batch": <batch id>, "previous": <batch id or
null>}``: the batch it commits and the one the writer's commits file held before.

A writer's commits file ``.kafkalog-commits/<writer id>.json`` is UTF-8 JSON, written atomically::

    {"version": 1, "writer": "<writer id>", "batch": 41}

the last batch of that writer whose records are in the log dir. A commit of batch ``B`` of writer
``W`` when the file holds a batch at or above ``B`` is a replay (Spark runs a micro-batch again
after a failure, with other task attempts: only the batch id counts): it appends nothing, drops
the staged files and returns ``{}``. The file is written under the log dir's lock, in the same
commit as the records, so that it says ``B`` exactly when batch ``B``'s records are published.


Thread safety: stateless functions; the files are written atomically (tmp, fsync, rename), and
only under the log dir's lock (the commit's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from broker_embedded.errors import (
    CheckpointError,
    KafkaLogError,
)
from broker_embedded.storage.checkpoint_file import fsync_dir, write_atomically
from broker_embedded.storage.topic_partition import TopicPartition

JOURNAL_VERSION = 1
JOURNAL_VERSION_WRITER = 2  # a streaming writer's batch: with the "writer" entry
COMMITS_DIR = ".kafkalog-commits"
COMMITS_VERSION = 1
_NAME = re.compile(r"[A-Za-z0-9_-]{1,100}")


def checked_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(f"{what} {name!r} must be 1 to 100 characters of [A-Za-z0-9_-]")
    return name


@dataclass(frozen=True, slots=True)
class WriterMark:
    """What a streaming writer's commit journals: batch ``batch`` of writer ``writer_id``, whose
    commits file held ``previous`` (``None``: no file) before the commit."""

    writer_id: str
    batch: int
    previous: int | None


def write_journal(
    path: Path, job_id: str, leos: Mapping[TopicPartition, int], mark: WriterMark | None = None
) -> None:
    body: dict = {
        "version": JOURNAL_VERSION if mark is None else JOURNAL_VERSION_WRITER,
        "job": job_id,
        "partitions": [
            {"topic": tp.topic, "partition": tp.partition, "log_end_offset": leo}
            for tp, leo in sorted(leos.items())
        ],
    }
    if mark is not None:
        body["writer"] = {"id": mark.writer_id, "batch": mark.batch, "previous": mark.previous}
    write_atomically(path, (json.dumps(body, indent=1) + "\n").encode("utf-8"))


def checked_batch_id(value: object, what: str) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{what} {value!r} is not a batch id (an int >= 0)")
    return value


def read_journal_entries(path: str | Path) -> tuple[dict[TopicPartition, int], WriterMark | None]:
    """The journaled pre-commit log end offsets and, for a streaming writer's batch, its
    :class:`WriterMark`; :class:`CheckpointError` naming the file if it is malformed."""
    try:
        body = json.loads(Path(path).read_bytes())
        version = body.get("version")
        if version not in (JOURNAL_VERSION, JOURNAL_VERSION_WRITER):
            raise ValueError(f"unsupported version {version!r}")
        out = {}
        for p in body["partitions"]:
            tp = TopicPartition(p["topic"], p["partition"])
            leo = p["log_end_offset"]
            if type(leo) is not int or leo < 0:
                raise ValueError(f"{tp}: log end offset {leo!r}")
            out[tp] = leo
        mark = None
        if version == JOURNAL_VERSION_WRITER:
            w = body["writer"]
            previous = w["previous"]
            mark = WriterMark(
                checked_name(w["id"], "writer id"),
                checked_batch_id(w["batch"], "batch"),
                None if previous is None else checked_batch_id(previous, "previous batch"),
            )
        return out, mark
    except (OSError, ValueError, TypeError, KeyError, AttributeError, KafkaLogError) as e:
        raise CheckpointError(f"write job journal {path} is malformed: {e!r}") from None


def read_journal(path: str | Path) -> dict[TopicPartition, int]:
    """The journaled pre-commit log end offsets; :class:`CheckpointError` naming the file if it
    is malformed."""
    return read_journal_entries(path)[0]


def commits_file(log_dir: str | Path, writer_id: str) -> Path:
    """``<log dir>/.kafkalog-commits/<writer id>.json``."""
    return Path(log_dir) / COMMITS_DIR / f"{checked_name(writer_id, 'writer id')}.json"


def committed_batch(log_dir: str | Path, writer_id: str) -> int | None:
    """The last batch of streaming writer ``writer_id`` committed to ``log_dir`` (``None``:
    none); :class:`CheckpointError` naming the file if it is malformed. Exact under the log
    dir's lock (a commit, a broker); otherwise a snapshot that a dead commit not yet resolved
    may be ahead of."""
    path = commits_file(log_dir, writer_id)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        body = json.loads(data)
        if body.get("version") != COMMITS_VERSION:
            raise ValueError(f"unsupported version {body.get('version')!r}")
        if body.get("writer") != writer_id:
            raise ValueError(f"it names writer {body.get('writer')!r}")
        return checked_batch_id(body["batch"], "batch")
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise CheckpointError(f"streaming writer commits file {path} is malformed: {e!r}") from None


def set_committed_batch(log_dir: Path, writer_id: str, batch: int | None) -> None:
    """Write (or, for ``None``, delete) a writer's commits file durably. Under the lock."""
    path = commits_file(log_dir, writer_id)
    if batch is None:
        if path.exists():
            path.unlink()
            fsync_dir(path.parent)
        return
    if not path.parent.is_dir():
        path.parent.mkdir(exist_ok=True)
        fsync_dir(log_dir)
    body = {"version": COMMITS_VERSION, "writer": writer_id, "batch": batch}
    write_atomically(path, (json.dumps(body) + "\n").encode("utf-8"))
