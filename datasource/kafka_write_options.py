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

Anything else is rejected with an :class:`InvalidOptionError` naming it, including Kafka
producer settings (``kafka.*``): the records go straight into the log dir, not through a
producer. Immutable and picklable: it travels inside the writer to the executors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from broker_embedded.errors import InvalidTopicError
from broker_embedded.storage.topic_partition import validate_topic
from datasource.errors import InvalidOptionError

OPTION_NAMES = {"path": "path", "topic": "topic"}
JAVA_TRIMMED = "".join(map(chr, range(0x21)))  # what Java's String.trim removes: <= U+0020


@dataclass(frozen=True)
class KafkaWriteOptions:
    """``path``: the log dir; ``topic``: the topic of every row, or ``None`` (the column)."""

    path: str
    topic: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KafkaWriteOptions:
        raw: dict[str, str] = {}
        for key, value in options.items():
            lower = str(key).strip().lower()
            if lower in raw:
                raise InvalidOptionError(f"option {key} is given twice (option names ignore case)")
            if lower not in OPTION_NAMES:
                raise InvalidOptionError(_unknown(str(key), value))
            if value is None:
                raise InvalidOptionError(f"option {key} has no value")
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
        return cls(path, topic)


def _unknown(key: str, value: object) -> str:
    if key.lower().startswith("kafka."):
        return (
            f"option {key}={value!r} is not supported: kafkalog writes straight into the log dir "
            "of option path, not through a Kafka producer, so it takes no kafka.* settings"
        )
    return (
        f"unknown option {key}={value!r} for writing with the kafkalog source; the options are: "
        "path, topic"
    )
