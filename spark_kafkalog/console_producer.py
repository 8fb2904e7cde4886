"""``kafkalog produce``: lines from stdin to a topic (Kafka's ``kafka-console-producer``).

Input: stdin as bytes, one record a line; the line's trailing ``\\n`` is stripped (only it: a
``\\r`` before it stays part of the value); every line must be valid UTF-8 (an error names the
line number). With a key separator SEP, the key is the text before the first SEP and the value the
text after it; a line without SEP is an error naming its line number (lines before it have been
produced by then, as with Kafka's tool). Without one, records have no key (null). Every record
gets the ``--header k=v`` headers, in the order given, and the producer's clock as CreateTime.

Placement (``--partition`` puts every record in that partition), otherwise as Kafka's producer:

- a keyed record goes where Kafka's default partitioner puts it
  (broker_embedded/client/default_partitioner.py: murmur2 of the key bytes, sign bit cleared,
  modulo the partition count);
- keyless records go round-robin over the partitions, the first to partition 0, one record at a
  time (Kafka's ``RoundRobinPartitioner``; not the sticky partitioner of Kafka's default, which
  fills one batch per partition at a time: round-robin makes placement reproducible from the
  input alone, which is what a console tool is used for in scripts and tests).

Batching: records are buffered per partition and sent as one record batch v2 (``--compression``
codec) when a partition holds ``--batch-size`` records, or earlier when one more record would
make the batch's uncompressed size exceed the topic's ``max.message.bytes``; what is left is sent
at the end of the input. Each batch is one produce with ``--acks`` to a :class:`ProduceTarget`:
an embedded broker on ``--log-dir`` (:class:`BrokerTarget`) or a Produce request to the
partition's leader with ``--bootstrap-server`` (spark_kafkalog/bootstrap_server.py; with
``--acks 0`` no response comes, so the summary's offsets are -1). A batch the broker refuses
stops the command with the broker's error and the line numbers of the batch.

Prints to stderr at the end (also after an error, for what went in before it): records and
batches sent and per partition the offset range written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol, TextIO

from broker_embedded.broker import Broker, parse_acks
from broker_embedded.client.default_partitioner import partition_for_key
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.errors import KafkaApiError, UnknownTopicOrPartitionError
from broker_embedded.record.compression import CompressionType
from broker_embedded.record.record_batch import RECORD_BATCH_OVERHEAD
from broker_embedded.storage.topic_partition import validate_topic
from spark_kafkalog.topics_command import CommandError

# A record's framing beyond its key, value and headers: length, attributes, timestamp and offset
# deltas, key and value lengths, header count (varints, at most 5 or 10 bytes each).
_RECORD_FRAMING_BYTES = 40
_HEADER_FRAMING_BYTES = 10


class ProduceTarget(Protocol):
    """Where the console producer sends its batches."""

    def partition_count(self, topic: str) -> int: ...

    def max_message_bytes(self, topic: str) -> int: ...

    def produce(
        self,
        topic: str,
        partition: int,
        records: list[ProducerRecord],
        acks: int,
        compression: CompressionType,
    ) -> tuple[int, int]:
        """One record batch of ``records``; (first offset, last offset) written, -1 unknown."""
        ...


@dataclass(frozen=True)
class BrokerTarget:
    """An embedded broker (``--log-dir``)."""

    broker: Broker

    def partition_count(self, topic: str) -> int:
        return len(self.broker.describe_topic(topic).partitions)

    def max_message_bytes(self, topic: str) -> int:
        return int(self.broker.topic_config(topic)["max.message.bytes"])

    def produce(
        self,
        topic: str,
        partition: int,
        records: list[ProducerRecord],
        acks: int,
        compression: CompressionType,
    ) -> tuple[int, int]:
        result = self.broker.produce(topic, partition, records, acks=acks, compression=compression)
        return result.base_offset, result.last_offset


@dataclass
class PartitionSummary:
    records: int = 0
    batches: int = 0
    first_offset: int = -1
    last_offset: int = -1


@dataclass
class ProduceSummary:
    topic: str
    partitions: dict[int, PartitionSummary] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions.values())

    @property
    def batches(self) -> int:
        return sum(p.batches for p in self.partitions.values())

    def describe(self) -> str:
        lines = [
            f"Produced {_count(self.records, 'record')} in {_count(self.batches, 'batch')} to "
            f"topic {self.topic!r}" + (":" if self.partitions else ".")
        ]
        for p, s in sorted(self.partitions.items()):
            lines.append(
                f"  partition {p}: {_count(s.records, 'record')} in {_count(s.batches, 'batch')}"
                f", offsets {s.first_offset}..{s.last_offset}"
            )
        return "\n".join(lines) + "\n"


def _count(n: int, noun: str) -> str:
    if n == 1:
        return f"1 {noun}"
    return f"{n} {noun}es" if noun.endswith("ch") else f"{n} {noun}s"


@dataclass
class _Pending:
    """Records buffered for one partition and the input lines they came from."""

    records: list[ProducerRecord] = field(default_factory=list)
    first_line: int = 0
    last_line: int = 0
    size: int = RECORD_BATCH_OVERHEAD


def _record_size(r: ProducerRecord, headers_size: int) -> int:
    return _RECORD_FRAMING_BYTES + len(r.key or b"") + len(r.value or b"") + headers_size


def read_lines(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line without its trailing newline), each checked to be UTF-8."""
    for number, line in enumerate(stream, 1):
        if line.endswith(b"\n"):
            line = line[:-1]
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CommandError(f"line {number} of the input is not valid UTF-8: {e}") from None
        yield number, line


class ConsoleProducer:
    """Splits lines into records, places and batches them, and produces the batches."""

    def __init__(
        self,
        target: ProduceTarget,
        topic: str,
        *,
        partition: int | None = None,
        key_separator: str | None = None,
        headers: Iterable[tuple[str, str]] = (),
        acks: str = "all",
        compression: str = "none",
        batch_size: int = 200,
    ) -> None:
        validate_topic(topic)
        if batch_size < 1:
            raise CommandError(f"--batch-size must be at least 1, not {batch_size}")
        if key_separator == "":
            raise CommandError("--key-separator must not be empty")
        self.target = target
        self.topic = topic
        self.num_partitions = target.partition_count(topic)
        if partition is not None and not 0 <= partition < self.num_partitions:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has no partition {partition} (partitions 0.."
                f"{self.num_partitions - 1})"
            )
        self.partition = partition
        self.separator = None if key_separator is None else key_separator.encode("utf-8")
        self.headers = tuple((k, v.encode("utf-8")) for k, v in headers)
        self.headers_size = sum(
            _HEADER_FRAMING_BYTES + len(k.encode("utf-8")) + len(v) for k, v in self.headers
        )
        self.acks = parse_acks(acks)
        self.compression = CompressionType.parse(compression)
        self.batch_size = batch_size
        self.max_batch_bytes = target.max_message_bytes(topic)
        self.summary = ProduceSummary(topic)
        self._pending: dict[int, _Pending] = {}
        self._next_keyless = 0

    def _place(self, key: bytes | None) -> int:
        if self.partition is not None:
            return self.partition
        if key is not None:
            return partition_for_key(key, self.num_partitions)
        p = self._next_keyless % self.num_partitions
        self._next_keyless += 1
        return p

    def _record(self, number: int, line: bytes) -> ProducerRecord:
        if self.separator is None:
            return ProducerRecord(line, None, self.headers)
        key, sep, value = line.partition(self.separator)
        if not sep:
            raise CommandError(
                f"line {number} has no key separator {self.separator.decode('utf-8')!r}"
            )
        return ProducerRecord(value, key, self.headers)

    def add(self, number: int, line: bytes) -> None:
        record = self._record(number, line)
        p = self._place(record.key)
        pending = self._pending.get(p)
        size = _record_size(record, self.headers_size)
        if pending is not None and pending.size + size > self.max_batch_bytes:
            self._send(p)
            pending = None
        if pending is None:
            pending = self._pending[p] = _Pending(first_line=number)
        pending.records.append(record)
        pending.last_line = number
        pending.size += size
        if len(pending.records) >= self.batch_size:
            self._send(p)

    def _send(self, p: int) -> None:
        pending = self._pending.pop(p)
        try:
            first, last = self.target.produce(
                self.topic, p, pending.records, self.acks, self.compression
            )
        except KafkaApiError as e:
            raise type(e)(
                f"producing lines {pending.first_line}..{pending.last_line} to topic "
                f"{self.topic!r} partition {p} failed: {e}"
            ) from None
        s = self.summary.partitions.setdefault(p, PartitionSummary())
        s.records += len(pending.records)
        s.batches += 1
        if s.first_offset < 0:
            s.first_offset = first
        s.last_offset = last

    def flush(self) -> None:
        for p in sorted(self._pending):
            self._send(p)

    def produce(self, lines: Iterable[tuple[int, bytes]]) -> ProduceSummary:
        """Produce every line; a bad input line first sends the lines before it, then raises."""
        try:
            for number, line in lines:
                self.add(number, line)
        except CommandError:
            self.flush()
            raise
        self.flush()
        return self.summary


def run(
    target: ProduceTarget,
    topic: str,
    stdin: BinaryIO,
    err: TextIO,
    *,
    partition: int | None = None,
    key_separator: str | None = None,
    headers: Iterable[tuple[str, str]] = (),
    acks: str = "all",
    compression: str = "none",
    batch_size: int = 200,
) -> int:
    """Produce stdin's lines; the summary goes to ``err`` (also when an error stops it)."""
    producer = ConsoleProducer(
        target,
        topic,
        partition=partition,
        key_separator=key_separator,
        headers=headers,
        acks=acks,
        compression=compression,
        batch_size=batch_size,
    )
    try:
        producer.produce(read_lines(stdin))
    finally:
        err.write(producer.summary.describe())
    return 0
