"""The ``kafkalog`` sink over the Kafka protocol: ``df.write.format("kafkalog")`` and
``df.writeStream.format("kafkalog")`` with the option ``kafka.bootstrap.servers`` (and no path)
produce the rows to a cluster (``kafkalog serve``, Apache Kafka, any Kafka-compatible broker)
with the project's wire client and an idempotent producer (acks=all).

Columns, their types and the errors naming a column of a wrong type are the log-dir writer's
(kafka_writer.py :func:`check_columns`), as is the placement of a row without a partition
(:class:`RowPlacer`: a keyed row where Kafka's default partitioner puts it, murmur2 of the key;
keyless rows round-robin per task) and the batches (the columnar encoder, Arrow columns straight
into record batches v2, no Python object per record; at most 1 MiB of records and the topic's
``max.message.bytes`` each). Every record is stamped with the task's wall-clock time
(CreateTime). Partition counts come from Metadata, the topic's ``max.message.bytes`` and
``cleanup.policy`` from DescribeConfigs (Kafka's defaults when the cluster does not answer it).

Options: ``kafka.bootstrap.servers`` (``host:port,...``, required here; with ``path`` too it is
an error that says to pick one), ``topic`` (as for a log dir), the client's settings
``kafka.client.id``, ``kafka.request.timeout.ms``, ``kafka.socket.connection.setup.timeout.ms``,
``kafka.retry.backoff.ms``, ``kafka.default.api.timeout.ms``. ``kafka.acks`` must be ``all`` or
``-1`` (an idempotent producer, as Kafka's producer requires); ``kafka.key.serializer`` and
``kafka.value.serializer`` are rejected with Spark's messages; ``kafka.security.protocol``,
``kafka.ssl.*`` and ``kafka.sasl.*`` go to the client as for the source; other ``kafka.*``
producer settings are accepted with a warning that they have no effect.

Guarantee: AT LEAST ONCE, as Spark's Kafka sink. Each task is one producer session (a producer
id of its own, a sequence per partition): within it a batch retried after a broken connection or
a moved leader is not appended twice (broker_embedded/client/idempotent_producer.py). But a task
Spark retries, and a micro-batch Spark runs again after a failure (the query restarted from its
checkpoint when the batch's offsets were logged and its commit was not), produces its rows again
under a new producer id: the topic then holds those rows twice. What a failed batch job produced
before it failed stays in the topic (Kafka has no undo; ``abort`` logs it). The log-dir sink
(kafka_writer.py, kafka_stream_writer.py) is exactly once; this one is not (Kafka transactions
per task with a commit on the driver would be needed: not done).

Limits: per task one connection per broker and one Produce request in flight; the client's
retries (``kafka.default.api.timeout.ms`` at most) then the error naming broker, topic and
partition fails the task. Picklable: the writers hold frozen options only. Thread safety: each
task builds its own client and producer.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Self

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from broker_embedded.client.idempotent_producer import IdempotentProducer
from broker_embedded.client.kafka_client import BrokerAddress, KafkaClient, UnsupportedVersionError
from broker_embedded.client.wire_fetch_source import WireSource
from broker_embedded.errors import KafkaApiError, UnknownTopicOrPartitionError
from broker_embedded.storage.log_config import LogConfig
from datasource.errors import InvalidOptionError
from datasource.kafka_source_options import (
    CLIENT_SETTINGS,
    is_security_option,
    security_properties,
)
from datasource.kafka_write_options import KafkaWriteOptions
from datasource.kafka_writer import RowPlacer, TopicLimits, check_columns

log = logging.getLogger(__name__)

BOOTSTRAP = "kafka.bootstrap.servers"
# Spark's messages (KafkaSourceProvider) for the producer settings its sink rejects
REJECTED = {
    "kafka.key.serializer": "Kafka option 'key.serializer' is not supported as keys are "
    "serialized with ByteArraySerializer.",
    "kafka.value.serializer": "Kafka option 'value.serializer' is not supported as value are "
    "serialized with ByteArraySerializer.",
}
_WARNED: set[str] = set()


@dataclass(frozen=True)
class WireWriteOptions:
    """``topic``: the topic of every row or None (the column); ``cluster``: where to produce,
    with the client's settings."""

    topic: str | None
    cluster: WireSource


def wire_write_options(options: Mapping[str, str]) -> WireWriteOptions | None:
    """The options of a write over the protocol; ``None`` without ``kafka.bootstrap.servers``
    (a log-dir write)."""
    raw = {str(k).strip().lower(): v for k, v in options.items()}
    bootstrap = raw.get(BOOTSTRAP)
    if bootstrap is None:
        return None
    path = (raw.get("path") or "").strip()
    if path:
        raise InvalidOptionError(
            f"options path={path!r} and {BOOTSTRAP}={bootstrap!r} are both given: pick one, a "
            "log dir to write into (path) or a cluster to produce to over the Kafka protocol "
            f"({BOOTSTRAP})"
        )
    try:
        BrokerAddress.parse_list(str(bootstrap))
    except ValueError as e:
        raise InvalidOptionError(
            f"option {BOOTSTRAP}={bootstrap!r} is invalid: {e} (expected host:port,host:port)"
        ) from None
    rest = {k: v for k, v in options.items() if not _is_kafka_or_path(str(k))}
    # topic and unknown options: checked as for a log dir (the path is only a placeholder)
    topic = KafkaWriteOptions.parse({**rest, "path": str(bootstrap)}).topic
    cluster = WireSource(str(bootstrap).strip())
    return WireWriteOptions(topic, replace(cluster, **_client_settings(raw)))


def _is_kafka_or_path(key: str) -> bool:
    lower = key.strip().lower()
    return lower.startswith("kafka.") or lower == "path"


def _client_settings(raw: dict[str, str]) -> dict[str, object]:
    """The wire client's settings among the ``kafka.*`` options (module docstring); the
    security ones as the source takes them (kafka_source_options.security_properties)."""
    out: dict[str, object] = {"security": security_properties(raw)}
    for key, value in sorted(raw.items()):
        if key in REJECTED:
            raise InvalidOptionError(REJECTED[key])
        if key == "kafka.acks" and str(value).strip().lower() not in ("all", "-1"):
            raise InvalidOptionError(
                f"option kafka.acks={value!r} is not supported: kafkalog produces with an "
                "idempotent producer, which needs acks=all (as Kafka's producer)"
            )
        if is_security_option(key):
            continue  # security_properties, below
        if key in CLIENT_SETTINGS:
            out[CLIENT_SETTINGS[key]] = value if key == "kafka.client.id" else _ms(key, value)
        elif key.startswith("kafka.") and key not in (BOOTSTRAP, "kafka.acks"):
            if key not in _WARNED:
                _WARNED.add(key)
                log.warning("option %s=%r has no effect (kafkalog's producer does not use it)",
                            key, value)  # fmt: skip
    return out


def _ms(key: str, value: str) -> int:
    text = str(value).strip()
    if not text.isdigit() or not 0 < int(text) < 1 << 31:
        raise InvalidOptionError(f"option {key}={value!r} must be a positive integer (ms)")
    return int(text)


class ClusterTopics(Mapping[str, TopicLimits]):
    """The limits of the cluster's topics, asked when first needed (Metadata, DescribeConfigs)
    and kept for the task; an unknown topic is missing (``get`` gives None)."""

    def __init__(self, client: KafkaClient) -> None:
        self.client = client
        self._known: dict[str, TopicLimits | None] = {}

    def __getitem__(self, name: str) -> TopicLimits:
        if name not in self._known:
            self._known[name] = self._ask(name)
        limits = self._known[name]
        if limits is None:
            raise KeyError(name)
        return limits

    def __iter__(self) -> Iterator[str]:
        return (n for n, v in self._known.items() if v is not None)

    def __len__(self) -> int:
        return sum(v is not None for v in self._known.values())

    def _ask(self, name: str) -> TopicLimits | None:
        try:
            partitions = len(self.client.topic(name).partitions)
        except UnknownTopicOrPartitionError:
            return None
        defaults = LogConfig()
        max_bytes, compact = defaults.max_message_bytes, defaults.compact
        try:
            configs = {c.name: c.value for c in self.client.topic_configs(name)}
        except (KafkaApiError, UnsupportedVersionError):
            configs = {}  # a cluster without DescribeConfigs: Kafka's defaults
        if configs.get("max.message.bytes"):
            max_bytes = int(configs["max.message.bytes"])
        if configs.get("cleanup.policy") is not None:
            compact = "compact" in configs["cleanup.policy"].split(",")
        return TopicLimits(partitions, max_bytes, compact)


def unknown_topic(cluster: WireSource, name: str) -> UnknownTopicOrPartitionError:
    return UnknownTopicOrPartitionError(
        f"topic {name!r} does not exist in {cluster.location}; create it first (e.g. kafkalog "
        f"topics create {name} --bootstrap-server {cluster.bootstrap} --partitions <n>)"
    )


def check_wire_write(options: WireWriteOptions, schema: StructType) -> None:
    """The driver's checks before any task runs: the columns, and the option topic exists."""
    check_columns(schema, options.topic)
    if options.topic is None:
        return
    with KafkaClient(options.cluster.bootstrap, options.cluster.client_config()) as client:
        if ClusterTopics(client).get(options.topic) is None:
            raise unknown_topic(options.cluster, options.topic)


@dataclass(frozen=True)
class WireCommitMessage(WriterCommitMessage):
    """What one task produced: ``(topic, partition, records)`` sorted, and its producer id."""

    produced: tuple[tuple[str, int, int], ...]
    producer_id: int


def produce_task(
    options: WireWriteOptions, iterator: Iterator[pa.RecordBatch]
) -> WireCommitMessage:
    """One task's work: place, encode and produce every Arrow batch of ``iterator`` with one
    idempotent producer; raises the first error (what was produced before it stays)."""
    cluster = options.cluster
    counts: Counter[tuple[str, int]] = Counter()
    with KafkaClient(cluster.bootstrap, cluster.client_config()) as client:
        producer = IdempotentProducer(client, timeout_ms=cluster.request_timeout_ms)
        placer = RowPlacer(options.topic, ClusterTopics(client),
                           lambda name: unknown_topic(cluster, name))  # fmt: skip
        for batch in iterator:
            now = int(time.time() * 1000)
            for g in placer.groups(batch):
                enc = g.encode(now, **producer.fields(g.topic, g.partition))
                producer.send(g.topic, g.partition, enc)
                counts[(g.topic, g.partition)] += g.rows
    produced = tuple(sorted((t, p, n) for (t, p), n in counts.items()))
    return WireCommitMessage(produced, producer.producer_id)


def _total(messages: Sequence[WireCommitMessage | None]) -> int:
    return sum(n for m in messages if m is not None for _, _, n in m.produced)


class _ProducingWriter:
    """What the batch and the streaming writer share: the options, the driver's checks in
    :meth:`create`, and tasks that produce."""

    def __init__(self, options: WireWriteOptions) -> None:
        self.options = options

    @classmethod
    def create(cls, options: WireWriteOptions, schema: StructType) -> Self:
        check_wire_write(options, schema)
        return cls(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WireCommitMessage:
        return produce_task(self.options, iterator)


class WireWriter(_ProducingWriter, DataSourceArrowWriter):
    """``df.write`` over the protocol (module docstring): tasks produce, the driver logs."""

    def commit(self, messages: Sequence[WireCommitMessage | None]) -> None:
        log.info("write produced %d records to %s", _total(messages), self.options.cluster.location)

    def abort(self, messages: Sequence[WireCommitMessage | None]) -> None:
        log.warning("write failed; the %d records its finished tasks produced to %s stay there",
                    _total(messages), self.options.cluster.location)  # fmt: skip


class WireStreamWriter(_ProducingWriter, DataSourceStreamArrowWriter):
    """``df.writeStream`` over the protocol, at least once (module docstring)."""

    def commit(self, messages: Sequence[WireCommitMessage | None], batchId: int) -> None:  # noqa: N803
        log.info("micro-batch %d produced %d records to %s", batchId, _total(messages),
                 self.options.cluster.location)  # fmt: skip

    def abort(self, messages: Sequence[WireCommitMessage | None], batchId: int) -> None:  # noqa: N803
        log.warning("micro-batch %d failed; the %d records its finished tasks produced to %s "
                    "stay there (at least once)", batchId, _total(messages),
                    self.options.cluster.location)  # fmt: skip
