"""A topic partition and its directory name (Kafka's ``TopicPartition`` and topic ``Topic`` rules).

Layout: a partition's directory inside a log dir is named ``<topic>-<partition>``, the partition
in decimal. Topic names use only ``[a-zA-Z0-9._-]``, are 1 to 249 characters long and are neither
``.`` nor ``..``; so a topic name can never hold a path separator or climb out of a log dir, and
a directory name splits at its LAST ``-`` (topics may contain ``-``; partitions never do).

Directories that Kafka names ``<topic>-<partition>.<uuid>-delete``, ``...-future`` or
``...-stray`` (being deleted, future replicas, stray logs) do not parse as partition directories:
their text after the last ``-`` is not a number.

Two topics whose names differ only in ``.`` against ``_`` collide (their metric names are the
same): as Kafka does, :func:`check_no_collision` refuses the second one's creation.

Invariants: a :class:`TopicPartition` always holds a valid topic and a partition in
``[0, 2**31 - 1]``. Immutable values: thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from broker_embedded.errors import InvalidTopicError

MAX_TOPIC_LENGTH = 249
MAX_PARTITION = (1 << 31) - 1
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_PARTITION = re.compile(r"[0-9]+")


def validate_topic(topic: str) -> str:
    """Return ``topic`` if Kafka accepts it as a topic name, else :class:`InvalidTopicError`."""
    if not isinstance(topic, str):
        raise InvalidTopicError(f"topic name {topic!r} is not a string")
    if not topic:
        raise InvalidTopicError("topic name '' is illegal: it is empty")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name {topic!r} is illegal: it cannot be '.' or '..'")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(
            f"topic name {topic!r} is illegal: {len(topic)} characters, "
            f"the maximum is {MAX_TOPIC_LENGTH}"
        )
    if not _LEGAL_TOPIC.fullmatch(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} is illegal: it may contain only ASCII letters, digits, "
            "'.', '_' and '-'"
        )
    return topic


def unified_collision_chars(topic: str) -> str:
    """``topic`` with every ``.`` as ``_`` (Kafka's ``Topic.unifyCollisionChars``): two names
    collide when these are equal."""
    return topic.replace(".", "_")


def check_no_collision(topic: str, existing: Iterable[str]) -> None:
    """:class:`InvalidTopicError` when ``topic`` collides with one of ``existing`` (other than
    itself), with Kafka's message (``InvalidTopicException``)."""
    unified = unified_collision_chars(topic)
    for other in sorted(existing):
        if other != topic and unified_collision_chars(other) == unified:
            raise InvalidTopicError(f"Topic '{topic}' collides with existing topic: {other}")


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """One partition of one topic; ordered by topic, then partition. Its hash is computed once
    (a request looks a partition up in several dicts) and not pickled: a string's hash differs
    between processes."""

    topic: str
    partition: int
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        validate_topic(self.topic)
        p = self.partition
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= MAX_PARTITION:
            raise InvalidTopicError(
                f"partition {p!r} of topic {self.topic!r} is not in [0, {MAX_PARTITION}]"
            )
        object.__setattr__(self, "_hash", hash((self.topic, p)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[TopicPartition], tuple[str, int]]:
        return TopicPartition, (self.topic, self.partition)

    @property
    def dir_name(self) -> str:
        """The partition's directory name inside a log dir: ``<topic>-<partition>``."""
        return f"{self.topic}-{self.partition}"

    def __str__(self) -> str:
        return self.dir_name

    @classmethod
    def parse_dir_name(cls, name: str) -> TopicPartition:
        """Parse ``<topic>-<partition>``; raise :class:`InvalidTopicError` naming ``name``."""
        topic, sep, partition = name.rpartition("-")
        if not sep or not _PARTITION.fullmatch(partition):
            raise InvalidTopicError(
                f"directory name {name!r} is not a partition directory '<topic>-<partition>'"
            )
        try:
            return cls(topic, int(partition))
        except InvalidTopicError as e:
            raise InvalidTopicError(f"directory name {name!r}: {e}") from None

    @classmethod
    def try_parse_dir_name(cls, name: str) -> TopicPartition | None:
        """Like :meth:`parse_dir_name` but ``None`` for a name that is not a partition dir."""
        try:
            return cls.parse_dir_name(name)
        except InvalidTopicError:
            return None
