"""KafkaSourceOptions: defaults, every option, the three query kinds and every rejection (the
message names the option and the value)."""

from __future__ import annotations

import pickle
import time

import pytest

from broker_embedded.storage.fetch_data_info import IsolationLevel
from broker_embedded.storage.topic_partition import TopicPartition
from datasource.errors import InvalidOptionError
from datasource.kafka_source_options import (
    LOG_DIR_FETCH_BYTES,
    WIRE_FETCH_BYTES,
    KafkaSourceOptions,
)
from datasource.offset_spec import (
    EarliestOffsets,
    GlobalTimestamp,
    LatestOffsets,
    SpecificOffsets,
    SpecificTimestamps,
)
from datasource.subscription import MATCH_TIMEOUT_S, Assign, Subscribe, SubscribePattern

BASE = {"path": "/logs", "subscribe": "events"}


def parse(streaming: bool | None = False, **options: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse({**BASE, **options}, streaming=streaming)


def test_defaults() -> None:
    o = KafkaSourceOptions.parse(BASE)
    assert o.path == "/logs"
    assert o.subscription == Subscribe(("events",))
    assert o.starting == EarliestOffsets() and o.ending == LatestOffsets()
    assert o.starting_strategy == "error"
    assert o.fail_on_data_loss is True and o.include_headers is False
    assert o.min_partitions is None and o.max_records_per_partition is None
    assert o.max_bytes_per_partition is None
    assert o.isolation_level == IsolationLevel.READ_UNCOMMITTED and not o.read_committed
    assert o.max_partition_fetch_bytes == 1 << 20 and o.fetch_max_bytes == 50 << 20
    assert o.fetch_bytes == 1 << 20
    assert o.task_fetch_bytes == LOG_DIR_FETCH_BYTES == 8 << 20  # a log dir reads ahead
    assert o.narrow_by_filters is False
    assert o.streaming is False


def test_every_batch_option_parsed() -> None:
    o = KafkaSourceOptions.parse(
        {
            "PATH": " /logs ",
            "assign": '{"a":[1,0,1],"b":[2]}',
            "startingOffsets": '{"a":{"0":-2,"1":5},"b":{"2":7}}',
            "endingOffsets": '{"a":{"0":-1,"1":9},"b":{"2":7}}',
            "startingOffsetsByTimestampStrategy": "LATEST",
            "failOnDataLoss": "False",
            "includeHeaders": "TRUE",
            "minPartitions": "4",
            "maxRecordsPerPartition": "1000",
            "maxBytesPerPartition": "64m",
            "kafka.isolation.level": "read_committed",
            "kafka.max.partition.fetch.bytes": "4096",
            "kafka.fetch.max.bytes": "1024",
            "narrowByFilters": "true",
        }
    )
    assert o.path == "/logs"
    assert o.subscription == Assign(
        (TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 2))
    )
    a0, a1, b2 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 2)
    assert o.starting == SpecificOffsets({a0: -2, a1: 5, b2: 7})
    assert o.ending == SpecificOffsets({a0: -1, a1: 9, b2: 7})
    assert o.starting_strategy == "latest"
    assert (o.fail_on_data_loss, o.include_headers) == (False, True)
    assert (o.min_partitions, o.max_records_per_partition) == (4, 1000)
    assert o.max_bytes_per_partition == 64 << 20
    assert o.read_committed
    assert (o.max_partition_fetch_bytes, o.fetch_max_bytes, o.fetch_bytes) == (4096, 1024, 1024)
    assert o.task_fetch_bytes == LOG_DIR_FETCH_BYTES
    more = {**BASE, "kafka.max.partition.fetch.bytes": str(16 << 20)}
    assert KafkaSourceOptions.parse(more).task_fetch_bytes == 16 << 20
    assert o.narrow_by_filters is True
    assert pickle.loads(pickle.dumps(o)) == o


def test_subscribe_pattern_and_list() -> None:
    assert parse(subscribe=" b, a ,a,").subscription == Subscribe(("a", "b"))
    o = KafkaSourceOptions.parse({"path": "/l", "subscribePattern": "ev.*"})
    pattern = o.subscription
    assert isinstance(pattern, SubscribePattern)
    # found anywhere in the name, as Spark's Admin path (findFirstIn); anchored: whole names
    assert pattern.matches("events") and pattern.matches("xevents") and not pattern.matches("e")
    assert SubscribePattern("^ev.*$").matches("events")
    assert not SubscribePattern("^ev.*$").matches("xevents")
    assert not SubscribePattern(".*").matches("__consumer_offsets")  # internal topics left out
    assert pickle.loads(pickle.dumps(pattern)).matches("events")


def test_precedence_of_timestamps_over_offsets() -> None:
    tp = TopicPartition("events", 0)
    o = parse(
        startingOffsets="earliest",
        startingOffsetsByTimestamp='{"events":{"0":5}}',
        startingTimestamp="7",
        endingOffsets="latest",
        endingTimestamp="9",
    )
    assert o.starting == GlobalTimestamp(7) and o.ending == GlobalTimestamp(9)
    o = parse(startingOffsets="earliest", startingOffsetsByTimestamp='{"events":{"0":5}}')
    assert o.starting == SpecificTimestamps({tp: 5})
    o = parse(endingOffsetsByTimestamp='{"events":{"0":5}}', endingOffsets='{"events":{"0":1}}')
    assert o.ending == SpecificTimestamps({tp: 5})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1048576", 1 << 20),
        ("512k", 512 << 10),
        ("64m", 64 << 20),
        ("1g", 1 << 30),
        ("64MiB", 64 << 20),
        (" 100 b ", 100),
    ],
)
def test_byte_sizes(value: str, expected: int) -> None:
    assert parse(maxBytesPerPartition=value).max_bytes_per_partition == expected


def test_streaming_options_and_defaults() -> None:
    o = parse(
        streaming=True,
        maxOffsetsPerTrigger="1000",
        minOffsetsPerTrigger="10",
        maxTriggerDelay="30s",
        maxBytesPerTrigger="1m",
    )
    assert o.starting == LatestOffsets() and o.ending is None  # streaming starts at latest
    assert (o.max_offsets_per_trigger, o.min_offsets_per_trigger) == (1000, 10)
    assert (o.max_trigger_delay_ms, o.max_bytes_per_trigger) == (30_000, 1 << 20)
    assert parse(streaming=True).max_trigger_delay_ms == 15 * 60_000
    assert parse(streaming=True, startingOffsets="latest").starting == LatestOffsets()


def test_unknown_kind_accepts_both_and_checks_values() -> None:
    o = parse(streaming=None, maxOffsetsPerTrigger="5", endingOffsets="latest")
    assert o.max_offsets_per_trigger == 5 and o.ending == LatestOffsets()
    with pytest.raises(InvalidOptionError, match="maxOffsetsPerTrigger='x'"):
        parse(streaming=None, maxOffsetsPerTrigger="x")


REJECTED = [
    # (options, query kind, words the message must hold)
    ({"subscribe": None}, False, ["exactly one of", "got none"]),
    ({"assign": '{"a":[0]}'}, False, ["exactly one of", "subscribe='events'", "assign="]),
    ({"subscribePattern": "a.*"}, False, ["exactly one of", "subscribePattern='a.*'"]),
    ({"path": None}, False, ["option path is missing"]),
    ({"path": "  "}, False, ["option path is missing"]),
    ({"bogus": "1"}, False, ["unknown option bogus='1'", "subscribePattern"]),
    (
        {"kafka.bootstrap.servers": "h:9092"},
        False,
        ["path='/logs' and kafka.bootstrap.servers='h:9092' are both given: pick one"],
    ),
    (
        {"path": None, "kafka.bootstrap.servers": "h:x"},
        False,
        ["kafka.bootstrap.servers='h:x' is invalid", "host1:port1"],
    ),
    (
        {"path": None, "kafka.bootstrap.servers": "h:1", "kafka.security.protocol": "TLS"},
        False,
        ["security.protocol='TLS' is not one of"],
    ),
    (
        {
            "path": None,
            "kafka.bootstrap.servers": "h:1",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "GSSAPI",
        },
        False,
        ["sasl.mechanism='GSSAPI' is not supported"],
    ),
    (
        {"path": None, "kafka.bootstrap.servers": "h:1", "kafka.ssl.truststore.locaton": "x"},
        False,
        ["client property ssl.truststore.locaton is not supported"],
    ),
    (
        {"path": None, "kafka.bootstrap.servers": "h:1", "kafka.request.timeout.ms": "0"},
        False,
        ["kafka.request.timeout.ms='0'"],
    ),
    # Spark's messages (KafkaSourceProvider.validateGeneralOptions), for a log dir too
    (
        {"kafka.auto.offset.reset": "earliest"},
        False,
        ["Kafka option 'auto.offset.reset' is not supported.", "'startingOffsets'"],
    ),
    (
        {"kafka.key.deserializer": "x"},
        None,
        [
            "Kafka option 'key.deserializer' is not supported "
            "as keys are deserialized as byte arrays"
        ],
    ),
    (
        {"kafka.value.deserializer": "x"},
        True,
        ["Kafka option 'value.deserializer' is not supported as values are deserialized"],
    ),
    (
        {"kafka.enable.auto.commit": "true"},
        False,
        ["Kafka option 'enable.auto.commit' is not supported"],
    ),
    (
        {"kafka.interceptor.classes": "x"},
        False,
        ["Kafka option 'interceptor.classes' is not supported"],
    ),
    ({"subscribe": " , "}, False, ["subscribe=' , '", "no topics"]),
    ({"subscribe": "a,b c"}, False, ["subscribe='a,b c'", "illegal"]),
    ({"subscribe": None, "assign": "[0]"}, False, ["assign='[0]'", "JSON object"]),
    ({"subscribe": None, "assign": "{"}, False, ["assign='{'", "not valid JSON"]),
    ({"subscribe": None, "assign": "{}"}, False, ["assign='{}'", "no topic partitions"]),
    ({"subscribe": None, "assign": '{"a":[-1]}'}, False, ["assign=", "partition -1"]),
    ({"subscribe": None, "assign": '{"a":["0"]}'}, False, ["assign=", "'0' is not an int"]),
    ({"subscribe": None, "assign": '{"a":0}'}, False, ["assign=", "list of partitions"]),
    ({"subscribe": None, "subscribePattern": " "}, False, ["subscribePattern=' '", "empty"]),
    ({"subscribe": None, "subscribePattern": "("}, False, ["subscribePattern='('", "regex"]),
    ({"startingOffsets": "latest"}, False, ["startingOffsets='latest'", "batch"]),
    ({"startingOffsets": '{"events":{"0":-1}}'}, False, ["startingOffsets=", "-1 (latest)"]),
    ({"startingOffsets": "first"}, False, ["startingOffsets='first'", "earliest, latest"]),
    ({"startingOffsets": '{"events":{"0":-3}}'}, False, ["startingOffsets=", "below -2"]),
    ({"startingOffsets": '{"events":{"x":1}}'}, False, ["startingOffsets=", "'x'"]),
    ({"startingOffsets": '{"events":{"0":1.5}}'}, False, ["startingOffsets=", "1.5"]),
    ({"startingOffsets": '{"events":[0]}'}, False, ["startingOffsets=", "partition: number"]),
    ({"startingOffsets": '{"events":{"0":1}'}, False, ["startingOffsets=", "not valid JSON"]),
    ({"endingOffsets": "earliest"}, False, ["endingOffsets='earliest'"]),
    ({"endingOffsets": '{"events":{"0":-2}}'}, False, ["endingOffsets=", "-2 (earliest)"]),
    (
        {"startingOffsets": '{"events":{"0":9}}', "endingOffsets": '{"events":{"0":5}}'},
        False,
        ["endingOffsets=", "events-0 at 5", "startingOffsets=", "(9)"],
    ),
    (
        {"startingTimestamp": "20", "endingTimestamp": "10"},
        False,
        ["endingTimestamp=10", "startingTimestamp=20"],
    ),
    (
        {
            "startingOffsetsByTimestamp": '{"events":{"0":9}}',
            "endingOffsetsByTimestamp": '{"events":{"0":5}}',
        },
        False,
        ["endingOffsetsByTimestamp="],
    ),
    ({"startingTimestamp": "-5"}, False, ["startingTimestamp='-5'", "negative"]),
    ({"startingTimestamp": "yesterday"}, False, ["startingTimestamp='yesterday'"]),
    (
        {"endingOffsetsByTimestamp": '{"events":{"0":-1}}'},
        False,
        ["endingOffsetsByTimestamp=", "negative"],
    ),
    ({"startingTimestamp": "1", "startingOffsets": "{"}, False, ["startingOffsets='{'"]),
    (
        {"startingOffsetsByTimestampStrategy": "skip"},
        False,
        ["startingOffsetsByTimestampStrategy='skip'", "error, latest"],
    ),
    ({"failOnDataLoss": "yes"}, False, ["failOnDataLoss='yes'", "true or false"]),
    ({"includeHeaders": "1"}, False, ["includeHeaders='1'"]),
    ({"minPartitions": "0"}, False, ["minPartitions='0'", "[1, "]),
    ({"minPartitions": "two"}, False, ["minPartitions='two'", "positive integer"]),
    ({"maxRecordsPerPartition": "-5"}, False, ["maxRecordsPerPartition='-5'"]),
    ({"maxBytesPerPartition": "0"}, False, ["maxBytesPerPartition='0'"]),
    ({"maxBytesPerPartition": "10 parsecs"}, False, ["maxBytesPerPartition='10 parsecs'"]),
    ({"kafka.isolation.level": "serializable"}, False, ["kafka.isolation.level='serializable'"]),
    ({"kafka.max.partition.fetch.bytes": "0"}, False, ["kafka.max.partition.fetch.bytes='0'"]),
    ({"kafka.fetch.max.bytes": "4294967296"}, False, ["kafka.fetch.max.bytes='4294967296'"]),
    ({"endingOffsets": "latest"}, True, ["endingOffsets='latest'", "batch queries"]),
    ({"endingTimestamp": "5"}, True, ["endingTimestamp='5'", "batch queries"]),
    ({"narrowByFilters": "true"}, True, ["narrowByFilters='true'", "batch queries"]),
    ({"narrowByFilters": "maybe"}, False, ["narrowByFilters='maybe'", "true or false"]),
    ({"maxOffsetsPerTrigger": "0"}, True, ["maxOffsetsPerTrigger='0'"]),
    ({"maxTriggerDelay": "soon"}, True, ["maxTriggerDelay='soon'", "duration"]),
    (
        {"maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "6"},
        True,
        ["minOffsetsPerTrigger=6", "maxOffsetsPerTrigger=5"],
    ),
    (
        {"maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "6"},
        False,
        ["minOffsetsPerTrigger=6", "maxOffsetsPerTrigger=5"],
    ),
    (
        {"maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "x"},
        False,
        ["minOffsetsPerTrigger='x'"],
    ),
]


@pytest.mark.parametrize(("options", "streaming", "words"), REJECTED)
def test_rejected(options: dict, streaming: bool, words: list[str]) -> None:
    given = {**BASE, **options}
    given = {k: v for k, v in given.items() if v is not None}
    with pytest.raises(InvalidOptionError) as e:
        KafkaSourceOptions.parse(given, streaming=streaming)
    for word in words:
        assert word in str(e.value), (word, str(e.value))


def test_option_names_ignore_case_but_not_twice() -> None:
    assert parse(FAILONDATALOSS="false").fail_on_data_loss is False
    with pytest.raises(InvalidOptionError, match="given twice"):
        KafkaSourceOptions.parse({**BASE, "includeHeaders": "true", "INCLUDEHEADERS": "true"})


JSON_OPTIONS = {
    False: (
        "assign",
        "startingOffsets",
        "endingOffsets",
        "startingOffsetsByTimestamp",
        "endingOffsetsByTimestamp",
    ),
    True: ("assign", "startingOffsets", "startingOffsetsByTimestamp"),
}
DEEP = 100_000


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("opener", ["[", "{", '{"a":', '{"events":['])
def test_deeply_nested_json_is_an_option_error(streaming: bool, opener: str) -> None:
    """Issue 11 defect 4: ``"[" * 100000`` raised RecursionError from json.loads."""
    for name in JSON_OPTIONS[streaming]:
        value = opener * DEEP
        options = {"path": "/logs", name: value}
        if name != "assign":
            options["subscribe"] = "events"
        with pytest.raises(InvalidOptionError) as e:
            KafkaSourceOptions.parse(options, streaming=streaming)
        expected = 'a JSON object like {"topicA": [0, 1]}' if name == "assign" else None
        head = repr(value[:100])
        message = str(e.value)
        assert message.startswith(
            f"option {name}={head}... ({len(value)} characters) is invalid: expected "
        ), message
        assert message.endswith("; JSON nested deeper than 32 levels"), message
        if expected is not None:
            assert message == (
                f"option assign={head}... ({len(value)} characters) is invalid: expected "
                f"{expected}; JSON nested deeper than 32 levels"
            )


def test_nesting_within_the_limit_reaches_the_shape_check() -> None:
    value = "[" * 32 + "]" * 32
    with pytest.raises(InvalidOptionError) as e:
        parse(startingOffsets=value)
    assert str(e.value) == (
        f"option startingOffsets={value!r} is invalid: expected earliest, latest or JSON like "
        '{"topicA": {"0": 23}}'
    )
    brackets_in_a_name = '{"' + "[" * 1000 + '": {"0": 5}}'
    with pytest.raises(InvalidOptionError) as e:
        parse(startingOffsets=brackets_in_a_name)
    assert str(e.value).endswith("is illegal: 1000 characters, the maximum is 249")


def test_deep_nesting_fails_a_spark_read_with_the_option_error(spark, source_log_dir) -> None:
    reader = spark.read.format("kafkalog").option("subscribe", "events")
    with pytest.raises(Exception) as e:
        reader.option("startingOffsets", "[" * DEEP).load(str(source_log_dir)).collect()
    message = str(e.value)
    assert "option startingOffsets='[[[[" in message, message[:2000]
    assert "... (100000 characters) is invalid: expected earliest, latest or JSON like" in message
    assert "JSON nested deeper than 32 levels" in message
    assert "RecursionError" not in message


HOSTILE_PATTERNS = [
    # (pattern, what re.compile raised before the fix, the reason in the option error)
    ("a{99999999999}", "OverflowError", "not a valid regex (repeat count too big at position 2)"),
    ("(" * 500 + ")" * 500, "RecursionError", "groups nested 500 deep (at most 100)"),
    ("(a" * 101 + ")" * 101, None, "groups nested 101 deep (at most 100)"),
    ("a" * 10_001, None, "longer than 10000 characters"),
]


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(("pattern", "raised", "reason"), HOSTILE_PATTERNS)
def test_hostile_subscribe_pattern_is_an_option_error(
    streaming: bool, pattern: str, raised: str | None, reason: str
) -> None:
    """``re.compile`` raised OverflowError / RecursionError out of option parsing (issue 11's
    fuzz campaign); the message quotes at most 100 characters of the pattern."""
    with pytest.raises(InvalidOptionError) as e:
        KafkaSourceOptions.parse(
            {"path": "/logs", "subscribePattern": pattern}, streaming=streaming
        )
    quoted = (
        repr(pattern)
        if len(pattern) <= 100
        else f"{pattern[:100]!r}... ({len(pattern)} characters)"
    )
    message = str(e.value)
    assert message.startswith(f"option subscribePattern={quoted}"), message
    assert reason in message, message
    assert len(message) < 400, message


def test_groups_nested_to_the_limit_compile() -> None:
    """The depth limit is the option's, whatever the process's recursion limit; escaped
    parentheses and those in character classes are not groups."""
    deep = "(a" * 100 + ")" * 100 + r"\(?[(((]?-x"
    o = KafkaSourceOptions.parse({"path": "/logs", "subscribePattern": deep}, streaming=False)
    assert o.subscription.matches("a" * 100 + "-x")
    assert not o.subscription.matches("a" * 99 + "-x")


def test_a_catastrophically_backtracking_pattern_fails_matching_with_the_option_error() -> None:
    """``(a|aa)+c`` against 60 a's backtracks through 2^40 paths: ``re`` never returned; the
    match gives up after MATCH_TIMEOUT_S with the option error naming the topic."""
    o = KafkaSourceOptions.parse({"path": "/logs", "subscribePattern": "(a|aa)+c"})
    assert o.subscription.matches("aac") and not o.subscription.matches("ab")
    began = time.monotonic()
    with pytest.raises(InvalidOptionError) as e:
        o.subscription.matches("a" * 60)
    assert time.monotonic() - began < 10 * MATCH_TIMEOUT_S
    assert str(e.value) == (
        "option subscribePattern='(a|aa)+c' is invalid: matching topic 'aaaaaaaaaaaaaaaaaaaaaaaaaa"
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' took over 1 s: the pattern backtracks "
        "catastrophically (nested quantifiers such as (a|aa)+)"
    )


def test_a_long_pattern_within_the_bound_is_accepted() -> None:
    pattern = "|".join(f"topic-{i}" for i in range(1000))[:10_000].rsplit("|", 1)[0]
    o = KafkaSourceOptions.parse({"path": "/logs", "subscribePattern": pattern})
    assert o.subscription.matches("topic-7") and not o.subscription.matches("topic-x")


def test_bootstrap_servers_instead_of_path_and_the_client_settings() -> None:
    o = KafkaSourceOptions.parse(
        {
            "subscribe": "events",
            "kafka.bootstrap.servers": " h1:9092,[::1]:9093 ",
            "kafka.client.id": "job-7",
            "kafka.request.timeout.ms": "5000",
            "kafka.default.api.timeout.ms": "20000",
            "kafka.retry.backoff.ms": "50",
            "kafka.socket.connection.setup.timeout.ms": "3000",
            "kafka.security.protocol": "plaintext",
            "kafka.max.partition.fetch.bytes": "4096",
        }
    )
    assert (o.path, o.bootstrap_servers) == ("", "h1:9092,[::1]:9093")
    assert dict(o.client_settings) == {
        "client_id": "job-7",
        "request_timeout_ms": 5000,
        "retry_timeout_ms": 20000,
        "retry_backoff_ms": 50,
        "connect_timeout_ms": 3000,
        "security": (("security.protocol", "plaintext"),),
    }
    assert o.fetch_bytes == o.task_fetch_bytes == 4096  # over the wire, as asked
    wire = KafkaSourceOptions.parse({"kafka.bootstrap.servers": "h1:9092", "subscribe": "t"})
    assert (
        (wire.fetch_bytes, wire.task_fetch_bytes)
        == (1 << 20, WIRE_FETCH_BYTES)
        == (1 << 20, 4 << 20)
    )
    capped = {
        "kafka.bootstrap.servers": "h1:9092",
        "subscribe": "t",
        "kafka.fetch.max.bytes": "2000000",
    }
    assert KafkaSourceOptions.parse(capped).task_fetch_bytes == 1 << 20  # set: Kafka's sizes
    assert pickle.loads(pickle.dumps(o)) == o
    from datasource.kafka_offset_reader import source_of

    source = source_of(o)
    assert source.location == "Kafka cluster h1:9092,[::1]:9093"
    assert (source.client_id, source.request_timeout_ms, source.retries) == ("job-7", 5000, 10)


def test_accepted_kafka_options_warn_once(caplog: pytest.LogCaptureFixture) -> None:
    from datasource import kafka_source_options

    kafka_source_options._WARNED.clear()
    given = {
        "kafka.group.id": "g",
        "kafka.session.timeout.ms": "10",
        "groupIdPrefix": "p",
        "fetchOffset.numRetries": "3",
        "kafka.client.id": "c",
    }
    with caplog.at_level("WARNING"):
        for _ in range(2):
            o = parse(**given)
    assert o.client_settings == ()  # a log dir: no client
    messages = sorted(r.getMessage() for r in caplog.records)
    assert len(messages) == 5, messages
    assert messages[0].startswith("Kafka option 'kafka.group.id' has been set on this query")
    assert "option kafka.client.id='c' has no effect (reading a log dir)" in messages
    assert "option groupIdPrefix='p' has no effect (reading a log dir)" in messages


def test_remote_log_storage() -> None:
    """``remoteLogStorage``: a store URI with a local log dir, ``broker`` or a URI with a
    cluster; never beside a path already on a store, never anything else."""
    uri = "s3://history/kafka/broker-0"
    assert parse(remoteLogStorage=f" {uri} ").remote_log_storage == uri
    assert (
        parse(
            remoteLogStorage="Broker", path="", **{"kafka.bootstrap.servers": "b:9092"}
        ).remote_log_storage
        == "broker"
    )
    for given, message in (
        (
            {"remoteLogStorage": "broker"},
            "option remoteLogStorage='broker' is invalid: expected the URI of the store the broker "
            "tiers to (its rsm.config.location), such as s3://bucket/prefix",
        ),
        (
            {"remoteLogStorage": "/data/tiered", "path": "", "kafka.bootstrap.servers": "b:9092"},
            "option remoteLogStorage='/data/tiered' is invalid: expected the URI of the store the "
            "broker tiers to (its rsm.config.location), such as s3://bucket/prefix, or broker to "
            "ask the brokers",
        ),
        (
            {"remoteLogStorage": uri, "path": "s3://history/copy"},
            f"option remoteLogStorage='{uri}' goes with a log dir on this file system as path (the "
            "broker's tiered log dir) or with kafka.bootstrap.servers, not with "
            "path='s3://history/copy', which is already on object storage",
        ),
    ):
        with pytest.raises(InvalidOptionError) as refused:
            parse(**given)
        assert str(refused.value) == message
