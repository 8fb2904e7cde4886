"""``kafkalog consume``: print a topic's records (Kafka's ``kafka-console-consumer``), read
straight from the log dir without a broker.

Reading: the read-only view (``LogDir`` + ``PartitionReader``), which takes no lock and writes
nothing, so this works while a broker process owns the log dir (it sees what that broker has
published: the high watermark of ``replication-offset-checkpoint``, at most
``checkpoint.interval.ms`` old) and on a log dir copied from a real Kafka broker. Each partition
is read from its start offset up to the high watermark (``read_uncommitted``) or the last
stable offset (``read_committed``) as they were when the partition was opened, then the command
moves on to the next partition and finally exits: it never waits for new records. Reads are
``PartitionReader.fetch`` calls of at most 1 MiB (``FETCH_MAX_BYTES``; one batch larger than
that is read whole, as Kafka's ``min_one_message`` does), each decoded by the columnar decoder
(CRCs checked; with read_committed the fetch's aborted transactions are passed to it, so aborted
records are skipped) and printed batch by batch: memory stays bounded by one fetch and what
one decode call may inflate (``columnar_decoder.MAX_INFLATED_BYTES``: a call that stops early
is followed by a fetch from where it stopped).

Partitions: every partition of the topic in order (``kafkalog-topics.json`` when the log dir has
one, else the partition directories found), or ``--partition P``. Start: the log start offset
(``--from-beginning``, also the default, since the command stops at the high watermark rather
than waiting for new records), ``--offset N`` (``earliest`` and ``latest`` too; needs
``--partition``; N outside [log start offset, high watermark] is an OFFSET_OUT_OF_RANGE error
naming the range), or ``--timestamp MS``: the first offset whose record timestamp is >= MS
(``PartitionReader.find_offset_by_timestamp``; none: nothing to print). ``--max-messages N``
stops after N records over all partitions.

Output (stdout, bytes):

- ``text``: Kafka's ``DefaultMessageFormatter``: per record, as its ``--property`` settings ask,
  ``CreateTime:MS`` (or ``LogAppendTime:MS``, ``NO_TIMESTAMP``), ``Partition:P``, ``Offset:O``,
  the headers (``k:v`` joined by ``headers.separator``, ``NO_HEADERS`` when none), the key and
  the value, joined by ``key.separator`` (default a tab) and ended by ``line.separator``
  (default ``\\n``); keys, values and header values are written as their raw bytes, null ones as
  ``null.literal`` (default ``null``). Only ``print.value`` is on by default.
- ``json``: one JSON object a record: ``topic``, ``partition``, ``offset``, ``timestamp`` (ms),
  ``timestampType`` (``CreateTime``, ``LogAppendTime`` or ``NoTimestampType``), ``key``,
  ``value`` and ``headers`` (a list of ``{"key", "value"}``). Keys, values and header values are
  JSON strings when they are valid UTF-8, ``{"base64": "..."}`` otherwise, ``null`` when null.

A summary (records printed per partition) goes to stderr.
"""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TextIO

import pyarrow as pa

from broker_embedded.broker_config import BrokerConfig
from broker_embedded.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError
from broker_embedded.record.columnar_decoder import decode
from broker_embedded.storage.fetch_data_info import FetchIsolation, IsolationLevel
from broker_embedded.storage.log_config import parse_boolean
from broker_embedded.storage.log_dir import LogDir
from broker_embedded.storage.partition_reader import PartitionReader
from broker_embedded.storage.topic_config_file import TopicConfigFile
from broker_embedded.storage.topic_partition import TopicPartition, validate_topic
from spark_kafkalog.topics_command import CommandError, parse_assignments, require_log_dir

FETCH_MAX_BYTES = 1 << 20
TIMESTAMP_TYPE_NAMES = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}

# Kafka's DefaultMessageFormatter properties and their defaults.
TEXT_PROPERTIES = {
    "print.timestamp": "false",
    "print.partition": "false",
    "print.offset": "false",
    "print.headers": "false",
    "print.key": "false",
    "print.value": "true",
    "key.separator": "\t",
    "line.separator": "\n",
    "headers.separator": ",",
    "null.literal": "null",
}


@dataclass(frozen=True)
class StartAt:
    """Where each partition's read starts: ``kind`` earliest, latest, offset or timestamp."""

    kind: str = "earliest"
    value: int = 0

    @classmethod
    def parse_offset(cls, text: str) -> StartAt:
        """``--offset``: a non-negative integer, ``earliest`` or ``latest``."""
        t = text.strip().lower()
        if t in ("earliest", "latest"):
            return cls(t)
        if not t.isdigit():
            raise CommandError(f"--offset must be earliest, latest or an offset >= 0, not {text!r}")
        return cls("offset", int(t))


# -- formatting ------------------------------------------------------------------------------------


def _bool_property(props: dict[str, str], name: str) -> bool:
    parsed = parse_boolean(props[name])
    if parsed is None:
        raise CommandError(f"--property {name} must be true or false, not {props[name]!r}")
    return parsed


class TextFormatter:
    """Kafka's ``DefaultMessageFormatter``, one Arrow batch at a time."""

    def __init__(self, properties: dict[str, str]) -> None:
        unknown = sorted(set(properties) - set(TEXT_PROPERTIES))
        if unknown:
            raise CommandError(
                f"unknown --property {', '.join(unknown)} (known: {', '.join(TEXT_PROPERTIES)})"
            )
        props = {**TEXT_PROPERTIES, **properties}
        self.fields = [
            name
            for name in ("timestamp", "partition", "offset", "headers", "key", "value")
            if _bool_property(props, f"print.{name}")
        ]
        self.key_sep = props["key.separator"].encode("utf-8")
        self.line_sep = props["line.separator"].encode("utf-8")
        self.headers_sep = props["headers.separator"].encode("utf-8")
        self.null = props["null.literal"].encode("utf-8")

    def _headers(self, headers: list[dict]) -> bytes:
        if not headers:
            return b"NO_HEADERS"
        return self.headers_sep.join(
            h["key"].encode("utf-8") + b":" + (self.null if h["value"] is None else h["value"])
            for h in headers
        )

    def _timestamp(self, ts: int, ts_type: int) -> bytes:
        if ts_type < 0:
            return b"NO_TIMESTAMP"
        return f"{TIMESTAMP_TYPE_NAMES[ts_type]}:{ts}".encode()

    def format(self, batch: pa.RecordBatch, partition: int) -> Iterator[bytes]:
        cols = _columns(batch, self.fields)
        part = f"Partition:{partition}".encode()
        for i in range(batch.num_rows):
            parts = []
            for name in self.fields:
                if name == "timestamp":
                    parts.append(self._timestamp(cols["timestamp"][i], cols["timestampType"][i]))
                elif name == "partition":
                    parts.append(part)
                elif name == "offset":
                    parts.append(b"Offset:%d" % cols["offset"][i])
                elif name == "headers":
                    parts.append(self._headers(cols["headers"][i]))
                else:
                    v = cols[name][i]
                    parts.append(self.null if v is None else v)
            yield self.key_sep.join(parts) + self.line_sep


def _encode(v: bytes | None) -> str | dict | None:
    if v is None:
        return None
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(v).decode("ascii")}


class JsonFormatter:
    """One JSON object a record (see the module docstring)."""

    FIELDS = ("offset", "timestamp", "headers", "key", "value")

    def format(self, batch: pa.RecordBatch, partition: int) -> Iterator[bytes]:
        cols = _columns(batch, self.FIELDS)
        topic = batch.column("topic")[0].as_py() if batch.num_rows else ""
        for i in range(batch.num_rows):
            obj = {
                "topic": topic,
                "partition": partition,
                "offset": cols["offset"][i],
                "timestamp": cols["timestamp"][i],
                "timestampType": TIMESTAMP_TYPE_NAMES[cols["timestampType"][i]],
                "key": _encode(cols["key"][i]),
                "value": _encode(cols["value"][i]),
                "headers": [
                    {"key": h["key"], "value": _encode(h["value"])}
                    for h in cols["headers"][i] or ()
                ],
            }
            yield json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


def _columns(batch: pa.RecordBatch, fields: Iterable[str]) -> dict[str, list]:
    """The columns ``fields`` need, as Python lists (timestamps in ms)."""
    cols: dict[str, list] = {}
    for name in fields:
        if name == "timestamp":
            us = batch.column("timestamp").cast(pa.int64()).to_numpy(zero_copy_only=False)
            cols["timestamp"] = (us // 1000).tolist()
            cols["timestampType"] = batch.column("timestampType").to_pylist()
        elif name in ("offset", "headers", "key", "value"):
            cols[name] = batch.column(name).to_pylist()
    return cols


# -- reading ---------------------------------------------------------------------------------------


def topic_partitions(log_dir: LogDir, topic: str) -> list[int]:
    """The partitions of ``topic``: from ``kafkalog-topics.json``, else the directories found."""
    entries = TopicConfigFile(log_dir.path).read()
    if topic in entries:
        return list(range(entries[topic].partitions))
    found = sorted(tp.partition for tp in log_dir.partitions() if tp.topic == topic)
    if not found:
        topics = sorted(set(entries) | {tp.topic for tp in log_dir.partitions()})
        raise UnknownTopicOrPartitionError(
            f"topic {topic!r} does not exist in log dir {log_dir.path} "
            f"(topics: {', '.join(topics) or 'none'})"
        )
    return found


@dataclass(frozen=True)
class Bounds:
    """Where one partition's read starts and ends."""

    start: int
    end: int


@dataclass(frozen=True)
class PartitionOffsets:
    """A partition's log start offset and high watermark, and where a read ends: the high
    watermark, or the last stable offset with read_committed."""

    log_start_offset: int
    high_watermark: int
    end: int


def resolve(
    tp: TopicPartition,
    offsets: PartitionOffsets,
    start: StartAt,
    find_offset: Callable[[int], int | None],
) -> Bounds:
    """Resolve ``start`` for one partition; ``find_offset(ms)`` is the first offset whose
    record timestamp is >= ms (None when none)."""
    end = offsets.end
    if start.kind == "earliest":
        return Bounds(offsets.log_start_offset, end)
    if start.kind == "latest":
        return Bounds(end, end)
    if start.kind == "offset":
        if not offsets.log_start_offset <= start.value <= offsets.high_watermark:
            raise OffsetOutOfRangeError(
                f"offset {start.value} of topic {tp.topic!r} partition {tp.partition} is out of "
                f"range: valid offsets are [{offsets.log_start_offset}, "
                f"{offsets.high_watermark}] (log start offset, high watermark)"
            )
        return Bounds(start.value, end)
    found = find_offset(start.value)
    first = end if found is None else max(found, offsets.log_start_offset)
    return Bounds(min(first, end), end)


def bounds(reader: PartitionReader, start: StartAt, isolation: FetchIsolation) -> Bounds:
    """Resolve ``start`` for one partition of a log dir."""
    end = (
        reader.last_stable_offset
        if isolation is FetchIsolation.TXN_COMMITTED
        else reader.high_watermark
    )
    offsets = PartitionOffsets(reader.log_start_offset, reader.high_watermark, end)

    def find_offset(ms: int) -> int | None:
        found = reader.find_offset_by_timestamp(ms)
        return None if found is None else found.offset

    return resolve(reader.topic_partition, offsets, start, find_offset)


@dataclass(frozen=True)
class Fetched:
    """One fetch's records bytes and, read_committed, its aborted transactions
    ((producer id, first offset) pairs)."""

    records: bytes | memoryview
    aborted: list[tuple[int, int]] | None


def decode_fetches(
    fetch: Callable[[int], Fetched], tp: TopicPartition, b: Bounds, source: str
) -> Iterator[pa.RecordBatch]:
    """The records of ``[b.start, b.end)`` as Arrow batches, one ``fetch(offset)`` at a time
    (``source`` names where they come from in errors)."""
    offset = b.start
    while offset < b.end:
        fetched = fetch(offset)
        if not fetched.records:
            return
        decoded = decode(
            fetched.records,
            topic=tp.topic,
            partition=tp.partition,
            start_offset=offset,
            end_offset=b.end,
            include_headers=True,
            source=source,
            aborted_transactions=fetched.aborted,
        )
        yield from decoded.batches
        if decoded.next_offset <= offset:
            raise CommandError(
                f"topic {tp.topic!r} partition {tp.partition}: the fetch at offset {offset} "
                f"returned no complete batch ({len(fetched.records)} bytes) from {source}"
            )
        offset = decoded.next_offset
        del decoded, fetched  # released before the next decode: memory is one fetch's, not two


def read_partition(
    reader: PartitionReader, b: Bounds, isolation: FetchIsolation
) -> Iterator[pa.RecordBatch]:
    """The records of ``[b.start, b.end)`` of a log dir's partition, one fetch of at most
    ``FETCH_MAX_BYTES`` at a time."""

    def fetch(offset: int) -> Fetched:
        info = reader.fetch(offset, FETCH_MAX_BYTES, isolation)
        aborted = None
        if info.aborted_transactions is not None:
            aborted = [(a.producer_id, a.first_offset) for a in info.aborted_transactions]
        return Fetched(info.records, aborted)

    return decode_fetches(fetch, reader.topic_partition, b, str(reader.directory))


class RecordSource(Protocol):
    """Where ``consume`` reads a topic: a log dir, or brokers over the wire."""

    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions; UnknownTopicOrPartitionError naming the source if none."""
        ...

    @property
    def where(self) -> str:
        """Where the records are, for error messages ("in log dir D")."""
        ...

    def batches(
        self, tp: TopicPartition, start: StartAt, isolation: FetchIsolation
    ) -> Iterator[pa.RecordBatch]:
        """The partition's records from ``start`` to its end (a generator: closed early when
        ``--max-messages`` is reached)."""
        ...


class LogDirSource:
    """A log dir read directly (module docstring)."""

    def __init__(self, log_dir_path: Path, config: BrokerConfig) -> None:
        require_log_dir(log_dir_path)
        self.log_dir = LogDir(log_dir_path)
        self.config = config

    def partitions(self, topic: str) -> list[int]:
        return topic_partitions(self.log_dir, topic)

    @property
    def where(self) -> str:
        return f"in log dir {self.log_dir.path}"

    def batches(
        self, tp: TopicPartition, start: StartAt, isolation: FetchIsolation
    ) -> Iterator[pa.RecordBatch]:
        if not self.log_dir.partition_dir(tp).is_dir():
            return  # created in the topic file, directory not made yet: empty
        entry = TopicConfigFile(self.log_dir.path).read().get(tp.topic)
        topic_config = self.config.topic_defaults
        if entry is not None:
            topic_config = entry.log_config(self.config.topic_defaults, tp.topic)
        with self.log_dir.open_partition(
            tp, index_interval_bytes=topic_config.index_interval_bytes
        ) as reader:
            yield from read_partition(reader, bounds(reader, start, isolation), isolation)


def consume(
    log_dir_path: Path,
    config: BrokerConfig,
    topic: str,
    out: BinaryIO,
    err: TextIO,
    **options: Any,
) -> int:
    """Print the records of ``topic`` read from a log dir (see the module docstring); return 0.
    ``options``: those of :func:`print_records`."""
    validate_topic(topic)
    check_options(**options)
    return print_records(LogDirSource(log_dir_path, config), topic, out, err, **options)


def check_options(
    *,
    partition: int | None = None,
    start: StartAt = StartAt(),
    max_messages: int | None = None,
    output_format: str = "text",
    properties: Iterable[str] = (),
    **_: Any,
) -> None:
    """Usage errors (CommandError) before any source is opened."""
    _formatter(output_format, properties)
    if start.kind == "offset" and partition is None:
        raise CommandError("--offset needs --partition (an offset belongs to one partition)")
    if max_messages is not None and max_messages < 0:
        raise CommandError(f"--max-messages must be >= 0, not {max_messages}")


def _formatter(output_format: str, properties: Iterable[str]) -> TextFormatter | JsonFormatter:
    props = parse_assignments(properties, "--property")
    if output_format == "json":
        if props:
            raise CommandError("--property applies to --format text only")
        return JsonFormatter()
    return TextFormatter(props)


def print_records(
    source: RecordSource,
    topic: str,
    out: BinaryIO,
    err: TextIO,
    *,
    partition: int | None = None,
    start: StartAt = StartAt(),
    max_messages: int | None = None,
    isolation_level: str = "read_uncommitted",
    output_format: str = "text",
    properties: Iterable[str] = (),
) -> int:
    """Print the records of ``topic`` from ``source``; the summary goes to ``err``; return 0."""
    validate_topic(topic)
    check_options(
        partition=partition,
        start=start,
        max_messages=max_messages,
        output_format=output_format,
        properties=properties,
    )
    formatter = _formatter(output_format, properties)
    isolation = FetchIsolation.of(-1, IsolationLevel.parse(isolation_level))
    partitions = source.partitions(topic)
    if partition is not None:
        if partition not in partitions:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has no partition {partition} {source.where} "
                f"(partitions: {', '.join(map(str, partitions))})"
            )
        partitions = [partition]
    left = max_messages
    counts: dict[int, int] = {}
    for p in partitions:
        if left == 0:
            break
        counts[p] = 0
        with contextlib.closing(source.batches(TopicPartition(topic, p), start, isolation)) as it:
            for batch in it:
                if left is not None and batch.num_rows > left:
                    batch = batch.slice(0, left)
                for line in formatter.format(batch, p):
                    out.write(line)
                rows = batch.num_rows
                del batch  # released before the next fetch is decoded
                counts[p] += rows
                if left is not None:
                    left -= rows
                    if left == 0:
                        break
    out.flush()
    total = sum(counts.values())
    detail = ", ".join(f"partition {p}: {n}" for p, n in counts.items())
    err.write(f"Processed a total of {total} messages ({detail or 'no partitions read'})\n")
    return 0
