"""``kafkalog topics|produce|consume --bootstrap-server``: against a real server (in-process
BrokerServer, or a ``kafkalog serve`` child process) on 127.0.0.1 port 0, each command prints
what its ``--log-dir`` form prints for the same data; kafka-python's consumer is the
independent reader of what ``produce --bootstrap-server`` wrote."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import time
import warnings
from pathlib import Path

import pytest

from broker_embedded.client.default_partitioner import partition_for_key
from spark_kafkalog import topics_command
from tests.broker_embedded.server._serve import served
from tests.spark_kafkalog._serve_proc import ROOT, ServeProcess, child_env, kafkalog_command

LINES = [f"k{i % 7}:value-{i}" for i in range(60)] + ["k1:", "k2:é ü 字"]
PARTITIONS = 3
CONSUME_OPTIONS = [
    "",
    "--property print.key=true --property print.offset=true --property print.partition=true "
    "--property print.timestamp=true --property print.headers=true",
    "--format json",
    "--partition 1 --offset 2",
    "--partition 2 --offset latest",
    "--max-messages 5",
    "--partition 0 --max-messages 4 --format json",
    "--isolation-level read_committed",
]


def log_dir_describe(broker, name: str | None, *, as_json: bool) -> str:
    out = io.StringIO()
    topics_command.describe(broker, None if name is None else [name], out, as_json=as_json)
    return out.getvalue()


def test_topics_over_the_wire_print_what_the_log_dir_commands_print(tmp_path: Path, cli) -> None:
    with served(tmp_path / "logs") as s:
        b = f"--bootstrap-server {s.bootstrap}"
        create = f"topics create {b} orders --partitions 3 --config retention.ms=3600000"
        assert cli(create, "--config", "cleanup.policy=delete") == (
            0,
            "Created topic orders.\n",
            "",
        )
        assert cli(f"topics create {b} audit") == (0, "Created topic audit.\n", "")
        assert cli(f"topics list {b}") == (0, "audit\norders\n", "")
        s.broker.produce("orders", 1, [b"a", b"b", b"c"])
        for name in (None, "orders"):
            for as_json in (False, True):
                command = f"topics describe {b} {name or ''} {'--json' if as_json else ''}"
                code, out, err = cli(command)
                assert (code, err) == (0, "")
                assert out == log_dir_describe(s.broker, name, as_json=as_json)
        text = cli(f"topics describe {b} orders")[1]
        assert "Configs: cleanup.policy=delete,retention.ms=3600000" in text
        assert (
            "\tTopic: orders\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0\tLeaderEpoch: 0\t"
            "LogStartOffset: 0\tHighWatermark: 3\tLogEndOffset: 3\n"
        ) in text
        assert cli(f"topics delete {b} audit") == (0, "Deleted topic audit.\n", "")
        assert cli(f"topics list {b}") == (0, "orders\n", "")
        assert s.broker.list_topics() == ["orders"]
        code, out, err = cli(f"topics create {b} orders")
        assert (code, out) == (1, "")
        assert err.startswith("kafkalog topics create: CreateTopics 'orders' failed")
        assert err.count("\n") == 1 and "TOPIC_ALREADY_EXISTS" in err


def kafka_python_records(bootstrap: str, topic: str) -> list[tuple]:
    """(partition, offset, key, value, headers) of every record, read by kafka-python."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        consumer_timeout_ms=5_000,
        request_timeout_ms=15_000,
    )
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        got = [(m.partition, m.offset, m.key, m.value, tuple(m.headers)) for m in consumer]
    finally:
        consumer.close()
    return sorted(got)


def expected_records() -> list[tuple]:
    """What producing LINES with key separator ':' and header src=cli must store."""
    offsets = [0] * PARTITIONS
    out = []
    for line in LINES:
        key, _, value = line.encode().partition(b":")
        p = partition_for_key(key, PARTITIONS)
        out.append((p, offsets[p], key, value, (("src", b"cli"),)))
        offsets[p] += 1
    return sorted(out)


def test_produce_and_consume_over_the_wire_equal_the_log_dir(tmp_path: Path, cli) -> None:
    log_dir = tmp_path / "logs"
    wire: dict[str, tuple] = {}
    with ServeProcess(log_dir, stderr=tmp_path / "serve.err") as server:
        b = f"--bootstrap-server {server.bootstrap}"
        assert cli(f"topics create {b} t --partitions {PARTITIONS}")[0] == 0
        stdin = ("\n".join(LINES) + "\n").encode()
        code, out, err = cli(
            f"produce {b} --topic t --key-separator : --header src=cli "
            "--batch-size 8 --compression lz4",
            stdin=stdin,
        )
        assert (code, out) == (0, "")
        assert err.startswith(f"Produced {len(LINES)} records in ")
        assert kafka_python_records(server.bootstrap, "t") == expected_records()
        for options in CONSUME_OPTIONS:
            wire[options] = cli(f"consume {b} --topic t {options}")
        assert server.terminate() == 0
    for options in CONSUME_OPTIONS:
        assert wire[options] == cli(f"consume --log-dir {log_dir} --topic t {options}"), options
    records = [json.loads(line) for line in wire["--format json"][1].splitlines()]
    got = sorted(
        (
            r["partition"],
            r["offset"],
            r["key"].encode(),
            r["value"].encode(),
            tuple((h["key"], h["value"].encode()) for h in r["headers"]),
        )
        for r in records
    )
    assert got == expected_records()
    assert wire["--max-messages 5"][2] == "Processed a total of 5 messages (partition 0: 5)\n"


def test_consume_by_timestamp_over_the_wire_equals_the_log_dir(tmp_path: Path, cli) -> None:
    log_dir = tmp_path / "logs"
    with served(log_dir) as s:
        b = f"--bootstrap-server {s.bootstrap}"
        s.broker.create_topic("t", 1)
        from broker_embedded.common.producer_record import ProducerRecord

        s.broker.produce(
            "t", 0, [ProducerRecord(f"v{i}".encode(), timestamp=1000 * i) for i in range(10)]
        )
        wire = {ms: cli(f"consume {b} --topic t --timestamp {ms}") for ms in (0, 4500, 99999)}
        assert cli(f"consume {b} --topic t --partition 3") == (
            1,
            "",
            (
                f"kafkalog consume: topic 't' has no partition 3 on the brokers at {s.bootstrap} "
                "(partitions: 0)\n"
            ),
        )
    for ms, result in wire.items():
        assert result == cli(f"consume --log-dir {log_dir} --topic t --timestamp {ms}")
    assert wire[4500][1] == "".join(f"v{i}\n" for i in range(5, 10))
    assert wire[99999][1] == ""


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("command", ["topics list", "produce --topic t", "consume --topic t"])
def test_an_unreachable_broker_is_a_one_line_error_naming_it(cli, command: str) -> None:
    address = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    code, out, err = cli(f"{command} --bootstrap-server {address}", stdin=b"x\n")
    assert time.monotonic() - started < 10
    assert (code, out) == (1, "")
    assert err.startswith(f"kafkalog {command.split(' -')[0]}: cannot connect to broker {address}")
    assert err.count("\n") == 1


@pytest.mark.parametrize("address", ["nohost", "h:notaport", "h:0"])
def test_a_malformed_bootstrap_address_is_a_one_line_error(cli, address: str) -> None:
    code, out, err = cli(f"consume --topic t --bootstrap-server {address}")
    assert (code, out) == (1, "")
    assert err == (
        f"kafkalog consume: --bootstrap-server {address!r}: {address!r} is not HOST:PORT\n"
    )


@pytest.mark.parametrize("command", ["topics list", "produce --topic t", "consume --topic t"])
def test_exactly_one_of_log_dir_and_bootstrap_server(tmp_path: Path, cli, command: str) -> None:
    expected = (
        f"kafkalog {command.split(' -')[0]}: exactly one of --log-dir and --bootstrap-server is "
        "required\n"
    )
    assert cli(command) == (2, "", expected)
    both = f"{command} --log-dir {tmp_path} --bootstrap-server 127.0.0.1:9092"
    assert cli(both) == (2, "", expected)


def test_without_kio_bootstrap_server_is_refused_in_one_line(tmp_path: Path) -> None:
    command = kafkalog_command("consume", "--topic", "t", "--bootstrap-server", "127.0.0.1:9")
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=child_env(KAFKALOG_HIDE_KIO="1"),
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(
        "kafkalog consume: --bootstrap-server needs Python 3.11+ with kio (the protocol schemas"
    )
    assert done.stderr.count("\n") == 1


def test_read_committed_over_the_wire_skips_aborted_as_the_log_dir_does(
    tmp_path: Path, cli
) -> None:
    from broker_embedded.client.transactional_producer import TransactionalProducer

    log_dir = tmp_path / "logs"
    options = [
        "--isolation-level read_committed",
        "--isolation-level read_uncommitted",
        "--isolation-level read_committed --format json",
    ]
    with served(log_dir) as s:
        s.broker.create_topic("t", 1)
        producer = TransactionalProducer(s.broker, "tx")
        for i, end in enumerate(["commit", "abort", "commit", "abort"]):
            producer.begin()
            producer.send("t", 0, [f"{end}-{i}-{j}".encode() for j in range(3)])
            getattr(producer, end)()
        s.broker.produce("t", 0, [b"plain"])
        b = f"--bootstrap-server {s.bootstrap}"
        wire = {o: cli(f"consume {b} --topic t {o}") for o in options}
    for o in options:
        assert wire[o] == cli(f"consume --log-dir {log_dir} --topic t {o}"), o
    committed = [f"commit-{i}-{j}" for i in (0, 2) for j in range(3)] + ["plain"]
    assert wire[options[0]][1] == "".join(v + "\n" for v in committed)
    assert wire[options[1]][1].count("\n") == 13
