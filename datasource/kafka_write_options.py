"""The options of a ``kafkalog`` write (``df.write.format("kafkalog")``), parsed once into a frozen
:class:`KafkaWriteOptions`.

Options (Spark lower-cases the keys; names here ignore case; values are strings):

``path`` (required)
    The log dir: ``save("/data/kafka-logs")`` or ``.option("path", ...)``. The driver and every
    executor must see it at the same path: tasks stage their batches inside it.
``topic`` (optional)
    The topic of every row; it overrides the column ``topic`` (Spark's Kafka sink rule). Without
    it the DataFrame needs a ``topic`` column. Trimmed as Spark trims it (Java's ``String.trim``:
    the characters up to U+0020, spaces and control characters, at both ends); the column's
    values are not trimmed, as in Spark.

``transactionalIdPrefix`` (writes over the Kafka protocol only)
    Turns on exactly once over the protocol (wire_writer.py): each task produces in a Kafka
    transaction with transactional id ``<prefix>-<partition id>``, committed by the driver. It
    must be stable across restarts of a query and unique among the writes running at one time.
    At most :data:`MAX_PREFIX_CHARS` characters, not blank; given for a log-dir write, it is an
    error saying that the log-dir sink is exactly once without it.

Kafka producer settings (``kafka.*``, which Spark's Kafka sink hands to its producer) are
accepted on a log-dir write, so that a job moving between ``format("kafka")`` and
``format("kafkalog")`` keeps its options; the records go straight into the log dir, not through
a producer, so none changes the write:

- ``kafka.acks`` must be one of Kafka's values (``all``, ``-1``, ``0``, ``1``; otherwise an
  error naming it, as Kafka's producer refuses it). Whatever the value, the write is as durable
  as ``acks=all`` and more: the job's commit fsyncs every log it touched before it publishes the
  new high watermarks (broker_embedded/storage/staged_write.py), and nothing is visible before.
- ``kafka.key.serializer`` and ``kafka.value.serializer``: rejected with Spark's messages.
- any other ``kafka.*`` (``linger.ms``, ``batch.size``, ``compression.type``, ...): accepted
  with a logged note, once per option and process, that it has no effect on a log-dir write.

Anything else is rejected with an :class:`InvalidOptionError` naming it. Immutable and
picklable: it travels inside the writer to the executors.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from broker_embedded.errors import InvalidTopicError
from broker_embedded.storage.topic_partition import validate_topic
from datasource.errors import InvalidOptionError

log = logging.getLogger(__name__)

OPTION_NAMES = {"path": "path", "topic": "topic"}
ACKS = ("all", "-1", "0", "1")  # Kafka's producer's acks values
# Spark's messages (KafkaSourceProvider) for the producer settings its sink rejects
REJECTED = {
    "kafka.key.serializer": "Kafka option 'key.serializer' is not supported as keys are "
    "serialized with ByteArraySerializer.",
    "kafka.value.serializer": "Kafka option 'value.serializer' is not supported as value are "
    "serialized with ByteArraySerializer.",
}
_NOTED: set[str] = set()
PREFIX = "transactionalIdPrefix"
MAX_PREFIX_CHARS = 200  # the transactional ids and group ids made from it stay short
JAVA_TRIMMED = "".join(map(chr, range(0x21)))  # what Java's String.trim removes: <= U+0020


@dataclass(frozen=True)
class KafkaWriteOptions:
    """``path``: the log dir; ``topic``: the topic of every row, or ``None`` (the column);
    ``transactional_id_prefix``: ``transactionalIdPrefix`` (over the protocol), or ``None``."""

    path: str
    topic: str | None = None
    transactional_id_prefix: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, over_protocol: bool = False) -> KafkaWriteOptions:
        """``over_protocol``: a write to ``kafka.bootstrap.servers`` (``path`` a placeholder),
        which takes ``transactionalIdPrefix``."""
        raw: dict[str, str] = {}
        known = {**OPTION_NAMES, PREFIX.lower(): PREFIX} if over_protocol else OPTION_NAMES
        for key, value in options.items():
            lower = str(key).strip().lower()
            if lower in raw:
                raise InvalidOptionError(f"option {key} is given twice (option names ignore case)")
            if lower == PREFIX.lower() and not over_protocol:
                raise InvalidOptionError(
                    f"option {key}={value!r} is for writes over the Kafka protocol (option "
                    "kafka.bootstrap.servers); a write into a log dir is exactly once without it"
                )
            if value is None:
                raise InvalidOptionError(f"option {key} has no value")
            if lower.startswith("kafka.") and not over_protocol:
                _producer_setting(lower, str(value))
                continue
            if lower not in known:
                raise InvalidOptionError(_unknown(str(key), value, known.values()))
            raw[lower] = str(value)
        path = raw.get("path", "").strip()
        if not path:
            raise InvalidOptionError(
                "option path (the log dir to write to) is required: "
                'df.write.format("kafkalog").save("/path/to/log-dir")'
            )
        topic = raw.get("topic")
        if topic is not None:
            topic = topic.strip(JAVA_TRIMMED)  # as Spark's Kafka sink: the option's value .trim
            try:
                validate_topic(topic)
            except InvalidTopicError as e:
                raise InvalidOptionError(f"option topic={topic!r}: {e}") from None
        return cls(path, topic, _prefix(raw.get(PREFIX.lower())))


def _prefix(value: str | None) -> str | None:
    if value is None:
        return None
    if not value.strip() or len(value) > MAX_PREFIX_CHARS:
        raise InvalidOptionError(
            f"option {PREFIX}={value!r} must be a non-blank string of at most {MAX_PREFIX_CHARS} "
            "characters (stable per query: the transactional ids are <prefix>-<partition id>)"
        )
    return value


def _producer_setting(key: str, value: str) -> None:
    """A Kafka producer setting given to a log-dir write (module docstring): checked, noted."""
    if key in REJECTED:
        raise InvalidOptionError(REJECTED[key])
    if key == "kafka.acks":
        if value.strip().lower() not in ACKS:
            raise InvalidOptionError(
                f"option kafka.acks={value!r} is not one of Kafka's acks values: " + ", ".join(ACKS)
            )
        return  # a log-dir write is fsynced before it is published: acks=all and more
    if key not in _NOTED:
        _NOTED.add(key)
        log.warning(
            "option %s=%r has no effect on a write into a log dir: the records go straight "
            "into the log's segments, not through a Kafka producer",
            key,
            value,
        )


def _unknown(key: str, value: object, names: Iterable[str]) -> str:
    return (
        f"unknown option {key}={value!r} for writing with the kafkalog source; the options are: "
        + ", ".join(names)
    )
