"""Which topic partitions a query reads: Spark's ``assign``, ``subscribe`` and
``subscribePattern`` options (exactly one of them).

- :class:`Assign`: explicit partitions, from JSON ``{"topicA": [0, 1], "topicB": [2]}``;
- :class:`Subscribe`: every partition of the listed topics (``"topicA,topicB"``);
- :class:`SubscribePattern`: every partition of the topics in whose name a regular expression
  finds a match, anywhere in the name, as Spark 4.x's Kafka source finds topics (its default,
  Admin-based, offset reader: ``topicRegex.findFirstIn(name)``; anchor the pattern, ``^...$``,
  to match whole names); the ``regex`` module's syntax, which agrees with Java's for ordinary
  patterns. Internal topics (names starting with ``__``, such as
  ``__consumer_offsets``) are left out, as Kafka's consumer leaves them out
  (``exclude.internal.topics``); name them in ``subscribe`` or ``assign`` to read them.

Values are frozen and picklable (a compiled pattern is rebuilt from its text on unpickling).
Parsing raises :class:`InvalidOptionError` naming the option and the value (at most
``option_json.MAX_QUOTED`` characters of it). A pattern longer than :data:`MAX_PATTERN_LENGTH`
characters, or with groups nested deeper than :data:`MAX_GROUP_DEPTH`, is refused before it is
compiled (the depth ``regex.compile`` can take depends on the process's recursion limit, so the
answer would otherwise depend on what else the process loaded), and whatever ``regex.compile``
raises on hostile text (``regex.error`` for ``a{99999999999}``, ``OverflowError``,
``ValueError``, ``RecursionError``) is that option error too. Matching one topic name may take at
most :data:`MATCH_TIMEOUT_S`: a pattern that backtracks catastrophically (nested quantifiers such
as ``(a|aa)+c``; Java's matcher, which Spark's Kafka source uses, hangs on those) fails the query
with that option error naming the topic, instead of hanging it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import regex

from broker_embedded.errors import InvalidTopicError
from broker_embedded.storage.topic_partition import TopicPartition, validate_topic
from datasource.option_json import bad_option as _bad
from datasource.option_json import load_option_json

INTERNAL_TOPIC_PREFIX = "__"
# Longer than any sensible pattern over topic names (249 characters at most each).
MAX_PATTERN_LENGTH = 10_000
# Far deeper than any sensible pattern, far below what the regex compiler's recursion takes.
MAX_GROUP_DEPTH = 100
# What regex.compile raises on text it cannot compile.
_REGEX_ERRORS = (regex.error, OverflowError, RecursionError, ValueError)
# The longest one topic name may take to match (a topic name has at most 249 characters: an
# ordinary pattern takes microseconds).
MATCH_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class Assign:
    """``assign``: these partitions, sorted, without duplicates."""

    partitions: tuple[TopicPartition, ...]

    option = "assign"

    @classmethod
    def parse(cls, value: str) -> Assign:
        expected = 'a JSON object like {"topicA": [0, 1]}'
        data = load_option_json("assign", value, expected)
        if not isinstance(data, dict):
            raise _bad("assign", value, f"expected {expected}")
        found: set[TopicPartition] = set()
        for topic, parts in data.items():
            if not isinstance(parts, list):
                raise _bad("assign", value, f"topic {topic!r}: expected a list of partitions")
            for p in parts:
                if isinstance(p, bool) or not isinstance(p, int):
                    raise _bad("assign", value, f"topic {topic!r}: partition {p!r} is not an int")
                found.add(_topic_partition("assign", value, topic, p))
        if not found:
            raise _bad("assign", value, "no topic partitions to assign")
        return cls(tuple(sorted(found)))

    def topics(self) -> tuple[str, ...]:
        return tuple(sorted({tp.topic for tp in self.partitions}))

    def __str__(self) -> str:
        by_topic: dict[str, list[int]] = {}
        for tp in self.partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return f"assign={json.dumps(by_topic, separators=(',', ':'))}"


@dataclass(frozen=True)
class Subscribe:
    """``subscribe``: every partition of these topics (sorted, without duplicates)."""

    topics: tuple[str, ...]

    option = "subscribe"

    @classmethod
    def parse(cls, value: str) -> Subscribe:
        names = [t.strip() for t in value.split(",") if t.strip()]
        if not names:
            raise _bad("subscribe", value, "no topics to subscribe to")
        for name in names:
            try:
                validate_topic(name)
            except InvalidTopicError as e:
                raise _bad("subscribe", value, str(e)) from None
        return cls(tuple(sorted(set(names))))

    def matches(self, topic: str) -> bool:
        return topic in self.topics

    def __str__(self) -> str:
        return f"subscribe={','.join(self.topics)}"


@dataclass(frozen=True)
class SubscribePattern:
    """``subscribePattern``: the topics in whose name ``pattern`` finds a match (not internal)."""

    pattern: str
    _regex: regex.Pattern[str] = field(init=False, repr=False, compare=False)

    option = "subscribePattern"

    def __post_init__(self) -> None:
        object.__setattr__(self, "_regex", _compile(self.pattern))

    @classmethod
    def parse(cls, value: str) -> SubscribePattern:
        if not value.strip():
            raise _bad("subscribePattern", value, "the pattern to subscribe is empty")
        return cls(value.strip())

    def matches(self, topic: str) -> bool:
        if topic.startswith(INTERNAL_TOPIC_PREFIX):
            return False
        try:
            return self._regex.search(topic, timeout=MATCH_TIMEOUT_S) is not None
        except TimeoutError:
            reason = (
                f"matching topic {topic!r} took over {MATCH_TIMEOUT_S:g} s: the pattern "
                "backtracks catastrophically (nested quantifiers such as (a|aa)+)"
            )
            raise _bad("subscribePattern", self.pattern, reason) from None

    def __getstate__(self) -> dict[str, str]:
        return {"pattern": self.pattern}

    def __setstate__(self, state: dict[str, str]) -> None:
        object.__setattr__(self, "pattern", state["pattern"])
        self.__post_init__()

    def __str__(self) -> str:
        return f"subscribePattern={self.pattern}"


Subscription = Assign | Subscribe | SubscribePattern


def _compile(pattern: str) -> regex.Pattern[str]:
    """``pattern`` compiled, or the ``subscribePattern`` option error saying why not."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        reason = f"longer than {MAX_PATTERN_LENGTH} characters"
        raise _bad("subscribePattern", pattern, reason)
    depth = _group_depth(pattern)
    if depth > MAX_GROUP_DEPTH:
        reason = f"groups nested {depth} deep (at most {MAX_GROUP_DEPTH})"
        raise _bad("subscribePattern", pattern, reason)
    try:
        return regex.compile(pattern)
    except _REGEX_ERRORS as e:
        detail = str(e) if isinstance(e, regex.error) else f"{type(e).__name__}: {e}"
        raise _bad("subscribePattern", pattern, f"not a valid regex ({detail[:200]})") from None


def _group_depth(pattern: str) -> int:
    """How deep ``pattern``'s groups nest: its unescaped ``(`` outside character classes."""
    depth = deepest = 0
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 1  # the escaped character
        elif c == "[":
            i = _class_end(pattern, i)
        elif c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth = max(depth - 1, 0)
        i += 1
    return deepest


def _class_end(pattern: str, start: int) -> int:
    """The index of the ``]`` closing the character class opened at ``start`` (a ``]`` first
    in the class is literal; the end of the pattern if it is not closed)."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    return i


def _topic_partition(option: str, value: str, topic: object, partition: int) -> TopicPartition:
    try:
        return TopicPartition(topic, partition)  # type: ignore[arg-type]
    except InvalidTopicError as e:
        raise _bad(option, value, str(e)) from None
