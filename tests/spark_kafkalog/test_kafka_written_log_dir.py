"""A log dir that a live Apache Kafka 3.9 wrote, read and written by kafkalog (issue 28 part 3).

Module fixture :func:`kafka_written`: its own Kafka 3.9 broker (tests/kafka39.py, its log dir
``RUN_DIR/data``) takes every codec, committed and aborted transactions, a topic its cleaner
cleaned, a topic whose retention deleted segments, LogAppendTime, committed group offsets
(_kafka_written.py); Kafka's consumer reads everything back in both isolation levels (the
expected rows), and Kafka stops cleanly. Then kafkalog on that log dir, with no
``kafkalog-topics.json`` (its topics come from Kafka's metadata log, cluster_metadata_log.py):
``kafkalog consume``, ``dump --verify``, ``groups describe``, Spark ``format("kafkalog")`` in both
isolation levels and ``view=latest``, all equal to what Kafka's consumer read; ``kafkalog serve``
on a copy serves the same rows to Kafka's consumer; ``df.write.format("kafkalog")`` appends to a
copy, and Kafka 3.9 started again on it reads the old and the new records. Skips without
``KAFKALOG_PEERS`` or Java.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest

from tests.kafka39 import kafka_broker
from tests.spark_kafkalog import _kafka_written as kw
from tests.spark_kafkalog._serve_proc import ServeProcess

ISOLATIONS = ("read_committed", "read_uncommitted")


@pytest.fixture(scope="module")
def kafka_written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    run = tmp_path_factory.mktemp("kafka39-written")
    with kafka_broker(run, kw.BROKER_OVERRIDES) as kafka:
        kw.populate(kafka.bootstrap, run / "data")
        expected = {iso: kw.read_all(kafka.bootstrap, iso) for iso in ISOLATIONS}
        assert kw.group_offsets(kafka.bootstrap) == kw.GROUP_OFFSETS
    assert not (run / "data" / "kafkalog-topics.json").exists()
    return run / "data", expected


def test_kafka_consumer_read_what_was_produced(kafka_written) -> None:
    """The reference itself, exactly: counts, keys, values, headers, timestamps, offsets."""
    _, expected = kafka_written
    committed, everything = expected["read_committed"], expected["read_uncommitted"]
    for codec in kw.CODECS:
        topic = f"c-{codec}"
        want = [(topic, 0, i, *_codec_row(codec, i)) for i in range(kw.CODEC_RECORDS)]
        assert committed[topic] == everything[topic] == want
    aborted = [r for r in everything["txn"] if r[4].startswith(b"t2-")]
    assert len(everything["txn"]) == 45 and len(aborted) == 15
    assert committed["txn"] == [r for r in everything["txn"] if r not in aborted]
    assert sorted(r[4] for r in committed["txn"]) == sorted(
        [f"t1-{i}".encode() for i in range(20)] + [f"t3-{i}".encode() for i in range(10)]
    )
    # the cleaner kept the latest of each key below the active segment, then the active one
    assert [(r[2], r[3], r[4]) for r in committed["compacted"]] == [
        *[(30 + i, f"k{i}".encode(), f"r3-{i}".encode() * 8) for i in range(10)],
        (40, b"k3", None),
        (41, b"k9", b"last"),
    ]
    retained = committed["retention"]
    assert retained and retained[0][2] > 0 and retained[-1][2] == 59
    assert [r[2] for r in retained] == list(range(retained[0][2], 60))
    assert [r[4] for r in committed["logappend"]] == [f"la-{i}".encode() for i in range(20)]
    assert {r[6] for r in committed["logappend"]} == {1}  # LogAppendTime


def _codec_row(codec: str, i: int) -> tuple:
    key, value, headers, ts = kw.codec_record(codec, i)
    return key, value, tuple(headers), 0, ts


def test_consume_equals_kafka(kafka_written, cli) -> None:
    log_dir, expected = kafka_written
    for iso in ISOLATIONS:
        for topic, rows in expected[iso].items():
            code, out, err = cli(
                f"consume --log-dir {log_dir} --topic {topic} --format json --isolation-level {iso}"
            )
            assert code == 0, err
            assert [_json_row(json.loads(line)) for line in out.splitlines()] == rows, (iso, topic)


def _bytes(v: str | dict | None) -> bytes | None:
    if v is None:
        return None
    return base64.b64decode(v["base64"]) if isinstance(v, dict) else v.encode("utf-8")


def _json_row(j: dict) -> tuple:
    headers = tuple((h["key"], _bytes(h["value"])) for h in j["headers"])
    ts_type = {"CreateTime": 0, "LogAppendTime": 1}[j["timestampType"]]
    return (
        j["topic"],
        j["partition"],
        j["offset"],
        _bytes(j["key"]),
        _bytes(j["value"]),
        headers,
        ts_type,
        j["timestamp"],
    )


def test_dump_verify(kafka_written, cli) -> None:
    log_dir, expected = kafka_written
    code, out, err = cli(f"dump --verify --summary {log_dir}")
    assert code == 0, err
    records: dict[str, int] = {}
    for line in out.splitlines():
        if line.startswith("Summary "):
            path, _, rest = line[len("Summary ") :].partition(": ")
            assert rest.endswith("invalid CRCs 0"), line
            name = Path(path).parent.name
            records[name] = records.get(name, 0) + int(rest.split(" batches, ")[1].split()[0])
    everything = expected["read_uncommitted"]
    for codec in kw.CODECS:
        assert records[f"c-{codec}-0"] == kw.CODEC_RECORDS
    assert records["compacted-0"] == len(everything["compacted"])
    assert records["retention-0"] == len(everything["retention"])
    # the transaction markers: one per transaction and partition
    assert records["txn-0"] + records["txn-1"] == len(everything["txn"]) + 3 * 2


def test_groups_describe(kafka_written, cli) -> None:
    log_dir, _ = kafka_written
    code, out, err = cli(f"groups describe --log-dir {log_dir}")
    assert code == 0, err
    found = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) == 9 and cols[0] in kw.GROUP_OFFSETS:
            found.setdefault(cols[0], {})[(cols[1], int(cols[2]))] = int(cols[3])
    assert found == kw.GROUP_OFFSETS


def _spark_rows(spark, log_dir: Path, iso: str, topics: list[str]) -> dict[str, list[tuple]]:
    df = (
        spark.read.format("kafkalog")
        .option("subscribe", ",".join(topics))
        .option("includeHeaders", "true")
        .option("kafka.isolation.level", iso)
        .load(str(log_dir))
    )
    out: dict[str, list[tuple]] = {t: [] for t in topics}
    df = df.selectExpr("*", "unix_millis(timestamp) AS millis")
    for r in df.orderBy("topic", "partition", "offset").collect():
        headers = tuple(
            (h["key"], None if h["value"] is None else bytes(h["value"]))
            for h in r["headers"] or ()
        )
        out[r["topic"]].append(
            (
                r["topic"],
                r["partition"],
                r["offset"],
                _opt(r["key"]),
                _opt(r["value"]),
                headers,
                r["timestampType"],
                r["millis"],
            )
        )
    return out


def _opt(v: bytearray | None) -> bytes | None:
    return None if v is None else bytes(v)


@pytest.mark.parametrize("iso", ISOLATIONS)
def test_spark_read_equals_kafka(kafka_written, spark, iso) -> None:
    log_dir, expected = kafka_written
    assert _spark_rows(spark, log_dir, iso, sorted(kw.TOPICS)) == expected[iso]


def test_view_latest_equals_kafka(kafka_written, spark) -> None:
    log_dir, expected = kafka_written
    latest: dict[bytes, tuple] = {}
    for r in expected["read_committed"]["compacted"]:
        latest[r[3]] = r
    want = sorted((r[3], r[4], r[2]) for r in latest.values() if r[4] is not None)
    df = (
        spark.read.format("kafkalog")
        .option("subscribe", "compacted")
        .option("view", "latest")
        .load(str(log_dir))
    )
    got = sorted((bytes(r["key"]), bytes(r["value"]), r["offset"]) for r in df.collect())
    assert got == want and len(got) == 9  # k3's latest is a tombstone


def test_serve_serves_what_kafka_served(kafka_written, tmp_path) -> None:
    """And what clients do through ``kafkalog serve`` (records, a commit) Kafka 3.9 started
    again on the log dir reads: groups stay on the ``__consumer_offsets`` partition Kafka's
    metadata declares (3 here), not grown to offsets.topic.num.partitions (50)."""
    log_dir, expected = kafka_written
    run = tmp_path / "run"
    shutil.copytree(log_dir, run / "data")
    with ServeProcess(run / "data", stderr=tmp_path / "serve.err") as serve:
        for iso in ISOLATIONS:
            assert kw.read_all(serve.bootstrap, iso) == expected[iso], iso
        assert kw.group_offsets(serve.bootstrap) == kw.GROUP_OFFSETS
        kw.produce_and_commit(serve.bootstrap)
        served = kw.read_all(serve.bootstrap, "read_committed")
        assert serve.terminate() == 0
    assert served["c-gzip"][: kw.CODEC_RECORDS] == expected["read_committed"]["c-gzip"]
    assert [(r[2], r[3], r[4]) for r in served["c-gzip"][kw.CODEC_RECORDS :]] == [
        (kw.CODEC_RECORDS + i, f"s{i}".encode(), f"served-{i}".encode()) for i in range(10)
    ]
    assert sorted(p.name for p in (run / "data").glob("__consumer_offsets-*")) == [
        f"__consumer_offsets-{p}" for p in range(3)
    ]
    with kafka_broker(run) as kafka:  # Kafka 3.9 again, on what kafkalog serve wrote
        assert kw.read_all(kafka.bootstrap, "read_committed") == served
        assert kw.group_offsets(kafka.bootstrap) == {
            **kw.GROUP_OFFSETS,
            "g-classic": {("c-none", 0): 200},
        }


def test_write_then_kafka_reads_it(kafka_written, spark, tmp_path) -> None:
    log_dir, expected = kafka_written
    run = tmp_path / "run"
    shutil.copytree(log_dir, run / "data")
    new = [(f"nk{i}".encode(), f"written-{i}".encode(), "c-none") for i in range(25)]
    df = spark.createDataFrame(new, "key binary, value binary, topic string").coalesce(1)
    df.write.format("kafkalog").mode("append").save(str(run / "data"))
    after = _spark_rows(spark, run / "data", "read_committed", ["c-none", "compacted"])
    assert after["c-none"][: kw.CODEC_RECORDS] == expected["read_committed"]["c-none"]
    assert [(r[2], r[3], r[4]) for r in after["c-none"][kw.CODEC_RECORDS :]] == [
        (kw.CODEC_RECORDS + i, k, v) for i, (k, v, _) in enumerate(new)
    ]
    with kafka_broker(run) as kafka:  # Kafka 3.9 again, on what kafkalog wrote
        again = kw.read_all(kafka.bootstrap, "read_committed")
    assert again["c-none"] == after["c-none"]
    assert {t: rows for t, rows in again.items() if t != "c-none"} == {
        t: rows for t, rows in expected["read_committed"].items() if t != "c-none"
    }
