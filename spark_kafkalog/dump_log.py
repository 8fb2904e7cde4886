"""``kafkalog dump``: print and verify Kafka log segments, in the spirit of kafka-dump-log.

A PATH is a segment file (``*.log``), a partition directory (``<topic>-<partition>``) or a log
directory holding partition directories. Output is one line per batch (and with ``records`` one
per record), as text or as one JSON object a line (bytes base64-encoded), then a summary per file.
With ``verify`` every batch CRC and every offset and time index entry is checked, and the first
corruption stops the dump with a non-zero exit status and a line naming the file, byte position and
base offset. Reads only; never writes a file.

``--json`` output is stable (docs/operating/index.md lists it): a batch line has
``file`` and the fields of :func:`batch_line`, a record line those of :func:`record_line`, and
the summary line of a file (all ``--summary`` prints) is::

    {"summary": PATH, "topic": T, "partition": P, "segmentBaseOffset": B, "batches": N,
     "records": N, "bytes": N, "firstOffset": O, "lastOffset": O, "codecs": {"none": N},
     "invalidCrcs": N}

``topic`` and ``partition`` are null when the file's directory name is not
``<topic>-<partition>``, ``segmentBaseOffset`` (from the file name) when the name is not
``<20 digits>.log``; ``firstOffset`` and ``lastOffset`` are null for an empty segment; ``codecs``
counts batches by compression (none, gzip, snappy, lz4, zstd). Fields may be added; none is
removed or renamed. A line is a summary when it has ``summary``, a batch when it has
``baseOffset``, a record when it has ``offset``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from broker_embedded.errors import IndexCorruptError, KafkaLogError
from broker_embedded.record.record_batch import LOG_APPEND_TIME, NO_TIMESTAMP_TYPE, Record
from broker_embedded.record.records import iter_batches
from broker_embedded.storage.log_dir import LogDir
from broker_embedded.storage.log_file_utils import parse_segment_log_name
from broker_embedded.storage.log_segment import LogSegment
from broker_embedded.storage.topic_partition import TopicPartition

TIMESTAMP_TYPE_NAMES = {
    NO_TIMESTAMP_TYPE: "NoTimestampType",
    0: "CreateTime",
    LOG_APPEND_TIME: "LogAppendTime",
}


class DumpError(KafkaLogError):
    """A PATH that is neither a segment file, a partition directory nor a log directory."""


@dataclass
class FileSummary:
    """What one segment file held."""

    path: Path
    batches: int = 0
    records: int = 0
    bytes: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    codecs: dict[str, int] = field(default_factory=dict)
    invalid_crcs: int = 0

    def add(self, batch) -> None:
        self.batches += 1
        self.records += batch.records_count
        self.bytes += batch.size_in_bytes
        if self.first_offset is None:
            self.first_offset = batch.base_offset
        self.last_offset = batch.last_offset
        codec = batch.compression.name.lower()
        self.codecs[codec] = self.codecs.get(codec, 0) + 1


def segment_files(path: Path) -> Iterator[Path]:
    """The segment files PATH stands for, in offset order per partition."""
    if path.is_file():
        if path.suffix != ".log":
            raise DumpError(f"{path}: not a segment file (expected a .log file)")
        yield path
    elif path.is_dir():
        own = sorted(path.glob("[0-9]" * 20 + ".log"))
        if own:
            yield from own
            return
        log_dir = LogDir(path)
        partitions = log_dir.partitions()
        if not partitions:
            raise DumpError(f"{path}: neither a partition directory nor a log directory")
        for tp in partitions:
            yield from sorted(log_dir.partition_dir(tp).glob("[0-9]" * 20 + ".log"))
    else:
        raise DumpError(f"{path}: no such file or directory")


def verify_indexes(path: Path) -> None:
    """Check the segment's offset and time index files entry by entry against its .log.

    A missing index is not corruption (Kafka rebuilds it); one that had to be rebuilt because its
    entries contradict the .log is.
    """
    segment = LogSegment(path)
    try:
        status = segment.index_status
        if status.startswith("rebuilt") and not status.endswith("is missing"):
            raise IndexCorruptError(f"index of {path} is corrupt: {status}")
        segment.verify()
    finally:
        segment.close()


def batch_line(batch) -> dict:
    return {
        "baseOffset": batch.base_offset,
        "lastOffset": batch.last_offset,
        "count": batch.records_count,
        "baseSequence": batch.base_sequence,
        "lastSequence": batch.last_sequence,
        "producerId": batch.producer_id,
        "producerEpoch": batch.producer_epoch,
        "partitionLeaderEpoch": batch.partition_leader_epoch,
        "isTransactional": batch.is_transactional,
        "isControl": batch.is_control,
        "deleteHorizonMs": batch.delete_horizon_ms,
        "position": batch.position,
        "timestampType": TIMESTAMP_TYPE_NAMES[batch.timestamp_type],
        "maxTimestamp": batch.max_timestamp,
        "size": batch.size_in_bytes,
        "magic": batch.magic,
        "compresscodec": batch.compression.name.lower(),
        "crc": batch.crc,
        "isvalid": batch.is_valid(),
    }


def record_line(record: Record, timestamp_type: str) -> dict:
    def b64(b: bytes | None) -> str | None:
        return None if b is None else base64.b64encode(b).decode("ascii")

    return {
        "offset": record.offset,
        timestamp_type: record.timestamp,
        "keySize": -1 if record.key is None else len(record.key),
        "valueSize": -1 if record.value is None else len(record.value),
        "key": b64(record.key),
        "value": b64(record.value),
        "headers": [{"key": k, "value": b64(v)} for k, v in record.headers],
    }


def _text(obj: dict, prefix: str = "") -> str:
    def fmt(v) -> str:
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, list):
            return "[" + ",".join(h["key"] for h in v) + "]"
        return "null" if v is None else str(v)

    return prefix + " ".join(f"{k}: {fmt(v)}" for k, v in obj.items() if k not in ("key", "value"))


class Dumper:
    """Writes the dump of segment files to ``out``; corruption raises a KafkaLogError."""

    def __init__(
        self, out: TextIO, *, records: bool, as_json: bool, verify: bool, summary_only: bool
    ) -> None:
        self.out = out
        self.summary_only = summary_only
        self.records = records
        self.as_json = as_json
        self.verify = verify

    def emit(self, obj: dict, prefix: str = "") -> None:
        self.out.write((json.dumps(obj) if self.as_json else _text(obj, prefix)) + "\n")

    def dump_segment(self, path: Path) -> FileSummary:
        summary = FileSummary(path)
        if not (self.as_json or self.summary_only):
            self.out.write(f"Dumping {path}\n")
        data = path.read_bytes()
        for batch in iter_batches(data, str(path), tail="error"):
            line = batch_line(batch)
            if self.verify and not line["isvalid"]:
                batch.ensure_valid()
            summary.invalid_crcs += not line["isvalid"]
            summary.add(batch)
            if self.summary_only:
                continue
            self.emit({"file": str(path), **line} if self.as_json else line)
            if self.records:
                ts_type = line["timestampType"]
                for rec in batch.records():
                    self.emit(record_line(rec, ts_type), "| ")
        if self.verify and parse_segment_log_name(path.name) is not None:
            verify_indexes(path)
        return summary

    def emit_summary(self, s: FileSummary) -> None:
        tp = TopicPartition.try_parse_dir_name(s.path.parent.name)
        obj = {
            "summary": str(s.path),
            "topic": None if tp is None else tp.topic,
            "partition": None if tp is None else tp.partition,
            "segmentBaseOffset": parse_segment_log_name(s.path.name),
            "batches": s.batches,
            "records": s.records,
            "bytes": s.bytes,
            "firstOffset": s.first_offset,
            "lastOffset": s.last_offset,
            "codecs": s.codecs,
            "invalidCrcs": s.invalid_crcs,
        }
        if self.as_json:
            self.emit(obj)
        else:
            codecs = ",".join(f"{k}={v}" for k, v in sorted(s.codecs.items())) or "-"
            self.out.write(
                f"Summary {s.path}: {s.batches} batches, {s.records} records, {s.bytes} bytes, "
                f"offsets {s.first_offset}..{s.last_offset}, codecs {codecs}, "
                f"invalid CRCs {s.invalid_crcs}\n"
            )


def dump(
    paths: list[Path],
    out: TextIO,
    *,
    records: bool = False,
    as_json: bool = False,
    verify: bool = False,
    summary_only: bool = False,
) -> int:
    """Dump every PATH; return 0. Corruption and bad PATHs raise KafkaLogError."""
    dumper = Dumper(out, records=records, as_json=as_json, verify=verify, summary_only=summary_only)
    for path in paths:
        for seg in segment_files(path):
            dumper.emit_summary(dumper.dump_segment(seg))
    return 0
