"""An idempotent producer over the wire (Kafka's ``KafkaProducer`` with ``enable.idempotence``,
reduced to one batch in flight per request): a producer id from InitProducerId, a sequence per
partition, every batch produced with acks=all.

Use: ``fields(topic, partition)`` gives the producer fields of the next batches of that partition
(``producer_id``, ``producer_epoch``, ``base_sequence``: keyword arguments of
``columnar_encoder.encode_batches``), the caller encodes its rows with them, and
``send(topic, partition, encoded)`` produces the encoded batches in order, one Produce request
each, and advances the partition's sequence by their record count.

Invariant: the batches of a partition carry consecutive sequences from 0 (batch ``i``'s
baseSequence is the partition's sequence before it plus the records before it, wrapped past
2^31 - 1 to 0 as Kafka does), so the leader appends them in order, once each. A Produce whose
connection broke, or whose leader moved, is sent again with the SAME bytes (the client's
bounded retries, kafka_client.py): if the first attempt was appended, the leader recognises the
producer id, epoch and sequence and answers with the first append's offset (Kafka keeps the
last five batches of a producer for that); nothing is appended twice. What this does not cover,
as in Kafka: a process that restarts gets a new producer id, and what it sends again is new to
the broker (a Spark task retried writes its rows again: at least once).

Limits: a batch holds what the encoder put in it (the caller keeps it within the topic's
``max.message.bytes``); the retries are the client's (``retries``, ``retry_timeout_s``), after
which the error (naming the broker, topic and partition) is raised and the producer must not be
used for that partition again: its sequence is no longer known to match the leader's (the
sequence is advanced only after every batch of a ``send`` was acknowledged).

Not thread-safe: one producer per thread (as its client).
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_embedded.client.kafka_client import KafkaClient
from broker_embedded.errors import KafkaLogError
from broker_embedded.record.columnar_encoder import EncodedBatches

ACKS_ALL = -1
_SEQUENCE_MODULUS = 1 << 31


class ProducerStateError(KafkaLogError):
    """A ``send`` whose batches do not carry the sequence the partition expects next, or to a
    partition whose earlier ``send`` failed."""


@dataclass(frozen=True, slots=True)
class ProduceAck:
    """What the leader acknowledged for one ``send``: the first and last offsets appended."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    records: int


class IdempotentProducer:
    """See the module docstring. ``client`` stays the caller's (not closed here)."""

    transactional_id: str | None = None  # a transactional producer's (wire_transactions.py)

    def __init__(self, client: KafkaClient, *, timeout_ms: int = 30_000) -> None:
        self.client = client
        self.timeout_ms = timeout_ms
        self.producer_id, self.producer_epoch = self._init_producer_id()
        self._sequences: dict[tuple[str, int], int] = {}
        self._broken: set[tuple[str, int]] = set()

    def _init_producer_id(self) -> tuple[int, int]:
        return self.client.init_producer_id()

    def fields(self, topic: str, partition: int) -> dict[str, int]:
        """The producer fields for the next batches of ``topic``/``partition``."""
        return {
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "base_sequence": self._sequences.get((topic, partition), 0),
        }

    def send(self, topic: str, partition: int, encoded: EncodedBatches) -> ProduceAck | None:
        """Produce every batch of ``encoded`` (made with :meth:`fields`) to ``topic``/
        ``partition`` with acks=all, in order; ``None`` when it holds no batch."""
        tp = (topic, partition)
        expected = self._sequences.get(tp, 0)
        if tp in self._broken:
            raise ProducerStateError(
                f"producer {self.producer_id}: an earlier produce to topic {topic!r} partition "
                f"{partition} failed; its sequence is unknown, produce with a new producer"
            )
        first = (encoded.next_sequence - encoded.num_rows) % _SEQUENCE_MODULUS
        if encoded.num_rows and first != expected:
            raise ProducerStateError(
                f"producer {self.producer_id}: batches for topic {topic!r} partition {partition} "
                f"start at sequence {first}, expected {expected} (encode with fields())"
            )
        if len(encoded) == 0:
            return None
        base = last = -1
        try:
            for i in range(len(encoded)):
                offset = self.client.produce(
                    topic,
                    partition,
                    bytes(encoded[i]),
                    acks=ACKS_ALL,
                    timeout_ms=self.timeout_ms,
                    transactional_id=self.transactional_id,
                )
                rows = int(encoded.first_rows[i + 1] - encoded.first_rows[i])
                base = offset if base < 0 else base
                last = offset + rows - 1
        except BaseException:
            self._broken.add(tp)
            raise
        self._sequences[tp] = encoded.next_sequence
        return ProduceAck(topic, partition, base, last, encoded.num_rows)
