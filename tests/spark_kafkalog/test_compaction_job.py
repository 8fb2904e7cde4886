"""The compaction job (spark_kafkalog/compaction_job.py) on real log dirs: the Spark run over many
partitions with one log dir owned by a running broker, checked against a plain-Python model of
"latest value per key" and a Spark read of the compacted topic; reruns, the map bound over
several rounds, the time budget, a dir left by a dead owner, a corrupt partition, two runs at
once and runs killed with SIGKILL (``kafkalog compact`` processes), and ``spark-submit`` with
the shipped conf/spark-defaults.conf and conf/log4j2.properties."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker_embedded.storage.log_manager import CLEAN_SHUTDOWN_FILE
from spark_kafkalog.compaction_config import CompactionConfig
from spark_kafkalog.compaction_job import CLEANED, FAILED, SKIPPED, run, run_local

from ._compaction_logdirs import (
    SEGMENT_GLOB,
    TopicModel,
    build_compacted,
    partition_files,
    produce_updates,
)

ROOT = Path(__file__).resolve().parents[2]
KAFKALOG = Path(sys.executable).parent / "kafkalog"


def config_for(*log_dirs: Path, **values) -> CompactionConfig:
    table = {"log_dirs": [str(d) for d in log_dirs], "progress_interval_seconds": 0.2, **values}
    return CompactionConfig.from_mapping({"compaction": table}, "test")


def spark_rows(spark, log_dir: Path, topic: str) -> list[tuple[int, int, bytes, bytes | None]]:
    df = spark.read.format("kafkalog").option("subscribe", topic).load(str(log_dir))
    rows = df.select("partition", "offset", "key", "value").collect()
    return sorted((r.partition, r.offset, bytes(r.key), _b(r.value)) for r in rows)


def spark_count(spark, log_dir: Path, topic: str) -> int:
    """How many records a Spark read of ``topic`` gives (counted by Spark: no rows to Python)."""
    return spark.read.format("kafkalog").option("subscribe", topic).load(str(log_dir)).count()


def _b(v) -> bytes | None:
    return None if v is None else bytes(v)


def assert_compacted(rows: list, model: TopicModel) -> None:
    """What a compacted topic must hold: only records produced, at their offsets, in order, and
    the latest record of every key (Spark's latest per key equals the model's)."""
    produced = model.by_offset()
    for p, offset, key, value in rows:
        assert produced[(p, offset)] == (key, value), (p, offset)
    latest: dict[tuple[int, bytes], tuple[int, bytes | None]] = {}
    for p, offset, key, value in rows:  # sorted by partition, offset
        latest[(p, key)] = (offset, value)
    assert latest == model.latest()
    assert len(rows) < model.count


def test_spark_job_cleans_the_free_dir_and_skips_the_broker_owned_one(spark, tmp_path: Path):
    free, owned = tmp_path / "free", tmp_path / "owned"
    model, _ = build_compacted(free, partitions=6)
    owned_model, broker = build_compacted(owned, "users", 2, keep_open=True)
    assert broker is not None
    try:
        owned_before = {p: partition_files(owned, "users", p) for p in range(2)}
        assert spark_count(spark, free, "profiles") == model.count
        out = io.StringIO()
        report = run(spark, config_for(free, owned), out)
        text = out.getvalue()
        outcomes = report.by_partition()
        assert report.exit_code == 0, text
        for p in range(6):
            o = outcomes[(str(free), "profiles", p)]
            assert (o.status, o.rounds, o.keys) == (CLEANED, 1, 300), text
            assert o.bytes_after < o.bytes_before / 3
        for p in range(2):
            o = outcomes[(str(owned), "users", p)]
            assert o.status == SKIPPED
            assert "owned by pid" in o.reason and "(kafkalog broker 0)" in o.reason
            assert partition_files(owned, "users", p) == owned_before[p]
        assert (str(free), "events", 0) not in outcomes  # not compacted: not a row
        assert "cleaned 6, partial 0, skipped 2, failed 0" in text
        assert re.search(r"profiles-0\s+cleaned", text)
        assert_compacted(spark_rows(spark, free, "profiles"), model)
        assert spark_count(spark, owned, "users") == owned_model.count  # untouched
    finally:
        broker.close()
    # a rerun finds nothing to do and changes nothing
    files = {p: partition_files(free, "profiles", p) for p in range(6)}
    again = run(spark, config_for(free), io.StringIO())
    assert {o.status for o in again.outcomes} == {SKIPPED}
    assert all("nothing cleanable" in o.reason for o in again.outcomes)
    assert {p: partition_files(free, "profiles", p) for p in range(6)} == files


def test_more_keys_than_the_map_holds_are_cleaned_in_rounds(tmp_path: Path) -> None:
    model, _ = build_compacted(tmp_path, partitions=1, keys=4000, batches=200, extra_topics=False)
    map_memory = 24 * 1024  # 1,024 slots, 921 keys a round at load factor 0.9
    report = run_local(config_for(tmp_path, map_memory_per_task=map_memory), io.StringIO())
    (o,) = report.outcomes
    assert o.status == CLEANED
    assert o.rounds >= 4  # 4,000 keys, at most 921 a round
    assert o.keys >= 4000
    rows = [(0, off, k, v) for off, k, v in read_partition(tmp_path, "profiles", 0)]
    assert_compacted(rows, model)


def read_partition(log_dir: Path, topic: str, partition: int) -> list:
    """Every record of a partition, decoded by kafka-python (an independent decoder)."""
    from tests.broker_embedded.cleaner._workload import read_batches

    out = []
    for batch in read_batches(log_dir / f"{topic}-{partition}"):
        out += [(r.offset, r.key, r.value) for r in batch.records]
    return out


def test_time_budget_spent_before_a_partition_starts_skips_it(tmp_path: Path) -> None:
    build_compacted(tmp_path, partitions=2, extra_topics=False)
    files = {p: partition_files(tmp_path, "profiles", p) for p in range(2)}
    report = run_local(config_for(tmp_path, time_budget_seconds=1e-6), io.StringIO())
    assert [(o.status, o.reason) for o in report.outcomes] == [
        (SKIPPED, "the time budget was used up before it started")
    ] * 2
    assert {p: partition_files(tmp_path, "profiles", p) for p in range(2)} == files


def test_dirty_ratio_threshold_and_dry_run(tmp_path: Path) -> None:
    build_compacted(tmp_path, partitions=1, extra_topics=False)
    out = io.StringIO()
    dry = run_local(config_for(tmp_path), out, dry_run=True)
    assert [o.status for o in dry.outcomes] == ["to clean"]
    assert "1 partitions to clean" in out.getvalue()
    run_local(config_for(tmp_path), io.StringIO())
    # new updates make the head dirty again, but well under a 0.99 threshold
    from broker_embedded.broker import Broker

    from ._compaction_logdirs import NO_CLEANER

    with Broker(tmp_path, config=NO_CLEANER, create=True) as b:
        produce_updates(b, "profiles", 1, keys=300, batches=40, seed=9)
    report = run_local(config_for(tmp_path, min_cleanable_dirty_ratio=0.99), io.StringIO())
    (o,) = report.outcomes
    assert o.status == SKIPPED and re.fullmatch(r"dirty ratio 0\.\d\d <= 0\.99", o.reason)


def test_a_dir_left_by_a_dead_owner_is_recovered_then_cleaned(tmp_path: Path) -> None:
    model, _ = build_compacted(tmp_path, partitions=1, extra_topics=False)
    (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()
    active = sorted((tmp_path / "profiles-0").glob(SEGMENT_GLOB))[-1]
    with active.open("ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x99\x99torn")  # a torn tail the owner died writing
    report = run_local(config_for(tmp_path), io.StringIO())
    assert [o.status for o in report.outcomes] == [CLEANED]
    rows = [(0, off, k, v) for off, k, v in read_partition(tmp_path, "profiles", 0)]
    assert_compacted(rows, model)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


def test_a_corrupt_partition_fails_alone(tmp_path: Path) -> None:
    model, _ = build_compacted(tmp_path, partitions=2, extra_topics=False)
    first = sorted((tmp_path / "profiles-1").glob(SEGMENT_GLOB))[0]
    data = bytearray(first.read_bytes())
    data[200] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    first.write_bytes(bytes(data))
    out = io.StringIO()
    report = run_local(config_for(tmp_path), out)
    o0, o1 = report.outcomes
    assert o0.status == CLEANED
    assert o1.status == FAILED and first.name in o1.reason, o1.reason
    assert report.exit_code == 1
    assert "cleaned 1, partial 0, skipped 0, failed 1" in out.getvalue()
    rows = [(0, off, k, v) for off, k, v in read_partition(tmp_path, "profiles", 0)]
    assert_compacted(rows, TopicModel({0: model.records[0]}))


def kafkalog_compact(config: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(KAFKALOG), "compact", "--config", str(config), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )


def write_config(path: Path, log_dir: Path, **values) -> Path:
    lines = [f'log_dirs = ["{log_dir}"]'] + [f"{k} = {v!r}" for k, v in values.items()]
    path.write_text("[compaction]\n" + "\n".join(lines) + "\n")
    return path


def statuses(text: str) -> dict[str, str]:
    return dict(re.findall(r"^\S+\s+(profiles-\d+)\s+(\w+)", text, re.M))


def test_two_runs_at_once_never_clean_a_partition_twice(tmp_path: Path) -> None:
    log_dir = tmp_path / "d"
    model, _ = build_compacted(log_dir, partitions=8, batches=300, extra_topics=False)
    config = write_config(tmp_path / "c.toml", log_dir)
    runs = [kafkalog_compact(config), kafkalog_compact(config)]
    outs = [r.communicate(timeout=300) for r in runs]
    assert [r.returncode for r in runs] == [0, 0], outs
    a, b = (statuses(o) for o, _ in outs)
    assert set(a) == set(b) == {f"profiles-{p}" for p in range(8)}
    for name in a:  # each partition cleaned by exactly one run; the other one skipped it
        assert sorted([a[name], b[name]]) == [CLEANED, SKIPPED], (name, outs)
    for p in range(8):
        rows = [(p, off, k, v) for off, k, v in read_partition(log_dir, "profiles", p)]
        assert_compacted(rows, TopicModel({p: model.records[p]}))


def test_killed_runs_leave_valid_logs_and_a_rerun_finishes(tmp_path: Path) -> None:
    log_dir = tmp_path / "d"
    model, _ = build_compacted(
        log_dir, partitions=4, keys=3000, batches=400, segment_bytes=200_000, extra_topics=False
    )
    config = write_config(
        tmp_path / "c.toml", log_dir, map_memory_per_task=48 * 1024, progress_interval_seconds=0.001
    )
    killed_mid_run = 0
    for pause in (0.0, 0.02, 0.05, 0.1):  # after a round's progress line: in the next round
        proc = kafkalog_compact(config)
        assert proc.stdout is not None
        for line in proc.stdout:
            if ": round " in line:
                time.sleep(pause)
                break
        killed_mid_run += proc.poll() is None
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        dump = subprocess.run(
            [str(KAFKALOG), "dump", "--verify", "--summary", str(log_dir)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert dump.returncode == 0, dump.stdout[-2000:] + dump.stderr
    assert killed_mid_run >= 3
    final = kafkalog_compact(config)
    out, err = final.communicate(timeout=300)
    assert final.returncode == 0, err
    assert set(statuses(out).values()) <= {CLEANED, SKIPPED}
    rerun = kafkalog_compact(config)
    out, err = rerun.communicate(timeout=300)
    assert set(statuses(out).values()) == {SKIPPED}, out
    for p in range(4):
        rows = [(p, off, k, v) for off, k, v in read_partition(log_dir, "profiles", p)]
        assert_compacted(rows, TopicModel({p: model.records[p]}))
        assert not list((log_dir / f"profiles-{p}").glob("*.cleaned"))
        assert not list((log_dir / f"profiles-{p}").glob("*.swap"))


def test_spark_submit_with_the_shipped_config_prints_the_summary_and_no_info(tmp_path: Path):
    """``spark-submit --properties-file conf/spark-defaults.conf jobs/compact.py`` from the
    project root: the summary, its JSON report, and not one INFO line of Spark's."""
    log_dir = tmp_path / "d"
    build_compacted(log_dir, partitions=2, extra_topics=False)
    config = write_config(tmp_path / "c.toml", log_dir)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    spark_submit = Path(sys.executable).parent / "spark-submit"
    report = tmp_path / "report.json"
    result = subprocess.run(
        [
            str(spark_submit),
            "--properties-file",
            "conf/spark-defaults.conf",
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=false",
            "jobs/compact.py",
            "--config",
            str(config),
            "--report",
            str(report),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert statuses(result.stdout) == {"profiles-0": CLEANED, "profiles-1": CLEANED}
    assert "cleaned 2, partial 0, skipped 0, failed 0" in result.stdout
    info = [line for line in (result.stdout + result.stderr).splitlines() if " INFO " in line]
    assert info == [], info[:5]
    assert "[Stage " not in result.stderr  # no console progress bar
    parsed = json.loads(report.read_text())
    assert [(p["partition"], p["status"]) for p in parsed["partitions"]] == [
        (0, CLEANED),
        (1, CLEANED),
    ]
    assert f"kafkalog compaction run {parsed['run_id']} " in result.stdout


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({}, "compaction config log_dirs is required"),
        ({"log_dirs": "x"}, "invalid value 'x' for compaction config log_dirs"),
        ({"log_dirs": ["x"], "mapMemory": 1}, "unknown compaction config 'mapMemory'"),
        ({"log_dirs": ["x"], "map_memory_per_task": 100}, "must be an integer in [24576, "),
        ({"log_dirs": ["x"], "load_factor": 0}, "load_factor: must be a number in (0, 1]"),
        ({"log_dirs": ["x"], "topics": ["("]}, "for compaction config topics: not a regular"),
        ({"log_dirs": ["x"], "time_budget_seconds": True}, "time_budget_seconds: must be a"),
    ],
)
def test_config_errors_name_key_and_value(table: dict, message: str) -> None:
    from broker_embedded.storage.log_config import InvalidConfigError

    with pytest.raises(InvalidConfigError, match=re.escape(message)):
        CompactionConfig.from_mapping({"compaction": table}, "c.toml")


def test_default_config_file(tmp_path: Path) -> None:
    config = CompactionConfig.load(ROOT / "conf" / "compaction.toml")
    assert config.log_dirs == (Path.cwd() / "demo-logdir",)
    assert config.topics == (".*",)
    assert (config.map_memory_per_task, config.load_factor) == (128 << 20, 0.9)
    assert config.min_cleanable_dirty_ratio is None
    missing = subprocess.run(
        [str(KAFKALOG), "compact", "--config", str(tmp_path / "no.toml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2  # bad configuration
    assert f"compaction config file {tmp_path / 'no.toml'} does not exist" in missing.stderr
    no_dir = write_config(tmp_path / "c.toml", tmp_path / "nowhere")
    result = subprocess.run(
        [str(KAFKALOG), "compact", "--config", str(no_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert f"log dir {tmp_path / 'nowhere'} (compaction config log_dirs) does not exist" in (
        result.stderr
    )


def test_spark_reads_during_a_run_see_the_latest_value_of_every_key(spark, tmp_path: Path):
    log_dir = tmp_path / "d"
    model, _ = build_compacted(
        log_dir, partitions=6, keys=3000, batches=400, segment_bytes=200_000, extra_topics=False
    )
    config = write_config(
        tmp_path / "c.toml", log_dir, map_memory_per_task=24 * 1024, progress_interval_seconds=0.001
    )
    # a progress line a round: the output stays far below the pipe's buffer
    produced, expected = model.by_offset(), model.latest()
    proc = kafkalog_compact(config)
    assert proc.stdout is not None
    assert ": round " in next(line for line in proc.stdout if ": round " in line)
    reads = 0
    while proc.poll() is None:  # the job swaps segments under these reads
        rows = spark_rows(spark, log_dir, "profiles")
        assert all(produced[(p, o)] == (k, v) for p, o, k, v in rows)
        latest = {}
        for p, offset, key, value in rows:
            latest[(p, key)] = (offset, value)
        assert latest == expected
        reads += 1
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert reads >= 1  # each began while the job was cleaning (rounds went on after it)
    assert out.count(": round ") >= 6
    assert_compacted(spark_rows(spark, log_dir, "profiles"), model)


def test_a_partition_deleted_after_planning_is_skipped(tmp_path: Path) -> None:
    from spark_kafkalog.compaction_job import clean_partition, new_settings, plan

    build_compacted(tmp_path, partitions=2, extra_topics=False)
    settings = new_settings(config_for(tmp_path))
    tasks = plan(settings).tasks
    assert sorted(t.partition for t in tasks) == [0, 1]
    from broker_embedded.broker import Broker

    from ._compaction_logdirs import NO_CLEANER

    with Broker(tmp_path, config=NO_CLEANER, create=True) as b:
        b.delete_topic("profiles")
    outcomes = [clean_partition(t, settings) for t in tasks]
    assert {(o.status, o.reason) for o in outcomes} == {
        (SKIPPED, "the partition was deleted after planning")
    }


def test_the_time_budget_stops_a_partition_midway_and_a_rerun_finishes(tmp_path: Path) -> None:
    from dataclasses import replace

    from spark_kafkalog.compaction_job import PARTIAL, clean_partition, new_settings, plan

    model, _ = build_compacted(
        tmp_path, partitions=1, keys=20_000, batches=1000, segment_bytes=500_000, extra_topics=False
    )
    config = config_for(tmp_path, map_memory_per_task=24 * 1024)
    settings = new_settings(config)
    (task,) = plan(settings).tasks
    o = clean_partition(task, replace(settings, deadline=time.time() + 0.1))
    assert o.status == PARTIAL, o
    assert re.fullmatch(r"the time budget ran out (in|after) round \d+", o.reason), o.reason
    dump = subprocess.run(
        [str(KAFKALOG), "dump", "--verify", "--summary", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dump.returncode == 0, dump.stderr
    report = run_local(config, io.StringIO())
    assert [x.status for x in report.outcomes] == [CLEANED]
    assert o.rounds + report.outcomes[0].rounds >= 22  # 20,000 keys, 921 a round
    rows = [(0, off, k, v) for off, k, v in read_partition(tmp_path, "profiles", 0)]
    assert_compacted(rows, model)
