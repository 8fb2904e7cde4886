"""Kafka's own tools against ``kafkalog serve``, each run against Kafka 3.9 (the session's
``kafka39`` broker) in the same test and the outputs compared after normalizing what must
differ (addresses, node ids, topic ids, timestamps); where kafkalog differs on purpose the test
asserts the difference exactly (and docs/serving/kafka-tools.md's table names it). And the
other way round: kafkalog's ``produce`` / ``consume`` with ``--bootstrap-server`` against Kafka
3.9, as Kafka's console tools behave there.

One ``kafkalog serve`` child for the module, with the ACL authorizer on and every resource
without ACLs open (``allow.everyone.if.no.acl.found``), as the ACL tools need, and no initial
rebalance delay (as the Kafka peer). The tool runs share one JVM (tests/kafka39.py
``kafka_tool``); the checks are grouped, a few runs per test. Each test uses its own
topic and group names (the Kafka broker is shared by the session).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.kafka39 import kafka_tool
from tests.spark_kafkalog._serve_proc import ROOT, ServeProcess, child_env

BROKER_CONFIG = """[broker]
"group.initial.rebalance.delay.ms" = 0
[security]
"authorizer.class.name" = "kafka.security.authorizer.AclAuthorizer"
"allow.everyone.if.no.acl.found" = true
"""
TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def kafkalog(kafka39, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """A ``kafkalog serve`` child (after ``kafka39``: no child when Kafka 3.9 is missing)."""
    root = tmp_path_factory.mktemp("kafkalog-serve")
    conf = root / "broker.toml"
    conf.write_text(BROKER_CONFIG)
    with ServeProcess(root / "logs", "--broker-config", conf, stderr=root / "serve.log") as s:
        s.log_dir = root / "logs"  # type: ignore[attr-defined]
        yield s


def normalize(text: str, bootstrap: str) -> str:
    """A tool's output without what must differ between the two servers."""
    text = text.replace(bootstrap, "BOOTSTRAP")
    text = re.sub(r"^\s+at .*\n", "", text, flags=re.M)  # Java stack frames
    text = re.sub(r"(TopicId: )\S+", r"\1ID", text)
    text = re.sub(r"^\[[0-9-]+ [0-9:,]+\] ", "[TIME] ", text, flags=re.M)
    text = re.sub(r"\b(Leader|Replicas|Isr): \d+", r"\1: N", text)
    return text


def both(
    kafka39,
    kafkalog: ServeProcess,
    work: Path,
    tool: str,
    *args: str | Path,
    stdin: str | None = None,
) -> tuple[str, str]:
    """``tool --bootstrap-server B ARGS`` against Kafka 3.9 then kafkalog: both outputs
    (stdout, then stderr, then the exit status), normalized."""
    out = []
    for server in (kafka39, kafkalog):
        done = kafka_tool(
            tool, "--bootstrap-server", server.bootstrap, *args, work=work, stdin=stdin, check=False
        )
        text = f"{done.stdout}{_tool_stderr(done.stderr)}exit {done.returncode}\n"
        out.append(normalize(text, server.bootstrap))
    return out[0], out[1]


def _tool_stderr(text: str) -> str:
    """stderr without log4j's WARN lines (a Kafka producer's metadata warnings differ)."""
    return "".join(
        line + "\n"
        for line in text.splitlines()
        if not re.match(r"\[[0-9-]+ [0-9:,]+\] WARN ", line)
    )


def kafkalog_cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from spark_kafkalog.cli import main; sys.exit(main())",
            *args,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=TIMEOUT_S,
        check=False,
    )


# -- kafka-topics, kafka-configs ---------------------------------------------------------------


def test_kafka_topics_create_describe_alter_delete(kafka39, kafkalog, tmp_path):
    create = both(
        kafka39,
        kafkalog,
        tmp_path,
        "kafka-topics",
        "--create",
        "--topic",
        "kt1",
        "--partitions",
        "2",
        "--config",
        "retention.ms=3600000",
        "--config",
        "cleanup.policy=compact",
    )
    assert create == ("Created topic kt1.\nexit 0\n",) * 2
    grown = both(
        kafka39,
        kafkalog,
        tmp_path,
        "kafka-topics",
        "--alter",
        "--topic",
        "kt1",
        "--partitions",
        "3",
    )
    assert grown == ("exit 0\n",) * 2
    kafka, ours = both(kafka39, kafkalog, tmp_path, "kafka-topics", "--describe", "--topic", "kt1")
    header = (
        "Topic: kt1\tTopicId: ID\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: "
        "cleanup.policy=compact,retention.ms=3600000\n"
    )
    row = "\tTopic: kt1\tPartition: {}\tLeader: N\tReplicas: N\tIsr: N\tElr: {}\tLastKnownElr: {}\n"
    # difference: DescribeTopicPartitions is not served, so the tool falls back to Metadata,
    # which has no eligible leader replicas (ELR): N/A where Kafka's KRaft shows none
    assert kafka == header + "".join(row.format(p, "", "") for p in range(3)) + "exit 0\n"
    assert ours == header + "".join(row.format(p, "N/A", "N/A") for p in range(3)) + "exit 0\n"
    deleted = both(kafka39, kafkalog, tmp_path, "kafka-topics", "--delete", "--topic", "kt1")
    assert deleted == ("exit 0\n",) * 2


def create_topic(bootstrap: str, topic: str, config: dict[str, str] | None = None) -> None:
    """Create ``topic`` (one partition) with confluent-kafka's admin client (no JVM start)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=config or {})])[topic].result(TIMEOUT_S)


def test_kafka_configs_describe_and_alter(kafka39, kafkalog, tmp_path):
    for server in (kafka39, kafkalog):
        create_topic(server.bootstrap, "kc1", {"retention.ms": "3600000"})
    topic = ("--entity-type", "topics", "--entity-name", "kc1")
    kafka, ours = both(kafka39, kafkalog, tmp_path, "kafka-configs", "--describe", *topic)
    assert (
        kafka
        == ours
        == (
            "Dynamic configs for topic kc1 are:\n  retention.ms=3600000 sensitive=false "
            "synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000}\nexit 0\n"
        )
    )
    altered = both(
        kafka39,
        kafkalog,
        tmp_path,
        "kafka-configs",
        "--alter",
        *topic,
        "--add-config",
        "max.message.bytes=2000,cleanup.policy=[compact,delete]",
        "--delete-config",
        "retention.ms",
    )
    assert altered == ("Completed updating config for topic kc1.\nexit 0\n",) * 2
    kafka, ours = both(kafka39, kafkalog, tmp_path, "kafka-configs", "--describe", *topic)
    assert (
        kafka
        == ours
        == (
            "Dynamic configs for topic kc1 are:\n"
            "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
            "cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}\n"
            "  max.message.bytes=2000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
            "max.message.bytes=2000, DEFAULT_CONFIG:message.max.bytes=1048588}\nexit 0\n"
        )
    )
    kafka, ours = both(
        kafka39,
        kafkalog,
        tmp_path,
        "kafka-configs",
        "--alter",
        *topic,
        "--add-config",
        "retention.ms=abc",
    )
    assert kafka == ours
    assert (
        "InvalidConfigurationException: Invalid value abc for configuration retention.ms: "
        "Not a number of type LONG\n"
        in ours
        and ours.endswith("exit 1\n")
    )
    # the new max.message.bytes holds: a larger record is refused by both
    big = "x" * 3000 + "\n"
    kafka, ours = both(
        kafka39, kafkalog, tmp_path, "kafka-console-producer", "--topic", "kc1", stdin=big
    )
    # difference: kafkalog's error message says which batch and limit; Kafka's is the default
    refused = (
        "[TIME] ERROR Error when sending message to topic kc1 with key: null, value: 3000 "
        "bytes with error: (org.apache.kafka.clients.producer.internals."
        "ErrorLoggingCallback)\norg.apache.kafka.common.errors.RecordTooLargeException: "
    )
    assert kafka == refused + (
        "The request included a message larger than the max message "
        "size the server will accept.\nexit 0\n"
    )
    assert ours == refused + (
        "topic 'kc1' partition 0, batch at byte 0 of the request: batch "
        "of 3070 bytes exceeds max.message.bytes 2000\nexit 0\n"
    )


# -- console producer and consumer, consumer groups, offsets, delete-records ---------------------


def test_console_tools_consumer_groups_offsets_and_delete_records(kafka39, kafkalog, tmp_path):
    # the console producer auto-creates the topic on both
    produced = both(
        kafka39,
        kafkalog,
        tmp_path,
        "kafka-console-producer",
        "--topic",
        "cg1",
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        stdin="k1:a\nk2:b\nk3:c\n",
    )
    assert produced == ("exit 0\n",) * 2
    consumed = both(
        kafka39,
        kafkalog,
        tmp_path,
        "kafka-console-consumer",
        "--topic",
        "cg1",
        "--group",
        "cg1-group",
        "--from-beginning",
        "--max-messages",
        "3",
        "--timeout-ms",
        "60000",
        "--property",
        "print.key=true",
        "--property",
        "print.offset=true",
    )
    assert (
        consumed
        == (
            "Offset:0\tk1\ta\nOffset:1\tk2\tb\nOffset:2\tk3\tc\nProcessed a total of 3 messages\n"
            "exit 0\n",
        )
        * 2
    )
    kafka, ours = both(kafka39, kafkalog, tmp_path, "kafka-consumer-groups", "--list")
    assert [g for g in kafka.splitlines() if g.startswith("cg1")] == ["cg1-group"]  # shared
    assert [g for g in ours.splitlines() if g.startswith("cg1")] == ["cg1-group"]
    kafka, ours = both(
        kafka39, kafkalog, tmp_path, "kafka-consumer-groups", "--describe", "--group", "cg1-group"
    )
    assert kafka == ours
    assert re.search(r"cg1-group +cg1 +0 +3 +3 +0 +- +- +-", ours)
    kafka, ours = both(
        kafka39,
        kafkalog,
        tmp_path,
        "kafka-consumer-groups",
        "--reset-offsets",
        "--group",
        "cg1-group",
        "--topic",
        "cg1",
        "--to-earliest",
        "--execute",
    )
    assert kafka == ours
    assert re.search(r"cg1-group +cg1 +0 +0 +exit 0", ours)
    past = datetime.now(UTC).replace(year=2020).strftime("%Y-%m-%dT%H:%M:%S.000")
    kafka, ours = both(
        kafka39,
        kafkalog,
        tmp_path,
        "kafka-consumer-groups",
        "--reset-offsets",
        "--group",
        "cg1-group",
        "--topic",
        "cg1",
        "--to-datetime",
        past,
        "--execute",
    )
    assert kafka == ours
    assert re.search(r"cg1-group +cg1 +0 +0 +exit 0", ours)
    plan = tmp_path / "delete.json"
    plan.write_text('{"partitions": [{"topic": "cg1", "partition": 0, "offset": 2}], "version": 1}')
    deleted = both(kafka39, kafkalog, tmp_path, "kafka-delete-records", "--offset-json-file", plan)
    assert (
        deleted
        == (
            "Executing records delete operation\nRecords delete operation "
            "completed:\npartition: cg1-0\tlow_watermark: 2\nexit 0\n",
        )
        * 2
    )
    earliest = both(
        kafka39, kafkalog, tmp_path, "kafka-get-offsets", "--topic", "cg1", "--time", "-2"
    )
    assert earliest == ("cg1:0:2\nexit 0\n",) * 2
    removed = both(
        kafka39, kafkalog, tmp_path, "kafka-consumer-groups", "--delete", "--group", "cg1-group"
    )
    assert (
        removed
        == ("Deletion of requested consumer groups ('cg1-group') was successful.\nexit 0\n",) * 2
    )


# -- kafkalog's own commands against Kafka 3.9 ---------------------------------------------------


def test_kafkalog_produce_auto_creates_and_consume_prints_as_kafkas(kafka39, tmp_path):
    # the defect: "Metadata of topic 'm1' failed: UNKNOWN_TOPIC_OR_PARTITION"
    produced = kafkalog_cli(
        "produce", "--topic", "kl-auto1", "--bootstrap-server", kafka39.bootstrap, stdin="a\nb\nc\n"
    )
    assert produced.returncode == 0, produced.stderr
    consumed = kafkalog_cli(
        "consume",
        "--topic",
        "kl-auto1",
        "--bootstrap-server",
        kafka39.bootstrap,
        "--from-beginning",
    )
    theirs = kafka_tool(
        "kafka-console-consumer",
        "--bootstrap-server",
        kafka39.bootstrap,
        "--topic",
        "kl-auto1",
        "--from-beginning",
        "--max-messages",
        "3",
        "--timeout-ms",
        "60000",
        work=tmp_path,
    )
    assert consumed.stdout == theirs.stdout == "a\nb\nc\n"


# -- kafka-dump-log on segments kafkalog wrote ----------------------------------------------------

DUMP_LINE = re.compile(r"(\w+): (\S*)")


def dump_log(files: list[Path], work: Path) -> dict[Path, list[dict[str, str]]]:
    """``kafka-dump-log --deep-iteration --print-data-log`` of ``files``: per file its batches
    (the batch line's fields) and records (the ``| offset:`` lines' fields, under ``records``)
    as Kafka's tool read them."""
    done = kafka_tool(
        "kafka-dump-log",
        "--deep-iteration",
        "--print-data-log",
        "--files",
        ",".join(map(str, files)),
        work=work,
    )
    out: dict[Path, list[dict]] = {}
    current: list[dict] = []
    for line in done.stdout.splitlines():
        if line.startswith("Dumping "):
            current = out.setdefault(Path(line.removeprefix("Dumping ")), [])
        elif line.startswith("baseOffset: "):
            current.append({**dict(DUMP_LINE.findall(line)), "records": []})
        elif line.startswith("| offset: "):
            current[-1]["records"].append(dict(DUMP_LINE.findall(line)))
    return out


def written_log_dir(log_dir: Path) -> dict[str, list[tuple[int, str | None, str | None]]]:
    """A log dir written by kafkalog's embedded broker: one topic per codec and a compacted
    topic its cleaner cleaned; what each topic's records are (offset, key, value)."""
    from broker_embedded.broker import Broker
    from broker_embedded.common.producer_record import ProducerRecord
    from broker_embedded.record.compression import CompressionType
    from broker_embedded.storage.topic_partition import TopicPartition

    want: dict[str, list[tuple[int, str | None, str | None]]] = {}
    with Broker(log_dir, create=True) as broker:
        for codec in CompressionType:
            name = f"codec-{codec.name.lower()}"
            broker.create_topic(name)
            records = [
                ProducerRecord(f"v{i}".encode(), f"k{i}".encode(), timestamp=1_700_000_000_000 + i)
                for i in range(3)
            ] + [ProducerRecord(None, b"gone")]
            broker.produce(name, 0, records, compression=int(codec))
            want[name] = [(0, "k0", "v0"), (1, "k1", "v1"), (2, "k2", "v2"), (3, "gone", None)]
        broker.create_topic(
            "compacted", config={"cleanup.policy": "compact", "segment.bytes": "200"}
        )
        for i in range(12):
            broker.produce("compacted", 0, [ProducerRecord(f"v{i}".encode(), f"k{i % 3}".encode())])
        cleaner = broker.log_manager.cleaner
        assert cleaner is not None and cleaner.clean_log(TopicPartition("compacted", 0))
        # the last record of each key below the active segment, then the active segment's
        want["compacted"] = [
            (7, "k1", "v7"),
            (8, "k2", "v8"),
            (9, "k0", "v9"),
            (10, "k1", "v10"),
            (11, "k2", "v11"),
        ]
    return want


def transactions_through(kafkalog: ServeProcess, topic: str) -> None:
    """A committed transaction (a, b) then an aborted one (c), by confluent-kafka."""
    from confluent_kafka import Producer

    create_topic(kafkalog.bootstrap, topic)
    producer = Producer({"bootstrap.servers": kafkalog.bootstrap, "transactional.id": topic})
    producer.init_transactions(TIMEOUT_S)
    for values, commit in ((("a", "b"), True), (("c",), False)):
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, v.encode(), f"k{v}".encode())
        producer.flush(TIMEOUT_S)  # sent: an abort would otherwise drop them unsent
        (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT_S)


def _records(batches: list[dict]) -> list[tuple[int, str | None, str | None]]:
    return [
        (int(r["offset"]), r.get("key"), r.get("payload")) for b in batches for r in b["records"]
    ]


def test_kafka_dump_log_reads_what_kafkalog_wrote(kafkalog, tmp_path):
    want = written_log_dir(tmp_path / "logs")
    transactions_through(kafkalog, "dump-txn")
    files = sorted((tmp_path / "logs").glob("*-0/*.log"))
    txn_files = sorted(kafkalog.log_dir.glob("dump-txn-0/*.log"))
    dumped = dump_log(files + txn_files, tmp_path)
    by_topic: dict[str, list[dict]] = {}
    for path, batches in dumped.items():
        by_topic.setdefault(path.parent.name.removesuffix("-0"), []).extend(batches)
    assert {t: _records(b) for t, b in by_topic.items() if t != "dump-txn"} == want
    assert all(b["isvalid"] == "true" for batches in by_topic.values() for b in batches)
    codecs = {t: {b["compresscodec"] for b in by_topic[t]} for t in want if t != "compacted"}
    assert codecs == {f"codec-{c}": {c} for c in ("none", "gzip", "snappy", "lz4", "zstd")}
    txn = [
        (
            b["isTransactional"],
            b["isControl"],
            [r.get("endTxnMarker") or r.get("payload") for r in b["records"]],
        )
        for b in by_topic["dump-txn"]
    ]
    assert txn == [
        ("true", "false", ["a", "b"]),
        ("true", "true", ["COMMIT"]),
        ("true", "false", ["c"]),
        ("true", "true", ["ABORT"]),
    ]


# -- kafka-log-dirs, kafka-acls, kafka-broker-api-versions ---------------------------------------

API_LINE = re.compile(r"^\t(\w+)\((\d+)\): (.*?),?$", re.M)

# deliberate differences of the versions kafkalog serves (kio's schemas reach newer versions;
# versions no client of Kafka 3.x sends are left out), and the APIs kafkalog does not serve
VERSION_DIFFERENCES = {
    "Produce": ("0 to 11 [usable: 11]", "3 to 13 [usable: 11]"),
    "Fetch": ("0 to 17 [usable: 17]", "4 to 18 [usable: 17]"),
    "ListOffsets": ("0 to 9 [usable: 9]", "1 to 11 [usable: 9]"),
    "Metadata": ("0 to 12 [usable: 12]", "0 to 13 [usable: 12]"),
    "OffsetCommit": ("0 to 9 [usable: 9]", "2 to 10 [usable: 9]"),
    "OffsetFetch": ("0 to 9 [usable: 9]", "1 to 10 [usable: 9]"),
    "DescribeGroups": ("0 to 5 [usable: 5]", "0 to 6 [usable: 5]"),
    "CreateTopics": ("0 to 7 [usable: 7]", "2 to 7 [usable: 7]"),
    "DeleteTopics": ("0 to 6 [usable: 6]", "1 to 6 [usable: 6]"),
    "InitProducerId": ("0 to 5 [usable: 5]", "0 to 6 [usable: 5]"),
    "AddPartitionsToTxn": ("0 to 5 [usable: 5]", "0 to 3 [usable: 3]"),
    "DescribeAcls": ("0 to 3 [usable: 3]", "1 to 3 [usable: 3]"),
    "CreateAcls": ("0 to 3 [usable: 3]", "1 to 3 [usable: 3]"),
    "DeleteAcls": ("0 to 3 [usable: 3]", "1 to 3 [usable: 3]"),
    "DescribeConfigs": ("0 to 4 [usable: 4]", "1 to 4 [usable: 4]"),
    "DescribeLogDirs": ("0 to 4 [usable: 4]", "1 to 4 [usable: 4]"),
    "WriteTxnMarkers": ("0 to 1 [usable: 1]", "1 [usable: 1]"),
    "DescribeCluster": ("0 to 1 [usable: 1]", "0 to 2 [usable: 1]"),
}
NOT_SERVED = {
    "SaslHandshake",
    "SaslAuthenticate",  # served on SASL listeners only
    "OffsetForLeaderEpoch",
    "AlterReplicaLogDirs",
    "CreateDelegationToken",
    "RenewDelegationToken",
    "ExpireDelegationToken",
    "DescribeDelegationToken",
    "ElectLeaders",
    "AlterPartitionReassignments",
    "ListPartitionReassignments",
    "DescribeClientQuotas",
    "AlterClientQuotas",
    "DescribeQuorum",
    "UpdateFeatures",
    "UnregisterBroker",
    "ConsumerGroupHeartbeat",
    "ConsumerGroupDescribe",
    "ListClientMetricsResources",
    "DescribeTopicPartitions",
    "AddRaftVoter",
    "RemoveRaftVoter",
}


def test_log_dirs_acls_and_api_versions(kafka39, kafkalog, tmp_path):
    for server in (kafka39, kafkalog):
        kafka_tool(
            "kafka-console-producer",
            "--bootstrap-server",
            server.bootstrap,
            "--topic",
            "ld1",
            stdin="a\n",
            work=tmp_path,
        )
    # one record: two would make a batch of 77 or 78 bytes, as their timestamps are apart
    kafka, ours = both(
        kafka39, kafkalog, tmp_path, "kafka-log-dirs", "--describe", "--topic-list", "ld1"
    )

    def same_ids(text: str) -> str:
        text = re.sub(r'"logDir":"[^"]*"', '"logDir":"DIR"', text)
        return re.sub(r'("broker":|from brokers )\d+', r"\1N", text)

    described = (
        "Querying brokers for log directories information\nReceived log directory "
        'information from brokers N\n{"brokers":[{"broker":N,"logDirs":[{"partitions":'
        '[{"partition":"ld1-0","size":69,"offsetLag":0,"isFuture":false}],"error":null,'
        '"logDir":"DIR"}]}],"version":1}\nexit 0\n'
    )
    assert same_ids(kafka) == same_ids(ours) == described
    # the shared Kafka broker has no authorizer; kafkalog's module server has one
    acl = ("--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "acl1")
    kafka, ours = both(kafka39, kafkalog, tmp_path, "kafka-acls", *acl)
    added = (
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=acl1, "
        "patternType=LITERAL)`: \n \t(principal=User:alice, host=*, operation=READ, "
        "permissionType=ALLOW) \n\n"
    )
    assert kafka.startswith(
        added + "Error while executing ACL command: org.apache.kafka."
        "common.errors.SecurityDisabledException: No Authorizer is "
        "configured.\n"
    )
    assert ours == added + "exit 0\n"
    listed = kafka_tool(
        "kafka-acls",
        "--bootstrap-server",
        kafkalog.bootstrap,
        "--list",
        "--topic",
        "acl1",
        work=tmp_path,
    ).stdout
    assert listed == (
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, "
        "name=acl1, patternType=LITERAL)`: \n \t(principal=User:alice, host=*, "
        "operation=READ, permissionType=ALLOW) \n\n"
    )
    kafka, ours = both(kafka39, kafkalog, tmp_path, "kafka-broker-api-versions")
    theirs = {m.group(1): m.group(3) for m in API_LINE.finditer(kafka)}
    mine = {m.group(1): m.group(3) for m in API_LINE.finditer(ours)}
    assert set(theirs) == set(mine)  # the tool lists every API it knows for both
    differing = {n: (theirs[n], mine[n]) for n in theirs if theirs[n] != mine[n]}
    assert {n: v for n, v in differing.items() if v[1] != "UNSUPPORTED"} == VERSION_DIFFERENCES
    assert {n for n, v in differing.items() if v[1] == "UNSUPPORTED"} == NOT_SERVED


# -- kafka-transactions ---------------------------------------------------------------------------


def hanging_transaction(bootstrap: str, topic: str, txn_id: str) -> object:
    """A transaction left open (one record sent, no commit, a 10-minute timeout); the producer,
    to be kept until the test ends."""
    from confluent_kafka import Producer

    create_topic(bootstrap, topic)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 600_000,
        }
    )
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"x", b"k")
    producer.flush(TIMEOUT_S)
    return producer


def table(text: str, ids: tuple[int, ...] = ()) -> list[list[str]]:
    """A kafka-transactions table: rows of stripped cells, the columns ``ids`` (ids and times
    that must differ) as "N"."""
    rows = [
        [c.strip() for c in line.split("\t")[:-1]] for line in text.splitlines() if "\t" in line
    ]
    return [
        [("N" if i in ids and n else c) for i, c in enumerate(row)] for n, row in enumerate(rows)
    ]


def test_kafka_transactions_list_describe_and_abort_a_hanging_one(kafka39, kafkalog, tmp_path):
    producers = [
        hanging_transaction(s.bootstrap, "kt-hang", "kt-hang-txn") for s in (kafka39, kafkalog)
    ]
    try:
        _transactions_tools(kafka39, kafkalog, tmp_path)
    finally:  # the coordinators still see the transaction open: its producer ends it
        for producer in producers:
            producer.abort_transaction(TIMEOUT_S)  # type: ignore[attr-defined]


def _transactions_tools(kafka39, kafkalog, tmp_path) -> None:
    kafka, ours = both(kafka39, kafkalog, tmp_path, "kafka-transactions", "list")
    mine = [r for r in table(ours, (1, 2)) if r[0] in ("TransactionalId", "kt-hang-txn")]
    assert [r for r in table(kafka, (1, 2)) if r[0] in ("TransactionalId", "kt-hang-txn")] == mine
    assert mine == [
        ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
        ["kt-hang-txn", "N", "N", "Ongoing"],
    ]
    kafka, ours = both(
        kafka39,
        kafkalog,
        tmp_path,
        "kafka-transactions",
        "describe",
        "--transactional-id",
        "kt-hang-txn",
    )
    assert (
        table(kafka, (0, 2, 6, 7))
        == table(ours, (0, 2, 6, 7))
        == [
            [
                "CoordinatorId",
                "TransactionalId",
                "ProducerId",
                "ProducerEpoch",
                "TransactionState",
                "TransactionTimeoutMs",
                "CurrentTransactionStartTimeMs",
                "TransactionDurationMs",
                "TopicPartitions",
            ],
            ["N", "kt-hang-txn", "N", "0", "Ongoing", "600000", "N", "N", "kt-hang-0"],
        ]
    )
    aborted = both(
        kafka39,
        kafkalog,
        tmp_path,
        "kafka-transactions",
        "abort",
        "--topic",
        "kt-hang",
        "--partition",
        "0",
        "--start-offset",
        "0",
    )
    assert aborted == ("exit 0\n",) * 2
    kafka, ours = both(
        kafka39,
        kafkalog,
        tmp_path,
        "kafka-transactions",
        "describe-producers",
        "--topic",
        "kt-hang",
        "--partition",
        "0",
    )
    assert (
        table(kafka, (0, 4))
        == table(ours, (0, 4))
        == [
            [
                "ProducerId",
                "ProducerEpoch",
                "LatestCoordinatorEpoch",
                "LastSequence",
                "LastTimestamp",
                "CurrentTransactionStartOffset",
            ],
            ["N", "0", "0", "0", "N", "None"],  # no transaction open in the partition any more
        ]
    )


# -- kafka-verifiable-producer / kafka-verifiable-consumer ----------------------------------------


def events(text: str) -> list[dict]:
    """The tool's JSON events without their timestamps and throughput."""
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            event.pop("timestamp", None)
            event.pop("avg_throughput", None)
            out.append(event)
    return out


def test_verifiable_producer_and_consumer(kafka39, kafkalog, tmp_path):
    kafka, ours = both(
        kafka39,
        kafkalog,
        tmp_path,
        "kafka-verifiable-producer",
        "--topic",
        "vp1",
        "--max-messages",
        "3",
        "--acks",
        "-1",
    )
    sent = [
        {
            "name": "producer_send_success",
            "key": None,
            "value": str(i),
            "offset": i,
            "topic": "vp1",
            "partition": 0,
        }
        for i in range(3)
    ]
    assert (
        events(kafka)
        == events(ours)
        == [
            {"name": "startup_complete"},
            *sent,
            {"name": "shutdown_complete"},
            {"name": "tool_data", "sent": 3, "acked": 3, "target_throughput": -1},
        ]
    )
    kafka, ours = both(
        kafka39,
        kafkalog,
        tmp_path,
        "kafka-verifiable-consumer",
        "--topic",
        "vp1",
        "--group-id",
        "vp1-group",
        "--max-messages",
        "3",
        "--reset-policy",
        "earliest",
    )
    partitions = [{"topic": "vp1", "partition": 0}]
    assert (
        events(kafka)
        == events(ours)
        == [
            {"name": "startup_complete"},
            {"name": "partitions_assigned", "partitions": partitions},
            {
                "name": "records_consumed",
                "count": 3,
                "partitions": [
                    {"topic": "vp1", "partition": 0, "count": 3, "minOffset": 0, "maxOffset": 2}
                ],
            },
            {
                "name": "offsets_committed",
                "offsets": [{"topic": "vp1", "partition": 0, "offset": 3}],
                "success": True,
            },
            {"name": "partitions_revoked", "partitions": partitions},
            {"name": "shutdown_complete"},
        ]
    )


def commit_offsets(bootstrap: str, group: str, topic: str, offset: int) -> None:
    """Commit ``offset`` for ``group`` on partition 0 of ``topic`` (confluent-kafka)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def test_kafkalog_topics_and_groups_against_kafka39_print_as_kafkas_tools(kafka39, tmp_path):
    bootstrap = ("--bootstrap-server", kafka39.bootstrap)
    created = kafkalog_cli("topics", "create", "klt1", "--partitions", "2", *bootstrap)
    assert (created.returncode, created.stdout) == (0, "Created topic klt1.\n")
    produced = kafkalog_cli(
        "produce", "--topic", "klt1", "--partition", "0", *bootstrap, stdin="a\nb\n"
    )
    assert produced.returncode == 0, produced.stderr
    commit_offsets(kafka39.bootstrap, "klt1-group", "klt1", 1)
    ours = kafkalog_cli("topics", "describe", "klt1", *bootstrap).stdout
    theirs = kafka_tool(
        "kafka-topics", *bootstrap, "--describe", "--topic", "klt1", work=tmp_path
    ).stdout
    assert ours.splitlines()[0] == theirs.splitlines()[0]  # topic, id, counts, configs
    # difference: kafkalog's partition rows add the leader epoch and the offsets where
    # Kafka's show the eligible leader replicas (ELR)
    assert [r.split("\tLeaderEpoch: ")[0] for r in ours.splitlines()[1:]] == [
        r.split("\tElr: ")[0] for r in theirs.splitlines()[1:]
    ]
    assert ours.splitlines()[1].endswith(
        "\tLeaderEpoch: 0\tLogStartOffset: 0\tHighWatermark: 2\tLogEndOffset: 2"
    )
    ours = kafkalog_cli("topics", "list", *bootstrap).stdout
    theirs = kafka_tool("kafka-topics", *bootstrap, "--list", work=tmp_path).stdout
    assert ours == theirs and "klt1\n" in ours
    ours = kafkalog_cli("groups", "describe", "--group", "klt1-group", *bootstrap)
    theirs = kafka_tool(
        "kafka-consumer-groups", *bootstrap, "--describe", "--group", "klt1-group", work=tmp_path
    )
    assert (ours.stdout, ours.stderr) == (theirs.stdout + "\n", theirs.stderr)
    assert re.search(r"klt1-group +klt1 +0 +1 +2 +1 +- +- +-\n$", ours.stdout)
    # difference: kafkalog says what it deleted; Kafka's tool prints nothing
    deleted = kafkalog_cli("topics", "delete", "klt1", *bootstrap)
    assert (deleted.returncode, deleted.stdout) == (0, "Deleted topic klt1.\n")
