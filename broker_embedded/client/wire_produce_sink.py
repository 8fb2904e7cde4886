"""The :class:`ProduceSink` of a Kafka cluster, written over the wire: :class:`WireSink`.

Opened from the cluster's :class:`~broker_embedded.client.wire_fetch_source.WireSource` (the
bootstrap addresses and the client's settings, what the read side opens its source from), over
one :class:`~broker_embedded.client.kafka_client.KafkaClient`, closed with the sink:

- ``topic_limits``: the partition count from Metadata, ``max.message.bytes`` and
  ``cleanup.policy`` from DescribeConfigs (Kafka's defaults, log_config.py, when the cluster
  does not answer it), asked at a topic's first use and kept for the sink's life
  (:class:`ClusterTopics`);
- appenders (:class:`ProducerAppender`), one per task: :meth:`WireSink.producer`, an idempotent
  producer (idempotent_producer.py: a producer id of its own, a sequence per partition, acks=all;
  a batch retried after a broken connection or a moved leader is not appended twice), whose
  batches are visible as they are produced; or :meth:`WireSink.transactional_producer`, the same
  inside a Kafka transaction of a transactional id (wire_transactions.py: InitProducerId fences
  earlier instances of the id and aborts what they left open), which the appender leaves open
  (its :attr:`~ProducerAppender.handle`) for :meth:`WireSink.end_transaction` to end from the
  driver, with any connection;
- :meth:`WireSink.committed_offset`: a group's committed offset once no transaction holding one
  is pending (OffsetFetch ``require_stable``), for a task to tell whether its micro-batch was
  committed before a crash.

Errors name the cluster, topic and partition (the client's). Thread safety: a sink, its client
and its appenders are used by one thread.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from broker_embedded.client.broker_connection import UnsupportedVersionError
from broker_embedded.client.idempotent_producer import IdempotentProducer
from broker_embedded.client.kafka_client import KafkaClient
from broker_embedded.client.wire_fetch_source import WireSource
from broker_embedded.client.wire_transactions import (
    TransactionalWireProducer,
    TxnHandle,
    committed_offset,
    end_txn,
)
from broker_embedded.errors import KafkaApiError, UnknownTopicOrPartitionError
from broker_embedded.storage.log_config import LogConfig
from broker_embedded.storage.produce_sink import TopicLimits

if TYPE_CHECKING:
    from broker_embedded.record.columnar_encoder import EncodedBatches

__all__ = ["ClusterTopics", "ProducerAppender", "TxnHandle", "WireSink"]


class ClusterTopics(Mapping[str, TopicLimits]):
    """The limits of the cluster's topics, asked when first needed (Metadata, DescribeConfigs)
    and kept; an unknown topic is missing (``get`` gives None)."""

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


class ProducerAppender:
    """One task's producer (module docstring); counts the records it produced per partition."""

    def __init__(self, producer: IdempotentProducer) -> None:
        self._producer = producer
        self._counts: Counter[tuple[str, int]] = Counter()

    @property
    def producer_id(self) -> int:
        return self._producer.producer_id

    @property
    def handle(self) -> TxnHandle | None:
        """The open transaction (a transactional producer), else None."""
        if isinstance(self._producer, TransactionalWireProducer):
            return self._producer.handle
        return None

    def producer_fields(self, topic: str, partition: int) -> Mapping[str, int]:
        return self._producer.fields(topic, partition)

    def append(
        self, topic: str, partition: int, encoded: EncodedBatches, *, null_keys: int = 0
    ) -> None:
        self._producer.send(topic, partition, encoded)
        self._counts[(topic, partition)] += encoded.num_rows

    def commit_offset(self, group_id: str, topic: str, partition: int, offset: int) -> None:
        """``group_id``'s commit of ``offset`` for ``topic``/``partition``, in the transaction
        (a transactional producer only)."""
        if not isinstance(self._producer, TransactionalWireProducer):
            raise TypeError("an offset commit in a transaction needs a transactional producer")
        self._producer.commit_offset(group_id, topic, partition, offset)

    def produced(self) -> tuple[tuple[str, int, int], ...]:
        """``(topic, partition, records)`` of every partition produced to, sorted."""
        return tuple(sorted((t, p, n) for (t, p), n in self._counts.items()))


class WireSink:
    """Writes the cluster ``cluster`` names (module docstring); a context manager."""

    def __init__(self, cluster: WireSource) -> None:
        self.cluster = cluster
        self.client = cluster.connect()
        self.topics = ClusterTopics(self.client)

    def __enter__(self) -> WireSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()

    @property
    def location(self) -> str:
        return self.cluster.location

    def topic_limits(self, topic: str) -> TopicLimits | None:
        return self.topics.get(topic)

    def producer(self) -> ProducerAppender:
        """A task's idempotent producer (a new producer id)."""
        timeout = self.cluster.request_timeout_ms
        return ProducerAppender(IdempotentProducer(self.client, timeout_ms=timeout))

    def transactional_producer(
        self, transactional_id: str, transaction_timeout_ms: int
    ) -> ProducerAppender:
        """A task's producer in a transaction of ``transactional_id`` (fences earlier ones)."""
        producer = TransactionalWireProducer(
            self.client,
            transactional_id,
            timeout_ms=self.cluster.request_timeout_ms,
            transaction_timeout_ms=transaction_timeout_ms,
        )
        return ProducerAppender(producer)

    def committed_offset(self, group_id: str, topic: str, partition: int) -> int:
        """``group_id``'s stable committed offset of ``topic``/``partition``, -1 for none."""
        return committed_offset(self.client, group_id, topic, partition)

    def end_transaction(self, handle: TxnHandle, *, commit: bool) -> None:
        """EndTxn COMMIT or ABORT of ``handle``'s transaction."""
        end_txn(self.client, handle, commit=commit)
