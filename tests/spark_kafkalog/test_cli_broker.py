"""``kafkalog topics``, ``produce`` and ``consume``: run in-process through ``cli.main(argv)``
(stdin, stdout and stderr captured), against a real broker on a temp log dir and fixture log dirs
written by real Kafka brokers (copied first), with kafka-python's partitioner and record parser
as oracles, and a broker in a child process holding the log dir's lock."""

from __future__ import annotations

import base64
import json
import random
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from broker_embedded.broker import Broker
from broker_embedded.client.default_partitioner import partition_for_key
from broker_embedded.common.producer_record import ProducerRecord
from broker_embedded.storage.log_dir import LogDir
from spark_kafkalog.cli import main
from tests.broker_embedded.record._peers import kafka_python_read_records
from tests.fixture_paths import FIXTURES

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import DefaultPartitioner
    from kafka.record.memory_records import MemoryRecords as KafkaPythonMemoryRecords

BITNAMI = FIXTURES / "kafka-logdirs" / "kafka-bitnami-rolled"
KAFKA_37 = FIXTURES / "kafka-logdirs" / "kafka-3.7-ldi-poc"
BITNAMI_TOPIC = "product-created-events-topic"
ROOT = Path(__file__).resolve().parents[2]


# -- helpers ---------------------------------------------------------------------------------------


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "logs"


def copy_tree(src: Path, dst: Path) -> Path:
    """A writable copy of a read-only fixture directory."""
    shutil.copytree(src, dst)
    for p in [dst, *dst.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def decoded(v):
    """A key or value of consume's JSON output back to bytes."""
    if v is None:
        return None
    if isinstance(v, dict):
        return base64.b64decode(v["base64"])
    return v.encode("utf-8")


def assert_error(result: tuple[int, str, str], *needles: str) -> None:
    code, out, err = result
    assert code == 1, (out, err)
    assert err.splitlines()[-1].startswith("kafkalog ") and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


class _Cluster:
    """The part of kafka-python's ClusterMetadata that its DefaultPartitioner reads."""

    def __init__(self, partitions: int) -> None:
        self.parts = set(range(partitions))

    def topics(self):
        return {"t"}

    def partitions_for_topic(self, topic):
        return self.parts

    def available_partitions_for_topic(self, topic):
        return self.parts


def kafka_python_partition(key: bytes, partitions: int) -> int:
    return DefaultPartitioner().partition("t", None, key, None, None, _Cluster(partitions))


# -- murmur2 and placement -------------------------------------------------------------------------


def test_keyed_placement_equals_kafka_python() -> None:
    rng = random.Random(7)
    for i in range(300):
        key = rng.randbytes(rng.randrange(0, 70 if i % 10 else 7))
        n = rng.randrange(1, 40)
        assert partition_for_key(key, n) == kafka_python_partition(key, n), (key, n)


# -- topics ----------------------------------------------------------------------------------------


def test_topics_create_list_describe_delete(cli, log_dir: Path) -> None:
    d = f"--log-dir {log_dir}"
    result = cli(
        f"topics create orders {d} --partitions 3 --config retention.ms=3600000 "
        "--config cleanup.policy=delete"
    )
    assert result == (0, "Created topic orders.\n", "")
    assert cli(f"topics create audit {d}")[0] == 0
    assert cli(f"topics list {d}") == (0, "audit\norders\n", "")

    code, out, _ = cli(f"topics describe orders {d}")
    assert code == 0
    head, *parts = out.splitlines()
    assert head.startswith("Topic: orders\tTopicId: ")
    assert head.endswith(
        "PartitionCount: 3\tReplicationFactor: 1\t"
        "Configs: cleanup.policy=delete,retention.ms=3600000"
    )
    assert len(parts) == 3
    assert parts[1].startswith("\tTopic: orders\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0\t")
    assert parts[1].endswith("LogStartOffset: 0\tHighWatermark: 0\tLogEndOffset: 0")

    assert cli(f"produce {d} --topic orders --partition 1", stdin=b"a\nb\n")[0] == 0
    code, out, _ = cli(f"topics describe --json {d}")
    topics = json_lines(out)
    assert [t["topic"] for t in topics] == ["audit", "orders"]
    orders = topics[1]
    assert orders["configs"] == {"cleanup.policy": "delete", "retention.ms": "3600000"}
    assert orders["effectiveConfigs"]["retention.ms"] == "3600000"
    assert orders["effectiveConfigs"]["segment.bytes"] == "1073741824"
    p1 = orders["partitions"][1]
    assert (p1["leader"], p1["replicas"], p1["isr"]) == (0, [0], [0])
    assert (p1["logStartOffset"], p1["highWatermark"], p1["logEndOffset"]) == (0, 2, 2)
    assert p1["lastStableOffset"] == 2 and p1["leaderEpoch"] >= 0

    assert cli(f"topics delete orders {d}") == (0, "Deleted topic orders.\n", "")
    assert cli(f"topics list {d}") == (0, "audit\n", "")
    assert not (log_dir / "orders-0").exists()


# -- produce, then consume back --------------------------------------------------------------------


LINES = [
    "k1|hello",
    "k2|wörld ✓",
    "k1|second for k1",
    "user-42|",
    "k3|value|with|bars",
    "|empty key",
    "k4|" + "x" * 3000,
] + [f"key-{i}|value-{i}" for i in range(60)]


def test_produce_keyed_lines_then_consume_json(cli, log_dir: Path) -> None:
    d = f"--log-dir {log_dir}"
    cli(f"topics create t {d} --partitions 4")
    stdin = "".join(line + "\n" for line in LINES).encode("utf-8")
    code, out, err = cli(
        f"produce {d} --topic t --key-separator '|' --header source=cli --header n= "
        "--batch-size 5 --acks 1",
        stdin=stdin,
    )
    assert code == 0 and out == ""
    assert err.startswith(f"Produced {len(LINES)} records in ")

    code, out, err = cli(f"consume {d} --topic t --format json")
    assert code == 0 and err.startswith(f"Processed a total of {len(LINES)} messages")
    expected: dict[int, list[tuple[bytes, bytes]]] = {}
    for line in LINES:
        key, _, value = line.encode("utf-8").partition(b"|")
        expected.setdefault(kafka_python_partition(key, 4), []).append((key, value))
    got: dict[int, list[tuple[bytes, bytes]]] = {}
    rows = json_lines(out)
    for r in rows:
        assert r["topic"] == "t" and r["timestampType"] == "CreateTime"
        assert r["headers"] == [{"key": "source", "value": "cli"}, {"key": "n", "value": ""}]
        assert r["offset"] == len(got.get(r["partition"], []))  # contiguous from 0
        got.setdefault(r["partition"], []).append((decoded(r["key"]), decoded(r["value"])))
    assert got == expected
    assert [r["partition"] for r in rows] == sorted(r["partition"] for r in rows)


def test_keyless_lines_round_robin_and_text_output(cli, log_dir: Path) -> None:
    d = f"--log-dir {log_dir}"
    cli(f"topics create t {d} --partitions 3")
    lines = [f"line {i}" for i in range(10)] + ["", "tab\there", "trailing space "]
    stdin = "\n".join(lines).encode() + b"\n"
    code, _, err = cli(f"produce {d} --topic t --batch-size 2", stdin=stdin)
    assert code == 0, err
    assert "partition 0: 5 records in 3 batches, offsets 0..4" in err
    for p in range(3):
        _, out, _ = cli(f"consume {d} --topic t --partition {p}")
        assert out == "".join(f"{v}\n" for v in lines[p::3])
    _, out, _ = cli(
        f"consume {d} --topic t --partition 1 --property print.key=true "
        "--property print.offset=true --property print.partition=true "
        "--property print.headers=true --property 'key.separator= | ' "
        "--property null.literal=<null>"
    )
    assert out.splitlines()[0] == "Partition:1 | Offset:0 | NO_HEADERS | <null> | line 1"


def test_last_line_without_newline_and_cr_kept(cli, log_dir: Path) -> None:
    d = f"--log-dir {log_dir}"
    cli(f"topics create t {d}")
    code, _, err = cli(f"produce {d} --topic t --acks 0", stdin=b"a\r\nb")
    assert code == 0 and "offsets 0..1" in err
    _, out, _ = cli(f"consume {d} --topic t --format json")
    assert [r["value"] for r in json_lines(out)] == ["a\r", "b"]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_round_trips(cli, log_dir: Path, codec: str) -> None:
    d = f"--log-dir {log_dir}"
    cli(f"topics create t {d}")
    lines = [f"{i}:{'v' * (i % 50)}" for i in range(300)]
    stdin = "\n".join(lines).encode() + b"\n"
    code, _, err = cli(
        f"produce {d} --topic t --compression {codec} --key-separator : --batch-size 100",
        stdin=stdin,
    )
    assert code == 0 and "300 records in 3 batches" in err
    (segment,) = (log_dir / "t-0").glob("*.log")
    assert len(kafka_python_read_records(segment.read_bytes())) == 300
    _, out, _ = cli(f"consume {d} --topic t --property print.key=true --property key.separator=:")
    assert out.splitlines() == lines


def test_consume_binary_values_offsets_timestamps_and_max_messages(cli, log_dir: Path) -> None:
    with Broker(log_dir, create=True) as broker:
        broker.create_topic("bin", 1)
        records = [
            ProducerRecord(
                bytes([i, 0xFF, 0xFE]),
                b"\xc3\x28" if i % 2 else None,
                (("h", b"\x80"),),
                timestamp=1_700_000_000_000 + 10 * i,
            )
            for i in range(20)
        ]
        broker.produce("bin", 0, records[:10], acks=1)
        broker.produce("bin", 0, records[10:], acks=1)
    d = f"--log-dir {log_dir} --topic bin"
    _, out, _ = cli(f"consume {d} --format json")
    rows = json_lines(out)
    assert [r["offset"] for r in rows] == list(range(20))
    assert [(decoded(r["key"]), decoded(r["value"])) for r in rows] == [
        (r.key, r.value) for r in records
    ]
    assert rows[1]["key"] == {"base64": base64.b64encode(b"\xc3\x28").decode()}
    assert rows[0]["headers"] == [{"key": "h", "value": {"base64": "gA=="}}]
    assert [r["timestamp"] for r in rows] == [r.timestamp for r in records]

    _, out, err = cli(f"consume {d} --partition 0 --offset 13 --max-messages 4 --format json")
    assert [r["offset"] for r in json_lines(out)] == [13, 14, 15, 16]
    assert "Processed a total of 4 messages" in err
    _, out, _ = cli(f"consume {d} --timestamp {1_700_000_000_000 + 75} --format json")
    assert [r["offset"] for r in json_lines(out)] == list(range(8, 20))
    assert cli(f"consume {d} --timestamp 1800000000000")[:2] == (0, "")
    assert cli(f"consume {d} --partition 0 --offset latest")[:2] == (0, "")
    _, out, _ = cli(f"consume {d} --partition 0 --offset earliest --max-messages 1 --format json")
    assert [r["offset"] for r in json_lines(out)] == [0]


def test_text_output_is_the_raw_bytes(capsysbinary, log_dir: Path) -> None:
    with Broker(log_dir, create=True) as broker:
        broker.create_topic("bin", 1)
        records = [
            ProducerRecord(b"\x00\xff\n", b"\xc3\x28", timestamp=5),
            ProducerRecord(None, None, timestamp=6),
        ]
        broker.produce("bin", 0, records, acks=1)
    argv = f"consume --log-dir {log_dir} --topic bin --property print.timestamp=true "
    assert main((argv + "--property print.key=true").split()) == 0
    out, err = capsysbinary.readouterr()
    assert out == b"CreateTime:5\t\xc3\x28\t\x00\xff\n\nCreateTime:6\tnull\tnull\n"


def test_consume_reads_in_steps_of_at_most_one_mib(cli, monkeypatch, log_dir: Path) -> None:
    import spark_kafkalog.console_consumer as cc

    fetched: list[int] = []
    original = cc.PartitionReader.fetch

    def spy(self, offset, max_bytes, *args, **kwargs):
        assert max_bytes == 1 << 20
        info = original(self, offset, max_bytes, *args, **kwargs)
        fetched.append(len(info.records))
        return info

    monkeypatch.setattr(cc.PartitionReader, "fetch", spy)
    with Broker(log_dir, create=True) as broker:
        broker.create_topic("big", 1)
        for i in range(6):
            broker.produce("big", 0, [bytes([65 + i]) * 1000] * 500, acks=1)  # 0.5 MB each
    code, out, err = cli(f"consume --log-dir {log_dir} --topic big")
    assert code == 0
    assert out.splitlines() == [chr(65 + i) * 1000 for i in range(6) for _ in range(500)]
    assert len(fetched) >= 3 and max(fetched) <= 1 << 20


def test_read_committed_skips_aborted_and_stops_at_lso(cli, log_dir: Path) -> None:
    with Broker(log_dir, create=True) as broker:
        broker.create_topic("tx", 1)
        broker.produce("tx", 0, [b"plain-0"], acks=1)
        producer = broker.transactional_producer("tid")
        producer.begin()
        producer.send("tx", 0, [b"committed-1", b"committed-2"])
        producer.commit()
        producer.begin()
        producer.send("tx", 0, [b"aborted-1"])
        producer.abort()
        broker.produce("tx", 0, [b"plain-1"], acks=1)
        producer.begin()
        producer.send("tx", 0, [b"open-1"])
        broker.produce("tx", 0, [b"plain-2"], acks=1)
        # closing leaves that transaction open on disk, as a broker whose producer went away

    def values(extra: str = "") -> list[str]:
        code, out, err = cli(f"consume --log-dir {log_dir} --topic tx {extra}")
        assert code == 0, err
        return out.splitlines()

    assert values() == [
        "plain-0",
        "committed-1",
        "committed-2",
        "aborted-1",
        "plain-1",
        "open-1",
        "plain-2",
    ]
    assert values("--isolation-level read_committed") == [
        "plain-0",
        "committed-1",
        "committed-2",
        "plain-1",
    ]


# -- real Kafka log dirs ---------------------------------------------------------------------------


def peer_rows(partition_dir: Path, high_watermark: int | None) -> list[tuple]:
    """kafka-python's reading of a partition's segments as a consumer sees them: the records of
    data batches (control batches skipped) below the HW."""
    rows = []
    for seg in sorted(partition_dir.glob("*.log")):
        records = KafkaPythonMemoryRecords(seg.read_bytes())
        while (batch := records.next_batch()) is not None:
            if getattr(batch, "is_control_batch", False):
                continue
            for r in batch:
                if high_watermark is None or r.offset < high_watermark:
                    headers = [(k, v) for k, v in r.headers or ()]
                    rows.append((r.offset, r.timestamp, r.key, r.value, headers))
    return rows


def consumed_rows(out: str) -> list[tuple]:
    return [
        (
            r["offset"],
            r["timestamp"],
            decoded(r["key"]),
            decoded(r["value"]),
            [(h["key"], decoded(h["value"])) for h in r["headers"]],
        )
        for r in json_lines(out)
    ]


def test_consume_bitnami_log_dir_equals_kafka_python(cli, tmp_path: Path) -> None:
    logs = copy_tree(BITNAMI, tmp_path / "bitnami")
    hw = LogDir(logs).high_watermarks
    d = f"--log-dir {logs}"
    code, out, err = cli(f"consume {d} --topic {BITNAMI_TOPIC} --format json")
    assert code == 0, err
    rows = json_lines(out)
    assert {r["partition"] for r in rows} == {2} and len(rows) == 5
    tp = next(tp for tp in hw if tp.topic == BITNAMI_TOPIC and tp.partition == 2)
    assert consumed_rows(out) == peer_rows(logs / f"{BITNAMI_TOPIC}-2", hw[tp])
    assert all(r["headers"][0]["key"] == "__TypeId__" for r in rows)
    # a timestamp between records 1 and 2 starts at 2 (through the fixture's time index)
    ts = rows[1]["timestamp"] + 1
    _, out, _ = cli(f"consume {d} --topic {BITNAMI_TOPIC} --timestamp {ts} --format json")
    assert [r["offset"] for r in json_lines(out)] == [2, 3, 4]
    # the KRaft metadata log, across its rolled segment
    code, out, err = cli(f"consume {d} --topic __cluster_metadata --format json")
    assert code == 0, err
    assert consumed_rows(out) == peer_rows(logs / "__cluster_metadata-0", None)
    assert len(json_lines(out)) > 14667
    assert sorted(p.name for p in logs.iterdir()) == sorted(p.name for p in BITNAMI.iterdir())


@pytest.mark.parametrize("partition_dir", ["TestTopicPatient-0", "__consumer_offsets-6"])
def test_consume_kafka_37_log_dir_equals_kafka_python(cli, tmp_path, partition_dir) -> None:
    logs = copy_tree(KAFKA_37, tmp_path / "k37")
    topic, partition = partition_dir.rsplit("-", 1)
    code, out, err = cli(f"consume --log-dir {logs} --topic {topic} --format json")
    assert code == 0, err
    assert consumed_rows(out) and consumed_rows(out) == peer_rows(logs / partition_dir, None)
    assert {r["partition"] for r in json_lines(out)} == {int(partition)}


# -- a broker in another process owns the log dir --------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from broker_embedded.broker import Broker
    broker = Broker(sys.argv[1], create=True)
    broker.create_topic("live", 2)
    broker.produce("live", 1, [b"from-child-%d" % i for i in range(5)], acks=1)
    broker.log_manager.checkpoint()  # publish the HW now rather than within 100 ms
    print("ready", flush=True)
    sys.stdin.read()
    broker.close()
    """
)


def test_locked_log_dir_fails_cleanly_and_consume_still_reads(cli, log_dir: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(log_dir)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    d = f"--log-dir {log_dir}"
    try:
        assert child.stdout.readline().strip() == "ready"
        for command in (
            "topics list",
            "topics create other",
            "topics describe live",
            "topics delete live",
        ):
            assert_error(
                cli(f"{command} {d}"), "is locked by", f"pid {child.pid}", "another process"
            )
        assert_error(cli(f"produce {d} --topic live", stdin=b"x\n"), "is locked by")

        # the installed console script, as a user runs it
        exe = Path(sys.executable).parent / "kafkalog"
        result = subprocess.run(
            [str(exe), "topics", "list", "--log-dir", str(log_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 1 and result.stdout == ""
        assert result.stderr.startswith(f"kafkalog topics list: log dir {log_dir} is locked by")
        assert "Traceback" not in result.stderr and f"pid {child.pid}" in result.stderr

        code, out, err = cli(f"consume {d} --topic live")
        assert code == 0, err
        assert out.splitlines() == [f"from-child-{i}" for i in range(5)]
    finally:
        child.stdin.close()
        assert child.wait(timeout=30) == 0
    assert cli(f"topics list {d}") == (0, "live\n", "")


# -- errors ----------------------------------------------------------------------------------------


@pytest.fixture
def topic_t(cli, log_dir: Path) -> str:
    """A log dir holding topic ``t`` (2 partitions; a, b, c in partition 0): its --log-dir."""
    d = f"--log-dir {log_dir}"
    cli(f"topics create t {d} --partitions 2")
    cli(f"produce {d} --topic t --partition 0", stdin=b"a\nb\nc\n")
    return d


def test_unknown_topic(cli, topic_t: str) -> None:
    d = topic_t
    assert_error(cli(f"consume {d} --topic nope"), "topic 'nope' does not exist", "(topics: t)")
    assert_error(cli(f"produce {d} --topic nope", stdin=b"x\n"), "topic 'nope' does not exist")
    assert_error(cli(f"topics describe nope {d}"), "topic 'nope' does not exist")
    assert_error(cli(f"topics delete nope {d}"), "topic 'nope' does not exist")
    assert_error(cli(f"topics create t {d}"), "topic 't' already exists")


def test_partition_and_offset_out_of_range(cli, topic_t: str) -> None:
    d = f"{topic_t} --topic t"
    assert_error(cli(f"consume {d} --partition 2"), "topic 't' has no partition 2", "0, 1")
    assert_error(
        cli(f"produce {d} --partition 5", stdin=b"x\n"), "topic 't' has no partition 5", "0..1"
    )
    result = cli(f"consume {d} --partition 0 --offset 4")
    assert_error(result, "offset 4 of topic 't' partition 0 is out of range", "[0, 3]")
    assert result[1] == ""
    assert cli(f"consume {d} --partition 0 --offset 3")[:2] == (0, "")  # the HW: nothing to read
    assert_error(cli(f"consume {d} --offset 1"), "--offset needs --partition")
    assert_error(cli(f"consume {d} --partition 0 --offset first"), "--offset must be earliest")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "does not exist"),
        ("[broker\n", "is not valid TOML"),
        ('[broker]\n"no.such.key" = 1\n', "unknown broker config 'no.such.key'"),
        ('[topic_defaults]\n"segment.bytes" = "big"\n', "segment.bytes"),
    ],
)
def test_bad_broker_config_file(cli, topic_t: str, tmp_path: Path, content, needle) -> None:
    conf = tmp_path / "broker.toml"
    if content is not None:
        conf.write_text(content)
    for command in (
        f"topics list {topic_t} --broker-config {conf}",
        f"consume {topic_t} --topic t --broker-config {conf}",
        f"produce {topic_t} --topic t --broker-config {conf}",
        f"topics create u {topic_t} --config retention.ms=1 --broker-config {conf}",
    ):
        assert_error(cli(command, stdin=b"x\n"), needle, str(conf))


def test_good_broker_config_file_sets_topic_defaults(cli, log_dir: Path, tmp_path) -> None:
    conf = tmp_path / "broker.toml"
    conf.write_text('[topic_defaults]\n"retention.ms" = 1234\n')
    d = f"--log-dir {log_dir}"
    code, _, err = cli(f"topics create t {d} --config segment.bytes=1048576 --broker-config {conf}")
    assert code == 0, err
    _, out, _ = cli(f"topics describe t --json {d} --broker-config {conf}")
    t = json_lines(out)[0]
    assert t["configs"] == {"segment.bytes": "1048576"}
    assert t["effectiveConfigs"]["retention.ms"] == "1234"
    _, out, _ = cli(f"topics describe t --json {d}")  # the built-in defaults
    assert json_lines(out)[0]["effectiveConfigs"]["retention.ms"] == "604800000"
    assert_error(cli(f"topics create u {d} --config {conf}"), "is not of the form key=value")


def test_invalid_topic_names_and_topic_configs(cli, log_dir: Path) -> None:
    d = f"--log-dir {log_dir}"
    assert_error(cli(f"topics create 'bad name' {d}"), "topic name 'bad name' is illegal")
    assert cli(f"topics create t {d}")[0] == 0
    assert_error(cli(f"consume {d} --topic a/b"), "topic name 'a/b' is illegal")
    assert_error(cli(f"produce {d} --topic ..", stdin=b"x\n"), "topic name '..' is illegal")
    assert_error(cli(f"topics create u {d} --config no.such=1"), "unknown config 'no.such'")
    assert_error(cli(f"topics create u {d} --config retention.ms=soon"), "retention.ms", "soon")
    assert_error(cli(f"topics create u {d} --replication-factor 3"), "replication factor 3")
    assert cli(f"topics create a.b {d}")[0] == 0
    assert cli(f"topics create a_b {d}") == (
        1,
        "",
        "kafkalog topics create: Topic 'a_b' collides with existing topic: a.b\n",
    )
    assert cli(f"topics list {d}") == (0, "a.b\nt\n", "")


def test_produce_input_errors_name_the_line(cli, log_dir: Path) -> None:
    d = f"--log-dir {log_dir} --topic t"
    cli(f"topics create t --log-dir {log_dir}")
    result = cli(f"produce {d} --key-separator '=>'", stdin=b"a=>1\nb=>2\nno separator\nc=>3\n")
    assert_error(result, "line 3 has no key separator '=>'")
    assert "Produced 2 records" in result[2]  # the lines before it went in
    result = cli(f"produce {d}", stdin=b"ok\n\xff\xfe\n")
    assert_error(result, "line 2 of the input is not valid UTF-8")
    result = cli(f"produce {d} --header novalue", stdin=b"x\n")
    assert_error(result, "--header 'novalue' is not of the form key=value")
    assert cli(f"consume {d}")[1] == "1\n2\nok\n"


def test_record_too_large_names_the_lines(cli, log_dir: Path) -> None:
    d = f"--log-dir {log_dir}"
    cli(f"topics create t {d} --config max.message.bytes=1000")
    result = cli(f"produce {d} --topic t", stdin=b"small\n" * 30 + b"y" * 2000 + b"\n")
    assert_error(result, "lines 31..31", "partition 0", "max.message.bytes 1000")
    assert "Produced 30 records in " in result[2]  # in batches under max.message.bytes
    assert cli(f"consume {d} --topic t")[1] == "small\n" * 30


def test_missing_log_dir_bad_property_and_usage(cli, tmp_path: Path, topic_t: str) -> None:
    missing = tmp_path / "missing"
    for command in ("topics list", "consume --topic t", "produce --topic t"):
        result = cli(f"{command} --log-dir {missing}", stdin=b"x\n")
        assert_error(result, f"log dir {missing} does not exist")
    assert not missing.exists()
    d = f"{topic_t} --topic t"
    assert_error(cli(f"consume {d} --property print.colour=true"), "unknown --property print.colo")
    assert_error(cli(f"consume {d} --property print.key=yes"), "print.key must be true or false")
    assert_error(cli(f"consume {d} --format json --property print.key=true"), "--format text only")
    assert cli("consume --topic t") == (
        2,
        "",
        "kafkalog consume: exactly one of --log-dir and --bootstrap-server is required\n",
    )
    for usage in (
        f"consume {d} --from-beginning --timestamp 5",
        f"consume {d} --max-messages -1",
        f"produce {d} --acks 2",
    ):
        with pytest.raises(SystemExit) as exc:
            cli(usage)
        assert exc.value.code == 2


def test_help_text(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for needle in (
        "topics create NAME",
        "produce --topic T",
        "consume --topic T",
        "--log-dir",
        "dump PATH",
        "kafka-console-consumer",
        "Exit status",
    ):
        assert needle in out
